#!/usr/bin/env python3
"""Data-parallel GPT-2 small on two GPUs (torchrun, one process per GPU, NCCL) under three
allocators, with a table of per-GPU peak reserved memory, step time and losses.

    python3 examples/multi_gpu/ddp_gpt2.py [--gpus 2] [--steps 10] [--modes native,cudalloc,preload]
        [--preload build/libcudalloc_preload.so] [--json PATH]

Modes (each a separate torchrun launch):
  native    PyTorch's caching allocator;
  cudalloc  cudalloc.enable() in every worker (the pluggable allocator);
  preload   LD_PRELOAD=libcudalloc_preload.so with PYTORCH_NO_CUDA_MEMORY_CACHING=1: PyTorch
            calls cudaMalloc/cudaFree for every tensor and cudalloc serves them. NCCL's own
            cudaMalloc'd buffers come from cudalloc too;
  uncached  (not in the default list) PYTORCH_NO_CUDA_MEMORY_CACHING=1 alone: the same calls
            served by the CUDA runtime, the baseline for preload.
NCCL_NVLS_ENABLE=0 (NVLink multicast off) for every run.

The model and step are the gpt2_train workload of tools/bench/workloads.py (12 layers, 768
wide, batch 8 x 1024 per GPU, bf16 autocast, AdamW lr 1e-4) wrapped in
DistributedDataParallel. Every rank builds the model from seed 0 and draws its batch from a generator seeded by (step, rank), so the runs see the
same data; the logged loss is the mean over ranks (all_reduce). Peak reserved per GPU: native
torch.cuda.max_memory_reserved(); cudalloc and preload cudalloc's reserved_bytes peak of that
device (for preload read from the preloaded library's exported C API).

Exit status: 0 every mode ran and its losses are within 1e-3 relative of native's; 1 a run
failed or the losses differ; 77 torch/transformers missing or fewer GPUs than --gpus.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "bench"))
from child import SKIP, child_env, import_cudalloc, make_deterministic, skip_reason  # noqa: E402
from workloads import gpt2_small, gpt2_tokens, lm_loss  # noqa: E402

WARMUP = 2
RTOL = 1e-3
GIB = float(1 << 30)


# ---- Worker (one per GPU, started by torchrun) ----------------------------------------------

def preloaded_reserved_peak(device):
    """reserved_bytes peak of `device` from the preloaded cudalloc (its C API is exported)."""
    import ctypes
    lib = ctypes.CDLL(None)

    class Stat(ctypes.Structure):
        _fields_ = [("current", ctypes.c_int64), ("peak", ctypes.c_int64),
                    ("total", ctypes.c_int64)]

    class Stats(ctypes.Structure):
        _fields_ = [("count", ctypes.c_int32), ("device", ctypes.c_int32), ("values", Stat * 64)]

    lib.cudalloc_stat_name.restype = ctypes.c_char_p
    s = Stats()
    if lib.cudalloc_get_stats(device, ctypes.byref(s)) != 0:
        return None
    names = [lib.cudalloc_stat_name(i).decode() for i in range(s.count)]
    return s.values[names.index("reserved_bytes")].peak


def worker(args):
    rank = int(os.environ["RANK"])
    local = int(os.environ["LOCAL_RANK"])
    world = int(os.environ["WORLD_SIZE"])
    if args.mode == "cudalloc":
        cudalloc = import_cudalloc()
        cudalloc.enable()
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    make_deterministic(torch)
    torch.manual_seed(0)
    model = DistributedDataParallel(gpt2_small().cuda(), device_ids=[local])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    losses, times = [], []
    for step in range(args.steps):
        gen = torch.Generator().manual_seed(1000 * step + rank)
        x = gpt2_tokens(torch, generator=gen, device="cpu").cuda()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = lm_loss(torch, model, x)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
        losses.append(mean.item() / world)
    if args.mode == "uncached":
        peak = None  # PyTorch keeps no statistics without its cache
    elif args.mode == "native":
        peak = torch.cuda.max_memory_reserved(local)
    elif args.mode == "cudalloc":
        peak = cudalloc.stats(local)["reserved_bytes"]["peak"]
    else:
        peak = preloaded_reserved_peak(local)
    result = {"rank": rank, "device": local, "peak_reserved": peak, "losses": losses,
              "step_ms": times, "device_name": torch.cuda.get_device_name(local)}
    with open(os.path.join(args.out, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    dist.barrier()
    dist.destroy_process_group()
    return 0


# ---- Launcher -----------------------------------------------------------------------------

def launch(args, mode):
    env = child_env({"NCCL_NVLS_ENABLE": "0", "PYTORCH_CUDA_ALLOC_CONF": None})
    if mode in ("preload", "uncached"):
        env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
    if mode == "preload":
        env["LD_PRELOAD"] = os.path.abspath(args.preload)
    out = tempfile.mkdtemp(prefix=f"ddp_{mode}_")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={args.gpus}", os.path.abspath(__file__), "--worker", "--mode", mode,
           "--steps", str(args.steps), "--out", out]
    t0 = time.time()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    ranks = []
    for name in sorted(os.listdir(out)):
        with open(os.path.join(out, name)) as f:
            ranks.append(json.load(f))
    run = {"mode": mode, "exit": p.returncode, "wall_s": round(time.time() - t0, 1),
           "ranks": sorted(ranks, key=lambda r: r["rank"])}
    if p.returncode != 0 or len(ranks) != args.gpus:
        run["error"] = "\n".join((p.stderr or p.stdout).strip().splitlines()[-15:])
    return run


def max_rel(a, b):
    return max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a, b)) if a and b else None


def report(args, runs):
    native = next((r for r in runs if r["mode"] == "native" and "error" not in r), None)
    print(f"\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {args.gpus} GPUs, "
          f"GPT-2 small DDP, {args.steps} steps (median over steps after {WARMUP})\n")
    gpus = " | ".join(f"GPU {i} peak reserved GiB" for i in range(args.gpus))
    print(f"| mode | {gpus} | median step ms (rank 0) | step time vs native | losses vs native |")
    print("|---|" + "---|" * (args.gpus + 3))
    ok = native is not None
    for run in runs:
        if "error" in run:
            print(f"| {run['mode']} | failed (exit {run['exit']}) |")
            ok = False
            continue
        peaks = " | ".join(f"{r['peak_reserved'] / GIB:.2f}" if r["peak_reserved"] else "?"
                           for r in run["ranks"])
        step = statistics.median(run["ranks"][0]["step_ms"][WARMUP:])
        vs, diff = "-", "-"
        if native is not None and run is not native:
            base = statistics.median(native["ranks"][0]["step_ms"][WARMUP:])
            vs = f"{100 * (step / base - 1):+.1f}%"
            rel = max_rel(run["ranks"][0]["losses"], native["ranks"][0]["losses"])
            run["losses_max_rel_vs_native"] = rel
            diff = "=" if rel == 0 else f"{rel:.1e}"
            ok = ok and rel is not None and rel <= RTOL
        print(f"| {run['mode']} | {peaks} | {step:.1f} | {vs} | {diff} |")
    for run in runs:
        if "error" in run:
            print(f"\n{run['mode']} failed:\n{run['error']}")
    return ok


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="native")
    ap.add_argument("--modes", default="native,cudalloc,preload")
    ap.add_argument("--gpus", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--preload", default=os.path.join(ROOT, "build", "libcudalloc_preload.so"))
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--json")
    ap.add_argument("--out", help=argparse.SUPPRESS)  # worker: where its result goes
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args)
    reason = skip_reason(("torch", "transformers"), gpus=args.gpus)
    if reason:
        print(f"SKIP: {reason}")
        return SKIP
    runs = []
    for mode in args.modes.split(","):
        runs.append(launch(args, mode))
        print(f"{mode}: exit {runs[-1]['exit']}, {runs[-1]['wall_s']} s", flush=True)
    ok = report(args, runs)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"argv": argv, "runs": runs}, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
