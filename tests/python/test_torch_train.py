#!/usr/bin/env python3
"""GPU test: PyTorch training gives the same losses with cudalloc as with the native allocator.

    python3 tests/python/test_torch_train.py        (or: pytest tests/python/test_torch_train.py)

The script runs itself in fresh subprocesses, because PyTorch's allocator can be swapped only
once and only before CUDA is used:
  native    trains a small MLP (fixed seed, AdamW, 20 steps) and prints its losses as JSON;
  cudalloc  the same after cudalloc.enable(), then checks stats(), record_stream(),
            empty_cache() and validate(), and prints memory_summary();
  too-late  uses CUDA first, then expects cudalloc.enable() to raise TooLateError.
Exit status: 0 all passed, 1 a check failed, 77 skipped (no torch, or no CUDA device).
The library comes from $CUDALLOC_LIBRARY or the usual places (see cudalloc.__init__).
"""
import gc
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "tools", "bench"))
from child import (DETERMINISTIC_ENV, SKIP, child_env, import_cudalloc,  # noqa: E402
                   make_deterministic, print_result, run_child as run_script, script_command)

STEPS = 20
RTOL = 1e-5
CHILD_TIMEOUT_S = 600


# ---- Child side -----------------------------------------------------------------------

def _train(torch, steps=STEPS):
    """Losses of a small MLP trained on random data; batch sizes vary to vary allocations."""
    nn = torch.nn
    model = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.LayerNorm(1024),
                          nn.Linear(1024, 512), nn.GELU(), nn.Linear(512, 10)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.Generator().manual_seed(1)
    losses = []
    for step in range(steps):
        batch = (64, 96, 128, 48)[step % 4]
        x = torch.randn(batch, 256, generator=data).cuda()
        y = torch.randint(0, 10, (batch,), generator=data).cuda()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses


class _Checks:
    def __init__(self):
        self.items = {}

    def add(self, name, ok, detail=""):
        self.items[name] = {"ok": bool(ok), "detail": str(detail)}

    def run(self, name, fn):
        """fn() -> (ok, detail); an exception counts as a failure."""
        try:
            ok, detail = fn()
        except Exception as e:  # report, keep checking
            ok, detail = False, f"{type(e).__name__}: {e}"
        self.add(name, ok, detail)


def _check_stats(cudalloc):
    s = cudalloc.stats()
    peak, hits = s["allocated_bytes"]["peak"], s["cache_hits"]["total"]
    return peak > 0 and hits > 0, f"allocated_bytes peak {peak}, cache_hits total {hits}"


def _check_record_stream(torch, cudalloc):
    n = 1 << 22
    side = torch.cuda.Stream()
    x = torch.arange(n, device="cuda", dtype=torch.float32)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = x * 2
    x.record_stream(side)
    del x  # its memory must not be reused before `side` has read it
    z = torch.full((n,), -1.0, device="cuda")
    torch.cuda.synchronize()
    ok = torch.equal(y.cpu(), torch.arange(n, dtype=torch.float32) * 2)
    pending = cudalloc.stats().get("pending_frees", {}).get("total", "n/a")
    del y, z
    return ok, f"result correct: {ok}, pending_frees total {pending}"


def _check_memory_fraction(torch):
    torch.cuda.set_per_process_memory_fraction(1.0)
    x = torch.ones(1 << 20, device="cuda")
    return x.sum().item() == float(1 << 20), "set_per_process_memory_fraction(1.0) accepted"


def _check_empty_cache(torch, cudalloc):
    gc.collect()
    torch.cuda.synchronize()
    before = cudalloc.stats()["reserved_bytes"]["current"]
    torch.cuda.empty_cache()
    after = cudalloc.stats()["reserved_bytes"]["current"]
    return after < before, f"reserved_bytes current {before} -> {after}"


def _check_validate(cudalloc):
    cudalloc.validate()
    return True, f"cudalloc {cudalloc.version()} from {cudalloc.library_path()}"


def _cudalloc_checks(torch, cudalloc):
    checks = _Checks()
    checks.add("enabled", cudalloc.is_enabled())
    checks.run("stats", lambda: _check_stats(cudalloc))
    checks.run("record_stream", lambda: _check_record_stream(torch, cudalloc))
    checks.run("memory_fraction", lambda: _check_memory_fraction(torch))
    checks.run("empty_cache", lambda: _check_empty_cache(torch, cudalloc))
    checks.run("validate", lambda: _check_validate(cudalloc))
    return checks.items


