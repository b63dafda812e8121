#!/usr/bin/env python3
"""GPT-2 small training with AdamW's state offloaded to host memory between steps.

    PYTHONPATH=tools/python python3 examples/offload/adamw_offload.py [--steps N] [--json PATH]

The model and step are the gpt2_train workload of tools/bench/workloads.py (GPT-2 small:
12 layers, 768 wide, 12 heads, 1024 positions; batch 8 x 1024 tokens, bf16 autocast, AdamW
lr 1e-4, seed 0, deterministic kernels). It runs twice, each time in a fresh child process
(PyTorch's allocator can be chosen only once per process, before CUDA is used):

  plain    cudalloc.enable(), CUDALLOC_CONF without offload;
  offload  cudalloc.enable() with CUDALLOC_CONF=offload:host; after each opt.step() every
           optimizer state tensor (exp_avg, exp_avg_sq) is moved to host memory with
           cudalloc.offload_optimizer_state(), and after the next backward, before opt.step(),
           moved back with cudalloc.prefetch_optimizer_state(). The tensors keep their
           addresses and stay CUDA tensors; no kernel uses them during either call.

Per mode: peak device memory (cudalloc's reserved_bytes peak) and peak allocated, the median
step time over the steps after 2 warm-up steps (torch.cuda.synchronize() around each step,
moves included), and each step's loss. Then the comparison: memory saved, step-time cost,
and the losses (the moves copy bytes and deterministic kernels are on, so they should be
bitwise equal; a relative difference up to 1e-3 is tolerated, because
torch.use_deterministic_algorithms(warn_only=True) leaves ops without a deterministic kernel
as they are).

Exit status: 0 both ran and the losses agree; 1 a child failed, the losses differ by more than
1e-3 relative, or the offload mode moved nothing to the host; 77 torch or transformers is
missing, or there is no CUDA device. CUDALLOC_CONF from the environment (or --conf) is the
base for both modes; offload, host_limit and promote keys are dropped from it for plain.
"""
import argparse
import importlib.util
import json
import math
import os
import statistics
import sys
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "tools", "bench"))
from child import (DETERMINISTIC_ENV, SKIP, child_env, import_cudalloc,  # noqa: E402
                   make_deterministic, print_result, run_child as run_script, script_command)
from workloads import Gpt2Train  # noqa: E402

WARMUP = 2
RTOL = 1e-3
MODES = ["plain", "offload"]
OFFLOAD_KEYS = {"offload", "host_limit", "promote"}
COUNTERS = ["spills", "page_offloads", "page_prefetches", "page_maps", "page_unmaps",
            "device_allocs"]
MIB = float(1 << 20)
GIB = float(1 << 30)


# ---- Child side -----------------------------------------------------------------------

def _state_residency(torch, cudalloc, opt, where=True):
    """Bytes of the optimizer state that offload_optimizer_state() moves (CUDA tensors of at
    least 2 MiB), and with `where`, how much of it lies on the device and on the host."""
    out = {"state_bytes": 0, "device_bytes": 0, "host_bytes": 0}
    for state in opt.state.values():
        for value in state.values():
            if torch.is_tensor(value) and value.is_cuda:
                nbytes = value.untyped_storage().nbytes()
                if nbytes < (2 << 20):
                    continue
                out["state_bytes"] += nbytes
                if where:
                    r = cudalloc.residency(value)
                    out["device_bytes"] += r["device_bytes"]
                    out["host_bytes"] += r["host_bytes"]
    if not where:
        del out["device_bytes"], out["host_bytes"]
    return out


def _counters(cudalloc):
    s = cudalloc.stats()
    return {n: s.get(n, {}).get("total", 0) for n in COUNTERS}


