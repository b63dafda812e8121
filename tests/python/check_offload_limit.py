#!/usr/bin/env python3
"""Checks the JSON of `torch_workloads.py --limit-fraction F --conf offload:host` (the
offload-limit GPU check): cudalloc ran to the end under the limit by spilling to the host.

    check_offload_limit.py TORCH_WORKLOADS_JSON

Fails (1) when there is no cudalloc run, one did not finish ("ok"), one spilled nothing, one
peaked above its limit, or the losses differ from native's by more than 1e-3 relative;
skipped (77) when the file does not exist (the benchmark did not run).
"""
import json
import os
import sys

SKIP = 77
RTOL = 1e-3


def problems(doc):
    """(lines to print, reasons to fail) for a torch_workloads.py document."""
    runs = [r for r in doc["runs"] if r["mode"] == "cudalloc"]
    row = doc["rows"][0] if doc["rows"] else {}
    diff = (row.get("values_vs_native") or {}).get("cudalloc")
    lines, found = [], [] if runs else ["no cudalloc run"]
    for r in runs:
        counters = r.get("counters_end") or {}
        limit, peak = r.get("limit_bytes"), r.get("peak_reserved")
        lines.append({"status": r["status"], "message": r.get("message", ""), "limit": limit,
                      "peak_reserved": peak, "losses_vs_native": diff,
                      "step_time_vs_native_pct": row.get("step_time_vs_native_pct"),
                      **{n: counters.get(n) for n in ("spills", "page_offloads",
                                                      "page_prefetches")}})
        if r["status"] != "ok":
            found.append("cudalloc run " + r["status"])
        if not counters.get("spills"):
            found.append("no spills")
        if limit and peak and peak > limit:
            found.append("peak reserved above the limit")
    if diff is None or diff["max_rel"] > RTOL:
        found.append("losses differ from native")
    return lines, found


def main(argv):
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    if not os.path.exists(argv[0]):
        print(f"SKIP: {argv[0]} not found (the benchmark did not run)")
        return SKIP
    with open(argv[0]) as f:
        lines, found = problems(json.load(f))
    for line in lines:
        print(line)
    print("FAIL: " + ", ".join(found) if found else "OK")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
