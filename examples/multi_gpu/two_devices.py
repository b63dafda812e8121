#!/usr/bin/env python3
"""One process, two GPUs: a model split across them, trained with cudalloc, checked against
PyTorch's allocator.

    python3 examples/multi_gpu/two_devices.py [--steps 12] [--json PATH]

The model is a stack of 8 transformer encoder layers (d_model 1024, 16 heads), the first four
on cuda:0 and the last four and the loss on cuda:1; activations move to cuda:1 in the forward
pass and their gradients back to cuda:0 in the backward pass. It runs twice, each time in a
fresh process: native (PyTorch's allocator) and cudalloc (cudalloc.enable()). With cudalloc,
after training:
  - every parameter, gradient and optimizer state tensor lies inside a segment that cudalloc's
    snapshot lists for the tensor's own device, and (with CuPy) the driver's pointer
    attributes name that device too;
  - both devices have their own statistics (allocations on each) and the snapshot one entry
    per device;
  - cudalloc.validate() holds for both devices.
The losses must equal native's (deterministic kernels; 1e-3 relative tolerated for ops
without one). Exit 0 when all of it holds, 1 otherwise, 77 without two GPUs.
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "tools", "bench"))
from child import (SKIP, import_cudalloc, make_deterministic, print_result,  # noqa: E402
                   run_child as run_script, script_command, skip_reason)

RTOL = 1e-3
GIB = float(1 << 30)


def build(torch):
    torch.manual_seed(0)
    layers = [torch.nn.TransformerEncoderLayer(1024, 16, 4096, dropout=0.0, batch_first=True)
              for _ in range(8)]
    first = torch.nn.Sequential(*layers[:4]).to("cuda:0")
    second = torch.nn.Sequential(*layers[4:], torch.nn.Linear(1024, 1024)).to("cuda:1")
    return first, second


def device_tensors(torch, modules, opt):
    for m in modules:
        for p in m.parameters():
            yield "param", p
            if p.grad is not None:
                yield "grad", p.grad
    for state in opt.state.values():
        for v in state.values():
            if torch.is_tensor(v) and v.is_cuda:
                yield "state", v


def check_placement(torch, cudalloc, modules, opt):
    """Problems found: tensors outside a segment of their device, per cudalloc and the driver."""
    snap = cudalloc.snapshot()
    segments = {}
    for s in snap["segments"]:
        segments.setdefault(s["device"], []).append((s["address"], s["address"] + s["total_size"]))
    try:
        import cupy
        attributes = cupy.cuda.runtime.pointerGetAttributes
    except ImportError:
        attributes = None
    problems, checked = [], 0
    for kind, t in device_tensors(torch, modules, opt):
        ptr, dev = t.untyped_storage().data_ptr(), t.device.index
        checked += 1
        if not any(lo <= ptr < hi for lo, hi in segments.get(dev, [])):
            problems.append(f"{kind} on cuda:{dev} at {ptr:#x} is in no segment of device {dev}")
        if attributes is not None and attributes(ptr).device != dev:
            problems.append(f"{kind} on cuda:{dev} at {ptr:#x}: the driver says device "
                            f"{attributes(ptr).device}")
    per_device = [d["device"] for d in snap.get("cudalloc", {}).get("devices", [])]
    return problems, checked, per_device, attributes is not None


def child_main(mode, steps):
    if mode == "cudalloc":
        cudalloc = import_cudalloc()
        cudalloc.enable()
    import torch
    make_deterministic(torch)
    first, second = build(torch)
    opt = torch.optim.AdamW(list(first.parameters()) + list(second.parameters()), lr=1e-4)
    losses, times = [], []
    for step in range(steps):
        gen = torch.Generator().manual_seed(step)
        x = torch.randn(16, 512, 1024, generator=gen).to("cuda:0")
        y = torch.randn(16, 512, 1024, generator=gen).to("cuda:1")
        for d in (0, 1):
            torch.cuda.synchronize(d)
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = second(first(x).to("cuda:1"))
            loss = torch.nn.functional.mse_loss(out.float(), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)
        losses.append(loss.item())
        for d in (0, 1):
            torch.cuda.synchronize(d)
        times.append((time.perf_counter() - t0) * 1e3)
    result = {"mode": mode, "losses": losses, "step_ms": times}
    if mode == "native":
        result["peak_reserved"] = [torch.cuda.max_memory_reserved(d) for d in (0, 1)]
    else:
        stats = [cudalloc.stats(d) for d in (0, 1)]
        result["peak_reserved"] = [s["reserved_bytes"]["peak"] for s in stats]
        result["allocations"] = [s["allocated_count"]["total"] for s in stats]
        result["page_maps"] = [s["page_maps"]["total"] for s in stats]
        problems, checked, devices, driver = check_placement(torch, cudalloc, (first, second), opt)
        result.update(problems=problems[:20], checked=checked, snapshot_devices=devices,
                      driver_checked=driver)
        try:
            cudalloc.validate()
            result["validate"] = "ok"
        except cudalloc.CudallocError as e:
            result["validate"] = str(e)
    print_result(result)
    return 0


def run(mode, steps):
    run = run_script(script_command(__file__, "--child", mode, "--steps", steps), timeout=300,
                     capture_stderr=True)
    if run.result is not None:
        return run.result
    return {"mode": mode, "error": "\n".join(run.tail(10) or [run.failure()])}


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    if args.child:
        return child_main(args.child, args.steps)
    reason = skip_reason(gpus=2)
    if reason:
        print(f"SKIP: {reason}")
        return SKIP
    native, mine = run("native", args.steps), run("cudalloc", args.steps)
    ok = True
    for r in (native, mine):
        if "error" in r:
            print(f"{r['mode']} failed:\n{r['error']}")
            ok = False
    if ok:
        rel = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(mine["losses"], native["losses"]))
        med = [statistics.median(r["step_ms"][2:]) for r in (native, mine)]
        print("| allocator | peak reserved GiB cuda:0 | cuda:1 | median step ms |")
        print("|---|---|---|---|")
        for r, m in zip((native, mine), med):
            print(f"| {r['mode']} | {r['peak_reserved'][0] / GIB:.2f} | "
                  f"{r['peak_reserved'][1] / GIB:.2f} | {m:.1f} |")
        print(f"losses: max relative difference {rel:.1e} over {len(native['losses'])} steps")
        print(f"cudalloc: page maps per device {mine['page_maps']} in {args.steps} steps")
        print(f"cudalloc: allocations per device {mine['allocations']}, snapshot devices "
              f"{mine['snapshot_devices']}, {mine['checked']} tensors checked against their "
              f"device's segments{' and the driver' if mine['driver_checked'] else ''}: "
              f"{len(mine['problems'])} problems; validate: {mine['validate']}")
        for p in mine["problems"]:
            print("  " + p)
        ok = (rel <= RTOL and not mine["problems"] and mine["validate"] == "ok" and
              all(n > 0 for n in mine["allocations"]) and sorted(mine["snapshot_devices"]) == [0, 1])
        native["losses_max_rel_vs_native"] = 0.0
        mine["losses_max_rel_vs_native"] = rel
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": [native, mine]}, f, indent=1)
    print("OK" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