def child_main(mode, steps):
    cudalloc = import_cudalloc()
    cudalloc.enable()  # before the first CUDA tensor
    import torch
    result = {"mode": mode, "status": "ok", "message": "", "steps": steps, "step_ms": [],
              "losses": [], "counter_deltas": [], "torch": torch.__version__,
              "cudalloc_conf": os.environ.get("CUDALLOC_CONF", "")}
    if not torch.cuda.is_available():
        result.update(status="skipped", message="CUDA is not available")
        print_result(result)
        return 0
    result.update(device=torch.cuda.get_device_name(), cudalloc_version=cudalloc.version(),
                  library=cudalloc.library_path())
    make_deterministic(torch)
    torch.manual_seed(0)
    offload = mode == "offload"
    try:
        # The state exists from the first opt.step() on; offload moves it off the device
        # for forward and backward, and back for the update.
        step = (Gpt2Train(torch, cudalloc.prefetch_optimizer_state,
                          cudalloc.offload_optimizer_state) if offload else Gpt2Train(torch))
        opt = step.optimizer
        before = _counters(cudalloc)
        for i in range(steps):
            torch.cuda.synchronize()
            start = time.perf_counter()
            loss = step(i)
            torch.cuda.synchronize()
            result["step_ms"].append((time.perf_counter() - start) * 1e3)
            result["losses"].append(float(loss))
            del loss
            after = _counters(cudalloc)
            result["counter_deltas"].append({n: after[n] - before[n] for n in after})
            before = after
        torch.cuda.synchronize()
        # Outside the timed steps: where the state lies now (offload: on the host), and,
        # after a prefetch, that it comes back.
        result["state_after_steps"] = _state_residency(torch, cudalloc, opt, where=offload)
        if offload:
            cudalloc.prefetch_optimizer_state(opt)
            result["state_after_prefetch"] = _state_residency(torch, cudalloc, opt)
    except Exception as e:
        result.update(status="error", message=f"{type(e).__name__}: {str(e)[:2000]}")
        traceback.print_exc()
    try:
        s = cudalloc.stats()
        result["peak_reserved"] = s["reserved_bytes"]["peak"]
        result["peak_allocated"] = s["allocated_bytes"]["peak"]
        result["stats_end"] = {n: s[n] for n in ("host_reserved_bytes", "host_active_bytes",
                                                 "spills", "page_offloads", "page_prefetches")
                               if n in s}
    except Exception as e:  # a sticky CUDA error after a failed step
        result["message"] += f"; reading stats: {type(e).__name__}: {e}"
    print_result(result)
    return 0


# ---- Parent side ----------------------------------------------------------------------

def conf_for(mode, base):
    """CUDALLOC_CONF of a child: `base` without offload keys, plus offload:host for offload."""
    parts = [p.strip() for p in base.split(",") if p.strip()
             and p.split(":", 1)[0].strip().lower() not in OFFLOAD_KEYS]
    if mode == "offload":
        parts.append("offload:host")
    return ",".join(parts)


def run_child(mode, args):
    base = args.conf if args.conf is not None else os.environ.get("CUDALLOC_CONF", "")
    env = child_env(dict(DETERMINISTIC_ENV, PYTORCH_CUDA_ALLOC_CONF=None,
                         CUDALLOC_CONF=conf_for(mode, base)))
    cmd = script_command(__file__, "--child", mode, "--steps", args.steps)
    print(f"== {mode}: CUDALLOC_CONF={env['CUDALLOC_CONF'] or '(none)'}", flush=True)
    start = time.perf_counter()
    run = run_script(cmd, env=env, timeout=args.child_timeout, echo_prefix=f"  [{mode}] ")
    result = run.checked_result()
    result.update(mode=mode, wall_s=time.perf_counter() - start)
    return result


def median_ms(res):
    timed = res.get("step_ms", [])[WARMUP:]
    return statistics.median(timed) if timed else None


def losses_diff(a, b):
    """{"max_abs", "max_rel", "equal", "same_length"} of two loss lists, or None."""
    if not a or not b:
        return None
    max_abs = max_rel = 0.0
    for x, y in zip(a, b):
        if x == y:
            continue
        if not (math.isfinite(x) and math.isfinite(y)):
            max_abs = max_rel = math.inf
            break
        max_abs = max(max_abs, abs(x - y))
        max_rel = max(max_rel, abs(x - y) / max(abs(x), abs(y), 1e-30))
    return {"max_abs": max_abs, "max_rel": max_rel, "equal": max_abs == 0.0 and len(a) == len(b),
            "same_length": len(a) == len(b)}


def print_mode(res):
    print(f"-- {res['mode']}: {res['status']}" + (f" ({res['message']})" if res.get("message")
                                                  else ""))
    if res.get("peak_reserved") is not None:
        print(f"   peak device memory (reserved) {res['peak_reserved'] / GIB:.3f} GiB, "
              f"peak allocated {res['peak_allocated'] / GIB:.3f} GiB")
    med = median_ms(res)
    if med is not None:
        print(f"   median step {med:.1f} ms over {len(res['step_ms']) - WARMUP} steps "
              f"(after {WARMUP} warm-up steps); all: "
              + " ".join(f"{t:.1f}" for t in res["step_ms"]))
    if res.get("losses"):
        print("   losses: " + " ".join(f"{x:.9g}" for x in res["losses"]))
    for key in ("state_after_steps", "state_after_prefetch"):
        r = res.get(key)
        if r:
            where = (f", on device {r['device_bytes'] / MIB:.1f} MiB, on host "
                     f"{r['host_bytes'] / MIB:.1f} MiB" if "host_bytes" in r else "")
            print(f"   optimizer state {key[6:].replace('_', ' ')}: "
                  f"{r['state_bytes'] / MIB:.1f} MiB{where}")
    if res.get("stats_end"):
        print("   " + ", ".join(f"{n} total {v['total']} peak {v['peak']}"
                                for n, v in res["stats_end"].items()))


