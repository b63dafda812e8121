#!/usr/bin/env python3
"""Checks the snapshot a program wrote at exit under LD_PRELOAD=libcudalloc_preload.so
(CUDALLOC_CONF snapshot_at_exit:PATH): cudalloc served its allocations.

    check_preload_snapshot.py SNAPSHOT [--min-allocations N] [--spills] [--max-reserved-peak B]

Prints device 0's counters. Fails (1) when fewer than N allocations were served, with
--spills when nothing spilled to the host, or when reserved_bytes peaked above B (or at 0);
skipped (77) when SNAPSHOT does not exist (the program did not run).
"""
import argparse
import json
import os
import sys

SKIP = 77


def device_stats(path):
    with open(path) as f:
        return json.load(f)["cudalloc"]["devices"][0]["stats"]


def problems(stats, args):
    """Reasons to fail, empty when the snapshot shows what was asked."""
    get = lambda name, field: stats.get(name, {}).get(field, 0)  # noqa: E731
    found = []
    if get("allocated_count", "total") < args.min_allocations:
        found.append(f"{get('allocated_count', 'total')} allocations served, "
                     f"{args.min_allocations} expected")
    if args.spills and get("spills", "total") <= 0:
        found.append("nothing spilled to the host")
    peak = get("reserved_bytes", "peak")
    if args.max_reserved_peak is not None and not 0 < peak <= args.max_reserved_peak:
        found.append(f"reserved_bytes peak {peak} outside (0, {args.max_reserved_peak}]")
    return found


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("snapshot")
    p.add_argument("--min-allocations", type=int, default=1)
    p.add_argument("--spills", action="store_true", help="spills must be > 0")
    p.add_argument("--max-reserved-peak", type=int, metavar="BYTES")
    args = p.parse_args(argv)
    if not os.path.exists(args.snapshot):
        print(f"SKIP: {args.snapshot} not found (the program did not run)")
        return SKIP
    stats = device_stats(args.snapshot)
    names = ("allocated_count", "device_allocs", "cache_hits", "pending_frees", "spills",
             "page_offloads", "page_prefetches")
    print({n: stats[n]["total"] for n in names if n in stats},
          {n + " peak": stats[n]["peak"] for n in
           ("reserved_bytes", "host_reserved_bytes", "host_active_bytes") if n in stats})
    found = problems(stats, args)
    print("FAIL: " + "; ".join(found) if found else "OK")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
