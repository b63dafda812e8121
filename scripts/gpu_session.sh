#!/usr/bin/env bash
# The GPU machine's part of a change, in one call (its figures go to docs/benchmarks.md):
#
#   scripts/gpu_session.sh BEFORE_DIR [TESTS_REGEX]
#
# 1. cudalloc-bench of BEFORE_DIR (a build of the change's base) against build-gpu, alternating
#    (scripts/bench_compare.sh);
# 2. the GPU checks whose names match TESTS_REGEX (scripts/gpu_check.sh build-gpu -R ...).
# Everything goes to a work folder; $OUT (default ./gpu-session-out) receives session.tgz of it
# and the two tables, so that few files come back. The tables are printed last.
set -u
before=$1 tests=${2:-.}
final=${OUT:-$PWD/gpu-session-out}
OUT=$(mktemp -d /tmp/gpu-session.XXXXXX)
export OUT
mkdir -p "$final"
nvidia-smi -L || true
OUT=$OUT/bench bash "$(dirname "$0")/bench_compare.sh" "$before" build-gpu 3 | tee "$OUT/bench_compare.txt"
bench_rc=${PIPESTATUS[0]}
bash "$(dirname "$0")/gpu_check.sh" build-gpu -R "$tests"
check_rc=$?
tar czf "$final/session.tgz" -C "$OUT" .
cp "$OUT/bench_compare.txt" "$OUT/summary.txt" "$final/" 2>/dev/null
echo "== bench (A: $before, B: build-gpu; ns, lower is better)"
cat "$OUT/bench_compare.txt"
[ "$bench_rc" -eq 0 ] && [ "$check_rc" -eq 0 ]
