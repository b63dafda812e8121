#!/usr/bin/env python3
"""Replaying each shared trace under PyTorch's rules must reproduce the peak reserved memory
PyTorch itself reported for the workload within 0.5%: the native model against
meta.native.peak_reserved, the expandable-segments model against
meta.expandable_segments.peak_reserved. That is what makes replay on a simulated device a
prediction of the GPU. Exits 77 (skipped) when the
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
        if r["policies"]["cudalloc"].get("invariant_violation") is not None:
            print(f"FAIL {trace}: {r['policies']['cudalloc']['invariant_violation']}")
            failures += 1
        for mode, policy, name in (("native", "pytorch", "PyTorch rules"),
                                   ("expandable_segments", "expandable", "expandable rules")):
            reported = r.get("pytorch_reported", {}).get(mode)
            if reported is None:
                print(f"skip {trace}: no meta.{mode}")
                continue
            ours = r["policies"][policy]["peak_reserved_bytes"]
            theirs = reported["peak_reserved_bytes"]
            error = (ours - theirs) / theirs
            ok = abs(error) <= 0.005
            failures += not ok
            print(f"{'ok' if ok else 'FAIL'} {os.path.basename(trace)}: {name} "
                  f"{ours} vs PyTorch {theirs} ({100 * error:+.3f}%)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
