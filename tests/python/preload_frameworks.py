#!/usr/bin/env python3
"""LD_PRELOAD=libcudalloc_preload.so under PyTorch, CuPy and JAX with their own caching turned
off, against each library's default pool (a benchmark and a correctness check; GPU only,
exits 77 without one, or when none of the frameworks is installed). Each configuration runs
in its own process:

  torch  GPT-2 small training (8 x 1024 tokens, bf16 autocast, AdamW), median step time and
         losses: native caching allocator / PYTORCH_NO_CUDA_MEMORY_CACHING=1 / the same under
         cudalloc
  cupy   an elementwise and matmul loop allocating every iteration: default pool /
         set_allocator(None) / the same under cudalloc
  jax    a jitted loop: default allocator / XLA_PYTHON_CLIENT_ALLOCATOR=platform / the same
         under cudalloc

usage: preload_frameworks.py PRELOAD_LIBRARY [--json PATH] [--only torch,cupy,jax]
"""
import importlib.util
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "tools", "bench"))
from child import SKIP, print_result, run_child, script_command, skip_reason  # noqa: E402
from workloads import gpt2_small, gpt2_tokens, lm_loss  # noqa: E402


def torch_child(steps=12, warmup=3):
    import torch
    torch.manual_seed(0)
    m = gpt2_small().cuda()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    gen = torch.Generator(device="cuda").manual_seed(1)
    losses, times = [], []
    for i in range(warmup + steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        x = gpt2_tokens(torch, generator=gen)
        loss = lm_loss(torch, m, x)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss))
        torch.cuda.synchronize()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return {"median_s": statistics.median(times), "min_s": min(times), "losses": losses}


def cupy_child(iterations=3000):
    import cupy as cp
    if os.environ.get("CUPY_NO_POOL") == "1":
        cp.cuda.set_allocator(None)
    rng = cp.random.default_rng(0)
    a = rng.standard_normal((256, 256), dtype=cp.float32)
    acc = cp.zeros((256, 256), dtype=cp.float32)
    cp.cuda.Device().synchronize()
    t0 = time.perf_counter()
    for i in range(iterations):
        n = 1 << (10 + i % 8)
        v = cp.arange(n, dtype=cp.float32) * 0.5 + 1.0  # new arrays every iteration
        acc += (a @ a) * float(v[:4].sum() > 0) * 1e-6
        del v
    cp.cuda.Device().synchronize()
    seconds = time.perf_counter() - t0
    return {"us_per_iter": seconds / iterations * 1e6, "checksum": float(acc.sum())}


def jax_child(iterations=300):
    import jax
    import jax.numpy as jnp

    @jax.jit
    def step(x, y):
        return jnp.tanh(x @ y) + 0.5 * x

    key = jax.random.PRNGKey(0)
    x = jax.random.normal(key, (512, 512))
    y = jax.random.normal(jax.random.PRNGKey(1), (512, 512)) * 0.01
    x = step(x, y).block_until_ready()
    t0 = time.perf_counter()
    for i in range(iterations):
        z = jnp.ones((1024 + i % 64, 256)) * i  # a fresh buffer per iteration
        x = step(x, y) + z[:512, :1].sum() * 0.0
    x.block_until_ready()
    seconds = time.perf_counter() - t0
    return {"us_per_iter": seconds / iterations * 1e6, "checksum": float(jnp.sum(x))}