def _child_train(mode):
    cudalloc = None
    if mode == "cudalloc":
        cudalloc = import_cudalloc()
        cudalloc.enable()
        cudalloc.enable()  # a second call must be a no-op
    import torch
    torch.manual_seed(0)
    make_deterministic(torch, strict=True)
    result = {"mode": mode, "losses": _train(torch)}
    if cudalloc is not None:
        result["checks"] = _cudalloc_checks(torch, cudalloc)
        print(cudalloc.memory_summary())
    return result


def _raised(cudalloc, fn):
    try:
        fn()
    except Exception as e:
        return {"raised": type(e).__name__, "message": str(e), "enabled": cudalloc.is_enabled()}
    return {"raised": None, "message": "", "enabled": cudalloc.is_enabled()}


def _child_too_late():
    import torch
    torch.zeros(1, device="cuda")
    cudalloc = import_cudalloc()
    result = _raised(cudalloc, cudalloc.enable)
    # enable() sees torch.cuda.is_initialized() first; also make sure PyTorch's own
    # "Can't swap" error is recognised, through the step that swaps.
    result["swap"] = _raised(cudalloc,
                             lambda: cudalloc.torch._install(torch, cudalloc._capi._lib()))
    return result


def child_main(mode):
    for key, value in DETERMINISTIC_ENV.items():
        os.environ.setdefault(key, value)
    result = _child_too_late() if mode == "too-late" else _child_train(mode)
    print_result(result)
    return 0


# ---- Parent side ----------------------------------------------------------------------

def skip_reason():
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "CUDA is not available"
    return None


def run_child(mode):
    """Runs one child; echoes its output; returns (result dict or None, error text)."""
    run = run_script(script_command(__file__, "--child", mode), env=child_env(DETERMINISTIC_ENV),
                     timeout=CHILD_TIMEOUT_S, echo_prefix=f"[{mode}] ")
    failure = run.failure()
    return (None, failure) if failure else (run.result, "")


def _compare_losses(a, b):
    if len(a) != len(b) or not a:
        return False, f"{len(a)} vs {len(b)} losses"
    worst = 0.0
    for x, y in zip(a, b):
        if not (math.isfinite(x) and math.isfinite(y)):
            return False, f"non-finite loss {x} / {y}"
        worst = max(worst, abs(x - y) / max(abs(x), abs(y), 1e-30))
    return worst <= RTOL, f"max relative difference {worst:.3g} over {len(a)} steps"


def _too_late_outcome(result):
    ok = all(r["raised"] == "TooLateError" and not r["enabled"]
             and "cudalloc.enable()" in r["message"] for r in (result, result["swap"]))
    detail = f"enable(): {result['raised']}, swap: {result['swap']['raised']}"
    return ok, detail if ok else f"{detail}; messages: {result['message']!r}, " \
        f"{result['swap']['message']!r}"


def evaluate():
    """Runs the children; returns [(name, ok, detail)]."""
    outcomes = []
    native, err = run_child("native")
    outcomes.append(("native run", native is not None, err))
    cud, err = run_child("cudalloc")
    outcomes.append(("cudalloc run", cud is not None, err))
    if native and cud:
        outcomes.append(("losses equal",) + _compare_losses(native["losses"], cud["losses"]))
        print(f"native losses:   {native['losses']}")
        print(f"cudalloc losses: {cud['losses']}")
    if cud:
        for name, c in cud["checks"].items():
            outcomes.append((f"cudalloc {name}", c["ok"], c["detail"]))
    late, err = run_child("too-late")
    outcomes.append(("enable() after CUDA use raises TooLateError",)
                    + (_too_late_outcome(late) if late else (False, err)))
    return outcomes


def main():
    reason = skip_reason()
    if reason:
        print(f"SKIP: {reason}")
        return SKIP
    outcomes = evaluate()
    for name, ok, detail in outcomes:
        print(f"{'PASS' if ok else 'FAIL'} {name}" + (f": {detail}" if detail else ""))
    failed = sum(1 for _, ok, _ in outcomes if not ok)
    print("PASS" if not failed else f"FAIL ({failed} of {len(outcomes)} checks)")
    return 1 if failed else 0


def test_torch_train():
    """pytest entry point."""
    reason = skip_reason()
    if reason:
        import pytest
        pytest.skip(reason)
    failed = [(name, detail) for name, ok, detail in evaluate() if not ok]
    assert not failed, failed


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        sys.exit(child_main(sys.argv[2]))
    sys.exit(main())
