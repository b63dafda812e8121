#!/usr/bin/env python3
"""Times `x = torch.empty(n, dtype=torch.uint8, device='cuda'); del x` from Python, with
PyTorch's native allocator, with cudalloc (cudalloc.enable(): the C++ adapter where built),
with cudalloc through CUDAPluggableAllocator (enable(adapter=False)) and with the cheapest
possible pluggable allocator (libpluggable_floor.so next to libcudalloc.so: the cost of
PyTorch's pluggable wrapper itself), each in its own process.

    python3 tools/bench/torch_empty_bench.py [--json PATH] [--iters N] [--runs R]

For each size: a warm-up, then R runs of N pairs; prints the median (and fastest) run in
microseconds per pair. The library comes from $CUDALLOC_LIBRARY or the usual places.
Exit status: 0 every mode gave figures, 1 one did not, 77 no torch or no CUDA device.
"""
import argparse
import json
import os
import statistics
import sys
import time

from child import (SKIP, import_cudalloc, print_result, run_child as run_script, script_command,
                   skip_reason)

SIZES = [512, 64 << 10, 1 << 20, 64 << 20]
MODES = ["native", "cudalloc", "pluggable", "floor"]


def _pairs(torch, n, iters):
    for _ in range(iters):
        x = torch.empty(n, dtype=torch.uint8, device="cuda")
        del x


def _time_size(torch, n, iters, runs, warmup):
    _pairs(torch, n, warmup)
    times = []
    for _ in range(runs):
        torch.cuda.synchronize()
        start = time.perf_counter()
        _pairs(torch, n, iters)
        times.append((time.perf_counter() - start) / iters * 1e6)
    return {"median_us": statistics.median(times), "min_us": min(times), "runs_us": times}


def _enable_floor():
    import torch
    cudalloc = import_cudalloc()
    path = os.path.join(os.path.dirname(cudalloc.library_path()), "libpluggable_floor.so")
    alloc = torch.cuda.memory.CUDAPluggableAllocator(path, "floor_malloc", "floor_free")
    torch.cuda.memory.change_current_allocator(alloc)


def child_main(mode, iters, runs, warmup):
    meta = {"mode": mode}
    if mode in ("cudalloc", "pluggable"):
        cudalloc = import_cudalloc()
        cudalloc.enable(adapter=None if mode == "cudalloc" else False)  # before CUDA is used
        meta.update(cudalloc_version=cudalloc.version(), library=cudalloc.library_path(),
                    integration=cudalloc.mode())
    if mode == "floor":
        _enable_floor()
    import torch
    torch.empty(1, device="cuda")  # initialise CUDA outside the timed loops
    meta.update(torch=torch.__version__, device=torch.cuda.get_device_name())
    meta["sizes"] = {str(n): _time_size(torch, n, iters, runs, warmup) for n in SIZES}
    print_result(meta)
    return 0


def run_child(mode, args):
    cmd = script_command(__file__, "--child", mode, "--iters", args.iters, "--runs", args.runs,
                         "--warmup", args.warmup)
    run = run_script(cmd, echo_prefix=f"[{mode}] ")
    if run.result is None:
        print(f"{mode}: no result (exit status {run.returncode})", file=sys.stderr)
    return run.result


def _size_name(n):
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def _figure(result, n, key="median_us"):
    return result["sizes"][str(n)][key] if result else None


def print_table(results, args):
    print(f"torch.empty + del, us per pair: median of {args.runs} runs x {args.iters} "
          f"(fastest run in brackets)")
    for mode in MODES:
        r = results.get(mode)
        if r:
            extra = (f", cudalloc {r['cudalloc_version']} ({r.get('integration')})"
                     if "cudalloc_version" in r else "")
            print(f"  {mode}: torch {r['torch']} on {r['device']}{extra}")
    print(f"{'size':>8} | {'native':>16} | {'cudalloc':>16} | {'cudalloc pluggable':>18} | "
          f"{'pluggable floor':>16} | {'cudalloc/native':>15}")
    print("-" * 106)
    for n in SIZES:
        cells = []
        for mode in MODES:
            med, best = (_figure(results.get(mode), n, k) for k in ("median_us", "min_us"))
            cells.append(f"{med:7.3f} ({best:6.3f})" if med is not None else "n/a")
        nat, cud = (_figure(results.get(m), n) for m in MODES[:2])
        ratio = f"{cud / nat:.2f}x" if nat and cud else "n/a"
        print(f"{_size_name(n):>8} | {cells[0]:>16} | {cells[1]:>16} | {cells[2]:>18} | "
              f"{cells[3]:>16} | {ratio:>15}")


def parse_args(argv):
    p = argparse.ArgumentParser(description="Times torch.empty + del, native vs cudalloc.")
    p.add_argument("--json", metavar="PATH", help="also write the figures as JSON here")
    p.add_argument("--iters", type=int, default=20000, help="pairs per timed run")
    p.add_argument("--runs", type=int, default=7, help="timed runs per size")
    p.add_argument("--warmup", type=int, default=2000, help="untimed pairs per size")
    p.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if args.child:
        return child_main(args.child, args.iters, args.runs, args.warmup)
    reason = skip_reason()
    if reason:
        print(f"SKIP: {reason}")
        return SKIP
    results = {mode: run_child(mode, args) for mode in MODES}
    print_table(results, args)
    if args.json:
        doc = {"benchmark": "torch_empty_del", "unit": "us_per_pair", "iters": args.iters,
               "runs": args.runs, "warmup": args.warmup, "sizes": SIZES, "results": results}
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
