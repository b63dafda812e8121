#!/usr/bin/env bash
# Every GPU-side check in one call, run on the GPU machine from the repository root:
#
#   scripts/gpu_check.sh [BUILD_DIR [CTEST_ARGS...]]   (BUILD_DIR: a built tree, default build-gpu)
#
# The checks are CTest tests with the label gpu (tests/gpu/CMakeLists.txt, the C++ programs;
# tests/python/CMakeLists.txt, PyTorch's), each with its timeout; exit 77 is a skip (no GPU,
# too few GPUs, no torch). Each belongs to a step, a label: gpu-test, bench, page-moves,
# torch-train, torch-empty, torch-snapshot, torch-workloads, examples-pytorch, offload-adamw,
# offload-limit, sleep-wake, training-loop, preload, offload-preload, frameworks, sanitizer,
# multi-gpu.
# GPU_STEPS="NAME ..." runs only those steps; CTEST_ARGS go to ctest (-R REGEX: tests by name).
# All of them take longer than one 10-minute device call: choose a subset.
#
# Output in $OUT (default ./gpu-check-out): what the checks write (bench.json, ...), the log
# gpu_check.log, junit.xml, and the summary table (step, result, seconds), printed last and
# kept in summary.txt. Exit status: 0 no check failed, 1 otherwise.
set -u
BUILD_ARG=${1:-build-gpu}
shift $(($# > 0 ? 1 : 0))
export OUT=${OUT:-$PWD/gpu-check-out}
mkdir -p "$OUT"
LOG=$OUT/gpu_check.log
BUILD=$(cd "$BUILD_ARG" 2>/dev/null && pwd) || { echo "no build dir $BUILD_ARG" | tee "$LOG"; exit 1; }
{ echo "gpu_check: $(date -u '+%Y-%m-%dT%H:%M:%SZ') on $(hostname), build dir $BUILD, out $OUT"
  echo "CUDALLOC_CONF=${CUDALLOC_CONF:-} CUDALLOC_LOG=${CUDALLOC_LOG:-}"
  nvidia-smi -L 2>&1 || true; } | tee "$LOG"

# CTest files name the paths where the tree was configured. Where this copy lies elsewhere,
# a symbolic link from each recorded path to this copy makes them valid here.
link_recorded() {  # RECORDED ACTUAL
  if [ -z "$1" ] || [ "$1" -ef "$2" ]; then return 0; fi
  if [ -e "$1" ] || [ -L "$1" ]; then echo "$1 exists and is not $2: cannot run the tests"; return 1; fi
  mkdir -p "$(dirname "$1")" && ln -s "$2" "$1" && echo "linked $1 -> $2"
}
cache_value() { sed -n "s/^$1:[A-Z]*=//p" "$BUILD/CMakeCache.txt"; }
for pair in "CMAKE_HOME_DIRECTORY $PWD" "CMAKE_CACHEFILE_DIR $BUILD"; do
  read -r name actual <<<"$pair"
  link_recorded "$(cache_value "$name")" "$actual" >>"$LOG" 2>&1 || { tail -n 1 "$LOG"; exit 1; }
done

SELECT=(-L gpu)
if [ -n "${GPU_STEPS:-}" ]; then
  read -r -a steps <<<"$GPU_STEPS"
  SELECT+=(-L "^($(IFS='|'; echo "${steps[*]}"))\$")
fi
ctest --test-dir "$BUILD" "${SELECT[@]}" --output-on-failure --output-junit "$OUT/junit.xml" \
  "$@" 2>&1 | tee -a "$LOG"
ctest_rc=${PIPESTATUS[0]}
python3 "$(dirname "$0")/../tests/python/junit_summary.py" "$OUT/junit.xml" \
  | tee "$OUT/summary.txt" | tee -a "$LOG"
summary_rc=${PIPESTATUS[0]}
[ "$ctest_rc" -eq 0 ] && [ "$summary_rc" -eq 0 ]
