#!/usr/bin/env python3
"""GPU test: PyTorch with cudalloc enabled survives what an adversarial probe found.

    python3 tests/python/test_torch_reliability.py

One child process with cudalloc.enable() checks:
  record_stream_null  torch.empty(0).record_stream(s) (PyTorch passes NULL): no crash
  fork                threads allocate while the main thread forks (DataLoader workers fork):
                      every child takes the allocator's lock (stats()) and exits in time
  stream_churn        2,000 streams, each allocating on itself: no out-of-memory, address
                      space and reserved memory stay bounded, empty_cache returns them
Exit status: 0 all passed, 1 a check failed, 77 skipped (no torch, or no CUDA device).
"""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "tools", "bench"))
from child import (SKIP, import_cudalloc, print_result, run_child,  # noqa: E402
                   script_command, skip_reason)

FORKS = 30
STREAMS = 2000


def check_record_stream_null(torch):
    t = torch.empty(0, device="cuda")
    t.record_stream(torch.cuda.Stream())
    return True


def check_fork(torch, cudalloc):
    stop = threading.Event()

    def churn():
        while not stop.is_set():
            x = torch.empty(1 << 20, device="cuda")
            del x

    threads = [threading.Thread(target=churn) for _ in range(3)]
    for t in threads:
        t.start()
    ok = True
    try:
        for _ in range(FORKS):
            pid = os.fork()
            if pid == 0:
                cudalloc.stats()  # takes the device lock another thread may have held
                os._exit(0)
            deadline = time.time() + 20
            while True:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    ok = ok and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
                    break
                if time.time() > deadline:
                    os.kill(pid, 9)
                    os.waitpid(pid, 0)
                    ok = False
                    break
                time.sleep(0.01)
    finally:
        stop.set()
        for t in threads:
            t.join()
    return ok


def check_stream_churn(torch, cudalloc):
    keep = []
    for _ in range(STREAMS):
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            x = torch.empty(1000, device="cuda")
            y = torch.empty(3 << 20, device="cuda")
        keep.append((x.data_ptr(), y.data_ptr()))
        del x, y
    torch.cuda.synchronize()
    reserved = cudalloc.stats()["reserved_bytes"]["current"]
    cudalloc.empty_cache()
    after = cudalloc.stats()["reserved_bytes"]["current"]
    z = torch.ones(1 << 20, device="cuda")  # still allocates afterwards
    return {"ok": bool(z.sum().item() == (1 << 20)), "reserved_before_empty": reserved,
            "reserved_after_empty": after}


def child_main():
    cudalloc = import_cudalloc()
    cudalloc.enable()
    import torch
    result = {"record_stream_null": check_record_stream_null(torch),
              "fork": check_fork(torch, cudalloc)}
    churn = check_stream_churn(torch, cudalloc)
    result["stream_churn"] = churn["ok"]
    result["churn_figures"] = churn
    cudalloc.validate()  # raises on a broken invariant
    print_result(result)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child_main()
        return 0
    reason = skip_reason()
    if reason:
        print(f"SKIP: {reason}")
        return SKIP
    run = run_child(script_command(__file__, "--child"), timeout=300, echo_prefix="  ")
    if run.failure():
        print(f"FAIL: {run.failure()}")
        return 1
    r = run.result
    checks = ["record_stream_null", "fork", "stream_churn"]
    for name in checks:
        print(f"{name:20s} {'PASS' if r.get(name) else 'FAIL'}")
    print(f"churn figures: {r.get('churn_figures')}")
    return 0 if all(r.get(name) for name in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