CONFIGS = {
    "torch": [("native", {}), ("no-cache", {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}),
              ("no-cache + cudalloc", {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1", "PRELOAD": "1"})],
    "cupy": [("pool", {}), ("no-pool", {"CUPY_NO_POOL": "1"}),
             ("no-pool + cudalloc", {"CUPY_NO_POOL": "1", "PRELOAD": "1"})],
    "jax": [("default", {}), ("platform", {"XLA_PYTHON_CLIENT_ALLOCATOR": "platform"}),
            ("platform + cudalloc", {"XLA_PYTHON_CLIENT_ALLOCATOR": "platform", "PRELOAD": "1"})],
}


def cudalloc_stats():
    """The preload library's own counters (its C API is exported)."""
    import ctypes
    lib = ctypes.CDLL(None)
    try:
        get, name = lib.cudalloc_get_stats, lib.cudalloc_stat_name
    except AttributeError:
        return None

    class Stat(ctypes.Structure):
        _fields_ = [("current", ctypes.c_int64), ("peak", ctypes.c_int64), ("total", ctypes.c_int64)]

    class Stats(ctypes.Structure):
        _fields_ = [("count", ctypes.c_int32), ("device", ctypes.c_int32), ("values", Stat * 64)]

    name.restype = ctypes.c_char_p
    s = Stats()
    if get(0, ctypes.byref(s)) != 0:
        return None
    return {name(i).decode(): {"current": s.values[i].current, "peak": s.values[i].peak,
                               "total": s.values[i].total} for i in range(s.count)}


def child_main(framework):
    result = {"torch": torch_child, "cupy": cupy_child, "jax": jax_child}[framework]()
    stats = cudalloc_stats()
    if stats:
        result["cudalloc"] = {k: stats[k] for k in ("allocated_count", "reserved_bytes",
                                                   "cache_hits", "device_allocs", "ooms")}
    print_result(result)
    return 0


def run(framework, label, extra, preload):
    env = dict(os.environ)
    env.update({k: v for k, v in extra.items() if k != "PRELOAD"})
    if extra.get("PRELOAD"):
        env["LD_PRELOAD"] = preload
    env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    t0 = time.time()
    run = run_child(script_command(__file__, "--child", framework), env=env, timeout=240,
                    capture_stderr=True)
    if run.result is not None:
        return dict(run.result, wall_s=time.time() - t0)
    return {"error": f"{run.failure()}: " + " | ".join(run.tail(3))}


def main(argv):
    if "--child" in argv:
        return child_main(argv[argv.index("--child") + 1])
    preload = os.path.abspath(argv[0])
    only = argv[argv.index("--only") + 1].split(",") if "--only" in argv else list(CONFIGS)
    reason = skip_reason(modules=()) if importlib.util.find_spec("torch") else None
    if reason:  # no CUDA device
        print(f"SKIP: {reason}")
        return SKIP
    results = {}
    for fw in only:
        try:
            __import__(fw)
        except Exception as e:  # the framework is not installed here
            results[fw] = {"skipped": str(e)}
            continue
        results[fw] = {label: run(fw, label, extra, preload) for label, extra in CONFIGS[fw]}
    ok = True
    for fw, runs in results.items():
        print(f"== {fw}")
        if "skipped" in runs:
            print(f"   skipped: {runs['skipped']}")
            continue
        base = None
        for label, r in runs.items():
            if "error" in r:
                ok = False
                print(f"   {label:22s} FAILED {r['error']}")
                continue
            figure = r.get("median_s", 0) * 1e3 if fw == "torch" else r["us_per_iter"]
            unit = "ms/step" if fw == "torch" else "us/iter"
            base = base or figure
            extra = f"  cudalloc: {r['cudalloc']}" if "cudalloc" in r else ""
            check = r.get("losses", [None])[-1] if fw == "torch" else r["checksum"]
            print(f"   {label:22s} {figure:10.2f} {unit}  ({figure / base:.2f}x)  last={check}{extra}")
        values = [r for r in runs.values() if "error" not in r]
        if fw == "torch" and len(values) == 3:
            ref = values[0]["losses"]
            for r in values[1:]:
                diff = max(abs(a - b) / max(abs(a), 1e-9) for a, b in zip(ref, r["losses"]))
                print(f"   max relative loss difference vs native: {diff:.2e}")
                ok = ok and diff < 2e-2
        elif len(values) == 3:
            ref = values[0]["checksum"]
            for r in values[1:]:
                same = abs(r["checksum"] - ref) <= 1e-3 * max(1.0, abs(ref))
                print(f"   checksum {'matches' if same else 'DIFFERS'}: {r['checksum']} vs {ref}")
                ok = ok and same
    if "--json" in argv:
        with open(argv[argv.index("--json") + 1], "w") as f:
            json.dump(results, f, indent=2)
    if all("skipped" in runs for runs in results.values()):
        print("SKIP: none of " + ", ".join(only) + " is installed")
        return SKIP
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