def compare(plain, offl):
    """The comparison dict and the list of reasons to fail."""
    cmp_ = {}
    problems = []
    if plain.get("peak_reserved") and offl.get("peak_reserved") is not None:
        saved = plain["peak_reserved"] - offl["peak_reserved"]
        cmp_.update(saved_bytes=saved, saved_pct=100.0 * saved / plain["peak_reserved"])
    if plain.get("peak_allocated") and offl.get("peak_allocated") is not None:
        cmp_["saved_allocated_bytes"] = plain["peak_allocated"] - offl["peak_allocated"]
    mp, mo = median_ms(plain), median_ms(offl)
    if mp and mo:
        cmp_["step_time_cost_pct"] = (mo / mp - 1) * 100
    diff = losses_diff(plain.get("losses"), offl.get("losses"))
    cmp_["losses"] = diff
    if diff is None:
        problems.append("no losses to compare")
    elif diff["max_rel"] > RTOL or not diff["same_length"]:
        problems.append(f"losses differ: max relative {diff['max_rel']:.3g} > {RTOL:g}"
                        if diff["max_rel"] > RTOL else "loss lists differ in length")
    moved = (offl.get("state_after_steps") or {}).get("host_bytes", 0)
    if not moved:
        problems.append("the offload mode left no optimizer state on the host")
    return cmp_, problems


def print_comparison(cmp_, problems):
    print("-- comparison (offload against plain)")
    if "saved_bytes" in cmp_:
        print(f"   peak device memory saved: {cmp_['saved_bytes'] / GIB:.3f} GiB "
              f"({cmp_['saved_pct']:.1f}%); peak allocated saved "
              f"{cmp_.get('saved_allocated_bytes', 0) / GIB:.3f} GiB")
    if "step_time_cost_pct" in cmp_:
        print(f"   step time cost: {cmp_['step_time_cost_pct']:+.1f}%")
    d = cmp_.get("losses")
    if d:
        print("   losses: " + ("bitwise equal" if d["equal"] else
                               f"max abs diff {d['max_abs']:.3g}, max rel {d['max_rel']:.3g}"))
    for p in problems:
        print(f"   FAIL: {p}")


def write_json(path, doc):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, path)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=8,
                   help=f"steps per mode, {WARMUP} warm-up steps included (default 8)")
    p.add_argument("--json", metavar="PATH", help="write both runs and the comparison here")
    p.add_argument("--conf", help="base CUDALLOC_CONF (default: the environment's)")
    p.add_argument("--child-timeout", type=float, default=300, metavar="S",
                   help="seconds per child before it is killed (default 300)")
    p.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.steps <= WARMUP:
        p.error(f"--steps must be more than the {WARMUP} warm-up steps")
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.child:
        return child_main(args.child, args.steps)
    missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
    if missing:
        print(f"SKIP: {', '.join(missing)} not installed")
        return SKIP
    results = {}
    for mode in MODES:
        results[mode] = run_child(mode, args)
        print_mode(results[mode])
    doc = {"example": "adamw_offload", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "argv": sys.argv[1:], "warmup_steps": WARMUP, "rtol": RTOL, "runs": results}
    statuses = [r["status"] for r in results.values()]
    if all(s == "skipped" for s in statuses):
        print("SKIP: " + results["plain"].get("message", "skipped"))
        code = SKIP
    elif any(s != "ok" for s in statuses):
        print("FAIL: " + "; ".join(f"{m}: {r['status']} {r.get('message', '')}"
                                   for m, r in results.items() if r["status"] != "ok"))
        code = 1
    else:
        cmp_, problems = compare(results["plain"], results["offload"])
        doc["comparison"] = cmp_
        print_comparison(cmp_, problems)
        code = 1 if problems else 0
        print("OK" if code == 0 else "FAIL")
    doc["exit_status"] = code
    if args.json:
        write_json(args.json, doc)
    return code


if __name__ == "__main__":
    sys.exit(main())
