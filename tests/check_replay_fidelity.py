#!/usr/bin/env python3
"""Replaying each shared trace under PyTorch's rules must reproduce the peak reserved memory
PyTorch itself reported for the workload (meta.native.peak_reserved) within 0.5%: that is
what makes replay on a simulated device a prediction of the GPU. Exits 77 (skipped) when the
traces are not there.  Usage: check_replay_fidelity.py CUDALLOC_CLI TRACE_DIR"""
import glob
import json
import os
import subprocess
import sys


def main():
    cli, trace_dir = sys.argv[1], sys.argv[2]
    traces = sorted(glob.glob(os.path.join(trace_dir, "*.json.gz")))
    if not traces:
        print(f"no traces in {trace_dir}: skipped")
        return 77
    failures = 0
    for trace in traces:
        out = subprocess.run([cli, "replay", "--json", trace], capture_output=True, text=True)
        if out.returncode != 0:
            print(f"FAIL {trace}: exit {out.returncode}: {out.stderr.strip()}")
            failures += 1
            continue
        r = json.loads(out.stdout)
        native = r.get("pytorch_reported", {}).get("native")
        if native is None:
            print(f"skip {trace}: no meta.native")
            continue
        ours = r["policies"]["pytorch"]["peak_reserved_bytes"]
        error = (ours - native["peak_reserved_bytes"]) / native["peak_reserved_bytes"]
        ok = abs(error) <= 0.005 and r["policies"]["cudalloc"].get("invariant_violation") is None
        failures += not ok
        print(f"{'ok' if ok else 'FAIL'} {os.path.basename(trace)}: PyTorch rules "
              f"{ours} vs PyTorch {native['peak_reserved_bytes']} ({100 * error:+.3f}%)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
