#!/usr/bin/env bash
# Compares cudalloc-bench of two builds in one run on the GPU machine, alternating them
# (A B A B ...) so that drift of the machine shows as spread, not as a difference:
#
#   scripts/bench_compare.sh DIR_A DIR_B [ROUNDS]   (each DIR holds cudalloc-bench and the
#                                                   libcudalloc.so it links; default 2 rounds)
#
# Writes $OUT/bench_A_<n>.json and bench_B_<n>.json and prints one table: per size the median
# ns per pair of each round, then the mixed workload (warm and cold). Exit 77 without a GPU.
set -u
a=$1 b=$2 rounds=${3:-2}
OUT=${OUT:-$PWD/bench-compare-out}
mkdir -p "$OUT"
find_bench() { find "$1" -name cudalloc-bench -type f -perm -u+x | head -n 1; }
bench_a=$(find_bench "$a") bench_b=$(find_bench "$b")
[ -n "$bench_a" ] && [ -n "$bench_b" ] || { echo "cudalloc-bench missing in $a or $b"; exit 2; }
for ((n = 1; n <= rounds; n++)); do
  for side in A B; do
    bench=$bench_a; [ "$side" = B ] && bench=$bench_b
    dir=$a; [ "$side" = B ] && dir=$b
    lib=$(find "$dir" -maxdepth 1 -name 'libcudalloc.so*' | head -n 1)
    LD_LIBRARY_PATH=$(dirname "${lib:-$dir/x}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$bench" --only cudalloc --json "$OUT/bench_${side}_$n.json" >"$OUT/bench_${side}_$n.txt" 2>&1
    rc=$?
    [ "$rc" -eq 77 ] && { echo "SKIP: no GPU"; exit 77; }
    [ "$rc" -ne 0 ] && { echo "cudalloc-bench ($side, round $n) failed:"; cat "$OUT/bench_${side}_$n.txt"; exit 1; }
  done
done
python3 - "$OUT" "$rounds" <<'PY'
import json, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def load(side, n):
    return json.load(open(f"{out}/bench_{side}_{n}.json"))
rows = {}
for side in "AB":
    for n in range(1, rounds + 1):
        d = load(side, n)
        for p in d["pair_latency"]:
            if p["allocator"] == "cudalloc":
                rows.setdefault(p["size"], {}).setdefault(side, []).append(p["ns_per_pair"])
        for m in d["mixed"]["results"]:
            if m["allocator"] == "cudalloc":
                rows.setdefault("mixed", {}).setdefault(side, []).append(m["ns_per_op"])
                rows.setdefault("mixed-cold", {}).setdefault(side, []).append(m["cold_ns_per_op"])
print(f"{'case':>12} | {'A (ns, each round)':>28} | {'B (ns, each round)':>28} | B/A (medians)")
for case, sides in rows.items():
    fa = sorted(sides.get("A", [])); fb = sorted(sides.get("B", []))
    ma = fa[len(fa) // 2] if fa else float("nan"); mb = fb[len(fb) // 2] if fb else float("nan")
    label = case if isinstance(case, str) else (f"{case >> 20} MiB" if case >= 1 << 20 else f"{case >> 10} KiB" if case >= 1024 else f"{case} B")
    print(f"{label:>12} | {' '.join(f'{x:8.0f}' for x in sides.get('A', [])):>28} | "
          f"{' '.join(f'{x:8.0f}' for x in sides.get('B', [])):>28} | {mb / ma:6.3f}")
PY
