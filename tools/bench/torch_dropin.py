"""Every everyday PyTorch memory feature under PyTorch's own allocator and under cudalloc, in
one run: a pass/fail table (tools/bench/torch_features.py has the features).

    python3 tools/bench/torch_dropin.py [--modes native,cudalloc,pluggable] [--only A,B]
                                          [--jobs 4] [--json OUT]

Modes: native (PyTorch's caching allocator), cudalloc (cudalloc.enable(): the C++ adapter
when built), pluggable (cudalloc.enable(adapter=False): CUDAPluggableAllocator). Each
feature runs in a fresh process per mode. Where a feature returns a "value" (deterministic
work: losses, generated tokens), the table also says whether it equals native's.
Exit status: 0 when every feature passes under cudalloc, 1 otherwise.
"""
import argparse
import concurrent.futures
import json
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import child  # noqa: E402

MODES = ("native", "cudalloc", "pluggable")
MODE_ENV = "CUDALLOC_DROPIN_MODE"


def _setup(mode):
    """Installs the allocator of `mode`; also in spawned children (the IPC feature), which
    import this module again with MODE_ENV set."""
    if mode == "native":
        return
    cudalloc = child.import_cudalloc()
    cudalloc.enable(adapter=(mode == "cudalloc"))


def child_main(name, mode):
    _setup(mode)
    import torch
    import torch_features
    group, fn = torch_features.FEATURES[name]
    try:
        result = fn(torch)
        result.update(status="pass")
    except Exception as e:  # the failure is the result
        traceback.print_exc()
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        result = {"status": "fail", "detail": f"{type(e).__name__}: {first}"[:160]}
    child.print_result(result)


def run_one(name, mode, timeout):
    import torch_features
    cmd = child.script_command(__file__, "--child", name, "--mode", mode)
    env = child.child_env({MODE_ENV: mode, **child.DETERMINISTIC_ENV,
                           **torch_features.ENV[name]})
    run = child.run_child(cmd, env=env, timeout=timeout, capture_stderr=True)
    result = run.checked_result()
    if result.get("status") == "failed":
        result = {"status": "fail", "detail": f"{result['message']}: "
                  + " | ".join(run.tail(2))[:160]}
    if result.get("status") != "pass":
        result["stderr"] = (run.stderr or "")[-6000:]  # kept in --json for diagnosis
    return name, mode, result


def table(names, modes, results):
    lines = []
    head = f"| feature | " + " | ".join(modes) + " | same values as native |"
    lines += [head, "|" + "---|" * (len(modes) + 2)]
    for name in names:
        cells = []
        for mode in modes:
            r = results[(name, mode)]
            mark = "pass" if r["status"] == "pass" else "**FAIL**"
            cells.append(f"{mark}: {r.get('detail', '')}".replace("|", "/"))
        values = [results[(name, m)].get("value") for m in modes]
        same = "-"
        if "native" in modes and values[modes.index("native")] is not None:
            native = values[modes.index("native")]
            same = ", ".join(f"{m} {'yes' if v == native else 'NO'}"
                             for m, v in zip(modes, values) if m != "native" and v is not None)
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {same or '-'} |")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--modes", default="native,cudalloc,pluggable")
    p.add_argument("--only", default="")
    p.add_argument("--jobs", type=int, default=4)
    p.add_argument("--timeout", type=float, default=300)
    p.add_argument("--json", default="")
    p.add_argument("--child", default="")
    p.add_argument("--mode", default="native")
    args = p.parse_args()
    if args.child:
        return child_main(args.child, args.mode)
    reason = child.skip_reason(("torch",))
    if reason:
        print(f"skipped: {reason}")
        return child.SKIP
    import torch_features
    names = [n for n in torch_features.FEATURES if not args.only or n in args.only.split(",")]
    modes = [m for m in args.modes.split(",") if m in MODES]
    results = {}
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(run_one, n, m, args.timeout) for n in names for m in modes]
        for f in concurrent.futures.as_completed(futures):
            name, mode, result = f.result()
            results[(name, mode)] = result
            print(f"{name:32s} {mode:10s} {result['status']:5s} {result.get('detail', '')}",
                  flush=True)
    print()
    print(table(names, modes, results))
    passed = {m: sum(results[(n, m)]["status"] == "pass" for n in names) for m in modes}
    print("\n" + ", ".join(f"{m} {passed[m]}/{len(names)}" for m in modes))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({f"{n}/{m}": r for (n, m), r in results.items()}, f, indent=1)
    return 0 if "cudalloc" not in modes or passed["cudalloc"] == len(names) else 1


if __name__ == "__mp_main__" and os.environ.get(MODE_ENV):
    _setup(os.environ[MODE_ENV])  # a spawned child of a feature: the same allocator
if __name__ == "__main__":
    sys.exit(main())
