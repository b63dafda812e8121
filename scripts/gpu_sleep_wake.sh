#!/usr/bin/env bash
# Sleep and wake on the GPU machine, libraries compared in one session (docs/offload.md):
#
#   scripts/gpu_sleep_wake.sh ROUNDS LIB_DIR...
#
# Runs tools/bench/sleep_wake.py ROUNDS times per library directory (each holding
# libcudalloc.so and libcudalloc_preload.so), alternating between them so that the machine's
# drift falls on all alike, with CUDALLOC_LOG=debug: each pause's and resume's own timing
# lines go to $OUT/NAME-N-MODE.log beside the script's JSON ($OUT/NAME-N.json). Prints each run's
# table. SLEEP_WAKE_ARGS adds arguments (--prepare, say) to every run.
set -u
rounds=$1
shift
out=${OUT:-$PWD/sleep-wake-out}
mkdir -p "$out"
root=$(cd "$(dirname "$0")/.." && pwd)
rc=0
for ((n = 1; n <= rounds; ++n)); do
  for dir in "$@"; do
    name=$(basename "$dir")
    echo "== $name, run $n ($(date -u +%H:%M:%S) UTC)"
    CUDALLOC_LIBRARY=$(cd "$dir" && pwd)/libcudalloc.so CUDALLOC_LOG=debug \
      python3 "$root/tools/bench/sleep_wake.py" --json "$out/$name-$n.json" \
      --child-logs "$out/$name-$n" ${SLEEP_WAKE_ARGS:-} || rc=1
  done
done
exit $rc
