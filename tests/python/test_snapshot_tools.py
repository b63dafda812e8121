#!/usr/bin/env python3
"""GPU check of cudalloc's snapshots against PyTorch's own tools (needs torch and a GPU;
exits 77 otherwise). Runs from the repository root with CUDALLOC_LIBRARY set and the
`cudalloc` CLI next to the library:

1. PyTorch's native allocator records history; its pickled snapshot
   (torch.cuda.memory._dump_snapshot) is read by `cudalloc inspect`, `replay` and `convert`.
2. A workload under cudalloc (trace:N, snapshot_on_oom) writes a JSON snapshot;
   `cudalloc convert` turns it into a pickle that `python -m torch.cuda._memory_viz`
   (stats, trace_plot, segment_plot) must accept.
3. An allocation past cudalloc's limit: what PyTorch raises, and the OOM snapshot.
"""
import json
import os
import subprocess
import sys
import tempfile

RESULTS = []


def check(name, ok, detail=""):
    RESULTS.append(ok)
    print(f"{'PASS' if ok else 'FAIL'} {name}" + (f": {detail}" if detail else ""), flush=True)


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    return p.returncode, p.stdout + p.stderr


def workload(torch):
    """Allocations of many sizes on two streams, some freed, some kept."""
    keep = []
    side = torch.cuda.Stream()
    for i in range(60):
        n = (i * 7919) % (8 << 20) + 1
        x = torch.empty(n, dtype=torch.uint8, device="cuda")
        if i % 3 == 0:
            keep.append(x)
    with torch.cuda.stream(side):
        keep.append(torch.ones(1 << 20, device="cuda"))
    torch.cuda.synchronize()
    return keep


def child_native(out_dir):
    import torch
    torch.cuda.memory._record_memory_history(context=None)
    keep = workload(torch)
    torch.cuda.memory._dump_snapshot(os.path.join(out_dir, "native.pickle"))
    del keep
    return 0


def child_cudalloc(out_dir):
    import cudalloc
    cudalloc.enable()
    import torch
    keep = workload(torch)
    cudalloc.dump_snapshot(os.path.join(out_dir, "ours.json"))
    cudalloc.set_memory_limit(1 << 30, 0)
    try:
        torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
        outcome = "no exception"
    except Exception as e:  # report exactly what PyTorch raised
        outcome = f"{type(e).__module__}.{type(e).__name__}: {str(e).splitlines()[0][:200]}"
    print("OOM_OUTCOME " + json.dumps(outcome), flush=True)
    del keep
    return 0


def main():
    try:
        import torch
        if not torch.cuda.is_available():
            raise ImportError("no GPU")
    except ImportError as e:
        print(f"skipped: {e}")
        return 77
    lib = os.environ.get("CUDALLOC_LIBRARY", "")
    cli = os.path.join(os.path.dirname(lib), "cudalloc")
    if not os.path.exists(cli):
        print(f"FAIL: no cudalloc CLI next to CUDALLOC_LIBRARY ({cli})")
        return 1
    out = tempfile.mkdtemp(prefix="cudalloc_snap_")
    me = os.path.abspath(__file__)

    rc, text = run([sys.executable, me, "--child", "native", out])
    check("native snapshot recorded", rc == 0, text.strip()[-300:] if rc else "")
    native = os.path.join(out, "native.pickle")
    rc, text = run([cli, "inspect", native])
    check("cudalloc inspect reads PyTorch's pickle", rc == 0 and "reserved" in text,
          text.splitlines()[1] if rc == 0 and len(text.splitlines()) > 1 else text[-300:])
    rc, text = run([cli, "replay", "--json", native])
    ok = rc == 0 and json.loads(text)["events"] > 0
    check("cudalloc replay reads PyTorch's pickle", ok, text.strip()[:300])
    rc, text = run([cli, "convert", native, "-o", os.path.join(out, "native.json")])
    check("cudalloc convert PyTorch pickle -> JSON", rc == 0, text.strip())

    env = dict(os.environ, CUDALLOC_CONF=f"trace:100000,snapshot_on_oom:{out}/oom_%p.json")
    rc, text = run([sys.executable, me, "--child", "cudalloc", out], env=env)
    check("workload under cudalloc", rc == 0, "" if rc == 0 else text[-500:])
    outcome = [l for l in text.splitlines() if l.startswith("OOM_OUTCOME ")]
    check("allocation past the limit raises in PyTorch", bool(outcome) and
          "no exception" not in outcome[0], outcome[0][12:] if outcome else text[-300:])
    oom_files = [f for f in os.listdir(out) if f.startswith("oom_")]
    check("snapshot_on_oom wrote a snapshot", len(oom_files) == 1, ", ".join(oom_files))

    ours = os.path.join(out, "ours.json")
    pickle_path = os.path.join(out, "ours.pickle")
    rc, text = run([cli, "convert", ours, "-o", pickle_path])
    check("cudalloc convert JSON -> pickle", rc == 0, text.strip())
    viz = [sys.executable, "-m", "torch.cuda._memory_viz"]
    rc, text = run(viz + ["stats", pickle_path])
    check("torch.cuda._memory_viz stats reads cudalloc's pickle", rc == 0,
          " | ".join(text.strip().splitlines()[:3]) if rc == 0 else text[-400:])
    for plot in ("trace_plot", "segment_plot"):
        html = os.path.join(out, f"{plot}.html")
        rc, text = run(viz + [plot, pickle_path, "-o", html])
        size = os.path.getsize(html) if os.path.exists(html) else 0
        check(f"torch.cuda._memory_viz {plot} on cudalloc's pickle", rc == 0 and size > 1000,
              f"{size} bytes" if rc == 0 else text[-400:])
    out_dir = os.environ.get("OUT")
    if out_dir:  # keep the artifacts for the record
        subprocess.run(["tar", "czf", os.path.join(out_dir, "snapshots.tar.gz"), "-C", out, "."])
    print("PASS" if all(RESULTS) else "FAIL")
    return 0 if all(RESULTS) else 1


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        sys.exit(child_native(sys.argv[3]) if sys.argv[2] == "native" else
                 child_cudalloc(sys.argv[3]))
    sys.exit(main())
