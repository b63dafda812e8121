#!/usr/bin/env python3
"""Sleep and wake on a GPU (docs/offload.md, "Sleep and wake"): a model's weights and a cache
buffer in two regions, a CUDA graph captured over them; pause both (weights kept on the host,
cache dropped), train another model in the freed memory, resume, replay the graph, and
compare its outputs with those before the pause. Prints pause and resume throughput against
the bare host<->device copy bandwidth measured in the same run, and the device memory
returned (cudaMemGetInfo before and after).

    python3 tools/bench/sleep_wake.py [--weights-gib 8] [--cache-gib 4] [--prepare]
                                      [--json out.json]

--prepare pins the host memory of the first pause ahead (cudalloc.prepare_pause), timed
apart, so that the first pause only copies as the later ones do.

--release-probe GIB measures what a large release does to the copy right after it, apart
from any resume: an h2d copy at rest, then GIB of device memory is allocated, written, freed
and the cache emptied, and the same copy is timed at once. It runs at the end of each mode's
child and in a mode of its own, "native" (PyTorch's allocator, no cudalloc: cudaFree gives
the memory back), which --release-probe adds to the modes.

Runs each mode in a child process:
  adapter  cudalloc.enable(): PyTorch allocates through cudalloc; the graph's private pool
           is created inside region "graph" and sleeps too (kept)
  preload  LD_PRELOAD=libcudalloc_preload.so under PyTorch's own caching allocator: the
           regions tag the segments PyTorch takes (weights and cache in MemPools, as
           torch_memory_saver does), the graph pool stays awake
Exit 0 when every mode's outputs match and memory came back; 77 without torch or a GPU.
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "python"))
GIB = 1 << 30


def copy_gibps(torch, dst, src):
    """GiB/s of one copy of src into dst, timed from an idle GPU to its end."""
    torch.cuda.synchronize()
    t = time.perf_counter()
    dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize()
    return dst.numel() * dst.element_size() / (time.perf_counter() - t) / GIB


def best_copy_gibps(torch, dst, src, runs=3):
    """GiB/s of the fastest of `runs` copies, after one to warm up."""
    copy_gibps(torch, dst, src)
    return max(copy_gibps(torch, dst, src) for _ in range(runs))


def bare_bandwidth(torch, nbytes):
    """GiB/s of one device->host and one host->device copy of nbytes into pinned memory."""
    dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    out = {name: best_copy_gibps(torch, dst, src)
           for name, dst, src in (("d2h", host, dev), ("h2d", dev, host))}
    del dev, host
    return out


_SM_COPY = r"""
extern "C" __global__ void sm_copy(const uint4* __restrict__ src, uint4* __restrict__ dst,
                                   unsigned long long n) {
  unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += stride) {
    dst[i] = src[i];
  }
}
"""


def sm_copier(torch):
    """A copy of pinned host memory into device memory by the GPU's cores (a kernel reading
    the host buffer through its device mapping) instead of its copy engines; None without
    CuPy."""
    try:
        import cupy
    except ImportError:
        return None
    kernel = cupy.RawKernel(_SM_COPY, "sm_copy")
    blocks = torch.cuda.get_device_properties(0).multi_processor_count * 8

    def copy(dst, src):
        stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
        n = dst.numel() * dst.element_size() // 16
        with stream:
            kernel((blocks,), (512,), (cupy.uint64(src.data_ptr()), cupy.uint64(dst.data_ptr()),
                                        cupy.uint64(n)))

    return copy


def timed_gibps(torch, copy, dst, src):
    torch.cuda.synchronize()
    t = time.perf_counter()
    copy(dst, src)
    torch.cuda.synchronize()
    return dst.numel() * dst.element_size() / (time.perf_counter() - t) / GIB


def release_probe(torch, release_gib, nbytes=4 * GIB):
    """GiB/s of an h2d copy of nbytes at rest (best of 3) and right after release_gib of
    device memory was allocated, written, freed and the cache emptied (one copy); by the copy
    engines (copy_) and, with CuPy, by the cores (sm_), each after a release of its own."""
    dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    engines = {"": lambda d, s: d.copy_(s, non_blocking=True)}
    sm = sm_copier(torch)
    if sm is not None:
        engines["sm_"] = sm
    out = {"release_gib": release_gib}
    for prefix, copy in engines.items():
        timed_gibps(torch, copy, dev, host)
        out[prefix + "rest_gibps"] = max(timed_gibps(torch, copy, dev, host) for _ in range(3))
        big = torch.empty(int(release_gib * GIB), dtype=torch.uint8, device="cuda")
        big.fill_(1)
        torch.cuda.synchronize()
        del big
        torch.cuda.empty_cache()
        out[prefix + "after_release_gibps"] = timed_gibps(torch, copy, dev, host)
        if prefix:
            dev_copy = dev.clone()
            dev.zero_()
            copy(dev, host)
            out[prefix + "same_bytes"] = bool(torch.equal(dev, dev_copy))
    del dev, host
    return out


def free_bytes(torch):
    torch.cuda.synchronize()
    return torch.cuda.mem_get_info()[0]


def child(mode, weights_gib, cache_gib, prepare=False, settle_s=0.0, probe_gib=0.0):
    import torch
    if mode == "native":
        return {"mode": mode, "cycles": [], "probe": release_probe(torch, probe_gib)}
    import cudalloc
    if mode == "adapter":
        cudalloc.enable()
    torch.manual_seed(0)
    width = 4096
    layers = max(1, int(weights_gib * GIB // (width * width * 4)))
    pools = {}

    def region_scope(tag):
        # Under LD_PRELOAD PyTorch's cache would put later tensors into a region's free
        # blocks: a MemPool of its own keeps the region's segments to it.
        if mode != "preload":
            return cudalloc.region(tag)
        import contextlib
        pools[tag] = torch.cuda.MemPool()
        stack = contextlib.ExitStack()
        stack.enter_context(cudalloc.region(tag))
        stack.enter_context(torch.cuda.use_mem_pool(pools[tag]))
        return stack

    with region_scope("weights"):
        weights = [torch.randn(width, width, device="cuda") / width ** 0.5 for _ in range(layers)]
    cache_rows = int(cache_gib * GIB // (width * 4))
    with region_scope("cache"):
        cache = torch.empty(cache_rows, width, device="cuda")
    x = torch.randn(256, width, device="cuda")
    rows = min(cache_rows, 256 * 64)

    def step():
        h = x
        for w in weights:
            h = torch.tanh(h @ w)
        # The graph writes the cache before reading it: a dropped cache is refilled by replay.
        cache[:rows].view(-1, 256, width).copy_(h.expand(rows // 256, 256, width))
        return cache[:rows].view(-1, 256, width).sum(0) @ weights[0]

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()  # warm-up before capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    graph_region = mode == "adapter"
    if graph_region:
        with cudalloc.region("graph"):
            with torch.cuda.graph(graph):
                out = step()
    else:
        with torch.cuda.graph(graph):
            out = step()
    graph.replay()
    torch.cuda.synchronize()
    reference = out.clone()

    tags = ["weights", "cache"] + (["graph"] if graph_region else [])
    resident = {t: cudalloc.region_residency(t)[0] for t in tags}
    region_bytes = sum(resident.values())
    bare = bare_bandwidth(torch, int(min(weights_gib, 4) * GIB))
    torch.cuda.empty_cache()
    free_before = free_bytes(torch)
    prepare_s = None
    if prepare:
        # While the GPU would be busy otherwise (loading the model, say): the first pause
        # then finds its host memory pinned.
        t = time.perf_counter()
        for tag in tags:
            if tag != "cache":
                cudalloc.prepare_pause(tag)
        prepare_s = time.perf_counter() - t

    def cycle(empty_cache):
        """Pause, train another model in the freed memory, resume, replay: one RL round.
        empty_cache: the cache is emptied after the training (as RL frameworks do), which
        also gives back the host pages a pause pinned; else the next pause reuses them."""
        c = {"empty_cache": empty_cache, "free_pre": free_bytes(torch)}
        t = time.perf_counter()
        cudalloc.pause("weights", keep=True)
        c["pause_s"] = time.perf_counter() - t
        cudalloc.pause("cache", keep=False)
        if graph_region:
            cudalloc.pause("graph", keep=True)
        c["free_paused"] = free_bytes(torch)
        c["host_kept"] = cudalloc.region_residency("weights")[1]
        # Another model trains in the freed memory, with a ballast that did not fit before.
        ballast_bytes = c["free_paused"] - 2 * GIB
        c["ballast_over_free_pre"] = ballast_bytes - c["free_pre"]
        c["trained"] = 0
        if ballast_bytes > c["free_pre"]:
            ballast = torch.empty(ballast_bytes, dtype=torch.uint8, device="cuda")
            net = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                                      torch.nn.Linear(1024, 10)).cuda()
            opt = torch.optim.SGD(net.parameters(), lr=0.1)
            for _ in range(20):
                loss = net(torch.randn(512, 1024, device="cuda")).square().mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                c["trained"] += 1
            torch.cuda.synchronize()
            del ballast, net, opt, loss
        if empty_cache or mode == "preload":
            # Under LD_PRELOAD PyTorch's cache holds the ballast's segments; through the
            # adapter the freed memory is cudalloc's, and resume takes its idle pages.
            torch.cuda.empty_cache()
            time.sleep(settle_s)  # --settle: lets the driver finish its work after a release
        t = time.perf_counter()
        cudalloc.resume("weights")
        c["resume_s"] = time.perf_counter() - t
        cudalloc.resume("cache")
        if graph_region:
            cudalloc.resume("graph")
        c["free_resumed"] = free_bytes(torch)
        c["resident_after"] = sum(cudalloc.region_residency(t)[0] for t in tags)
        out.zero_()
        graph.replay()
        torch.cuda.synchronize()
        c["same_outputs"] = bool(torch.equal(out, reference))
        return c

    cycles = [cycle(empty) for empty in (True, True, False, False)]
    weights_bytes = resident["weights"]
    probe = release_probe(torch, probe_gib) if probe_gib else None
    return {
        "mode": mode,
        "probe": probe,
        "region_bytes": region_bytes,
        "weights_bytes": weights_bytes,
        "free_before": free_before,
        "prepare_s": prepare_s,
        "bare_d2h_gibps": bare["d2h"],
        "bare_h2d_gibps": bare["h2d"],
        "cycles": [dict(c, pause_gibps=weights_bytes / c["pause_s"] / GIB,
                        resume_gibps=weights_bytes / c["resume_s"] / GIB,
                        returned_bytes=c["free_paused"] - c["free_pre"]) for c in cycles],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--weights-gib", type=float, default=8)
    ap.add_argument("--cache-gib", type=float, default=4)
    ap.add_argument("--modes", default="adapter,preload")
    ap.add_argument("--prepare", action="store_true",
                    help="pin the first pause's host memory ahead (cudalloc.prepare_pause)")
    ap.add_argument("--settle", type=float, default=0.0, metavar="SECONDS",
                    help="wait this long between emptying the cache and resuming, to tell the "
                         "driver's own work after a release apart from the resume's")
    ap.add_argument("--release-probe", type=float, default=0.0, metavar="GIB",
                    help="time an h2d copy at rest and right after releasing GIB (see above)")
    ap.add_argument("--json")
    ap.add_argument("--child-logs", metavar="PREFIX",
                    help="write each mode's stderr (cudalloc's log) to PREFIX-MODE.log")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.weights_gib, args.cache_gib, args.prepare,
                               args.settle, args.release_probe)))
        return 0
    try:
        import torch
        if not torch.cuda.is_available():
            raise ImportError("no GPU")
    except ImportError as e:
        print(f"skipped: {e}")
        return 77
    import cudalloc
    results, ok = [], True
    modes = args.modes.split(",")
    if args.release_probe and "native" not in modes:
        modes.insert(0, "native")
    for mode in modes:
        env = dict(os.environ)
        if mode == "preload":
            env["LD_PRELOAD"] = cudalloc.preload_path()
        cmd = [sys.executable, os.path.abspath(__file__), "--child", mode,
               "--weights-gib", str(args.weights_gib), "--cache-gib", str(args.cache_gib)]
        if args.prepare:
            cmd.append("--prepare")
        if args.settle:
            cmd += ["--settle", str(args.settle)]
        if args.release_probe:
            cmd += ["--release-probe", str(args.release_probe)]
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        if args.child_logs:
            with open(f"{args.child_logs}-{mode}.log", "w") as f:
                f.write(p.stderr)
        if p.returncode != 0:
            print(f"{mode}: exit {p.returncode}\n{p.stdout[-3000:]}{p.stderr[-3000:]}")
            ok = False
            continue
        r = json.loads(p.stdout.strip().splitlines()[-1])
        results.append(r)
        for c in r["cycles"]:
            ok = ok and (c["same_outputs"] and c["returned_bytes"] >= 0.95 * r["region_bytes"]
                         and c["trained"] == 20
                         and c["resident_after"] == r["region_bytes"])
    print(f"{'mode':8} {'cycle':5} {'empty':5} {'same':5} {'region GiB':>10} {'returned GiB':>12} "
          f"{'pause GiB/s':>11} {'(d2h bare)':>10} {'resume GiB/s':>12} {'(h2d bare)':>10} "
          f"{'trained':>7}")
    for r in results:
        if r.get("probe"):
            pr = r["probe"]
            print(f"{r['mode']:8} release probe: h2d {pr['rest_gibps']:.1f} GiB/s at rest, "
                  f"{pr['after_release_gibps']:.1f} GiB/s right after releasing "
                  f"{pr['release_gib']:g} GiB "
                  f"({100 * pr['after_release_gibps'] / pr['rest_gibps']:.0f}%)")
            if "sm_rest_gibps" in pr:
                print(f"{r['mode']:8} release probe, copy by the cores: "
                      f"{pr['sm_rest_gibps']:.1f} GiB/s at rest, "
                      f"{pr['sm_after_release_gibps']:.1f} right after "
                      f"({100 * pr['sm_after_release_gibps'] / pr['sm_rest_gibps']:.0f}%), "
                      f"bytes {'equal' if pr['sm_same_bytes'] else 'DIFFER'}")
        if not r["cycles"]:
            continue
        for i, c in enumerate(r["cycles"]):
            print(f"{r['mode']:8} {i + 1:5} {str(c['empty_cache']):5} {str(c['same_outputs']):5} "
                  f"{r['region_bytes'] / GIB:10.2f} {c['returned_bytes'] / GIB:12.2f} "
                  f"{c['pause_gibps']:11.1f} {r['bare_d2h_gibps']:10.1f} "
                  f"{c['resume_gibps']:12.1f} {r['bare_h2d_gibps']:10.1f} {c['trained']:7}")
        # Every cycle is shown: the first pause pins host memory unless it was prepared, and
        # a pause after a resume into cudalloc's idle pages (no empty_cache) differs.
        pauses = [100 * c["pause_gibps"] / r["bare_d2h_gibps"] for c in r["cycles"]]
        resumes = [100 * c["resume_gibps"] / r["bare_h2d_gibps"] for c in r["cycles"]]
        print("         % of the bare copy: pauses 1-4 "
              + " ".join(f"{p:.0f}" for p in pauses) + ", resumes 1-4 "
              + " ".join(f"{p:.0f}" for p in resumes))
        if r.get("prepare_s") is not None:
            print(f"         prepared ahead in {r['prepare_s']:.2f} s "
                  f"({r['weights_bytes'] / GIB / r['prepare_s']:.1f} GiB/s of weights pinned)")
    if args.json:
        with open(os.path.join(os.environ.get("OUT", "."), args.json), "w") as f:
            json.dump(results, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
