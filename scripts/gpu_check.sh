#!/usr/bin/env bash
# Every GPU-side check in one call, run on the GPU machine from the repository root:
#
#   scripts/gpu_check.sh [BUILD_DIR]      (BUILD_DIR: an already-built Release tree, default build-gpu)
#
# Steps: nvidia-smi -L, the GPU test (cudalloc_gpu_test), the benchmark (cudalloc-bench, JSON
# into $OUT/bench.json), and the PyTorch scripts tests/python/test_torch_train.py and
# tools/bench/torch_empty_bench.py when they exist (with CUDALLOC_LIBRARY and PYTHONPATH set).
# Everything is also written to $OUT/gpu_check.log (OUT defaults to ./gpu-check-out); a
# summary table (PASS / FAIL / SKIP per step; exit 77 means SKIP) comes last and goes to
# $OUT/summary.txt as well. Every step runs even after a failure; the exit status is 1 when
# any step failed, else 0.
set -u

BUILD_ARG=${1:-build-gpu}
OUT=${OUT:-$PWD/gpu-check-out}
mkdir -p "$OUT"
LOG=$OUT/gpu_check.log
: >"$LOG"

# Per-step wall-clock limits (s); together they stay under a 10-minute device call.
LIMIT_SMI=30
LIMIT_GPU_TEST=90
LIMIT_BENCH=120
LIMIT_TORCH_TRAIN=100
LIMIT_TORCH_EMPTY=60
LIMIT_TORCH_SNAPSHOT=120
LIMIT_LOOP=60
LIMIT_CHURN=60
LIMIT_FRAMEWORKS=300
LIMIT_SANITIZER=150
LIMIT_TORCH_WORKLOADS=480

# GPU_STEPS="bench preload ..." runs only the named steps (default: all).
want() { [ -z "${GPU_STEPS:-}" ] || [[ " $GPU_STEPS " == *" $1 "* ]]; }

STEP_NAMES=()
STEP_RESULTS=()
STEP_SECONDS=()

log() { echo "$*" | tee -a "$LOG"; }

record() {  # NAME RESULT SECONDS
  STEP_NAMES+=("$1")
  STEP_RESULTS+=("$2")
  STEP_SECONDS+=("$3")
}

# run_step NAME LIMIT COMMAND...: runs COMMAND under `timeout`, output teed into the log.
# Exit 0 is PASS, 77 is SKIP, anything else (124: timed out) is FAIL.
run_step() {
  local name=$1 limit=$2
  shift 2
  log "===== $name: $*"
  local start=$SECONDS
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  local result=FAIL
  if [ "$rc" -eq 0 ]; then result=PASS; elif [ "$rc" -eq 77 ]; then result=SKIP; fi
  if [ "$rc" -eq 124 ]; then log "(timed out after ${limit} s)"; fi
  record "$name" "$result" "$((SECONDS - start))"
  log "===== $name: $result (exit $rc, $((SECONDS - start)) s)"
}

skip_step() {  # NAME REASON
  record "$1" SKIP 0
  log "===== $1: SKIP ($2)"
}

fail_step() {  # NAME REASON
  record "$1" FAIL 0
  log "===== $1: FAIL ($2)"
}

# The binary NAME under the build tree (its usual place first), or nothing.
find_binary() {
  local usual=$1 name=$2
  if [ -x "$BUILD/$usual" ]; then
    echo "$BUILD/$usual"
  else
    find "$BUILD" -name "$name" -type f -perm -u+x 2>/dev/null | head -n 1
  fi
}

# Library path for the C++ binaries: the build tree, plus the toolkit's runtime when the
# loader cannot find libcudart on its own. Not used for Python, so torch keeps its own libs.
binary_library_path() {
  local path=$BUILD
  if ldd "$1" 2>/dev/null | grep -q "libcudart.*not found"; then
    local dir
    for dir in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
      if [ -d "$dir" ]; then path=$path:$dir; fi
    done
  fi
  echo "$path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

run_binary_step() {  # NAME LIMIT BINARY ARGS...
  local name=$1 limit=$2 binary=$3
  shift 3
  local libpath
  libpath=$(binary_library_path "$binary")
  ldd "$binary" 2>&1 | grep -E "cudalloc|cudart|not found" >>"$LOG"
  run_step "$name" "$limit" env LD_LIBRARY_PATH="$libpath" "$binary" "$@"
}

run_python_step() {  # NAME LIMIT SCRIPT
  local name=$1 limit=$2 script=$3
  if [ ! -f "$script" ]; then
    skip_step "$name" "$script does not exist"
    return
  fi
  run_step "$name" "$limit" env CUDALLOC_LIBRARY="$BUILD/libcudalloc.so" \
    PYTHONPATH="tools/python${PYTHONPATH:+:$PYTHONPATH}" OUT="$OUT" python3 "$script"
}

print_summary() {  # returns 1 when a step failed
  local i failed=0
  {
    echo
    printf '%-16s %-6s %8s\n' step result seconds
    for i in "${!STEP_NAMES[@]}"; do
      printf '%-16s %-6s %8s\n' "${STEP_NAMES[$i]}" "${STEP_RESULTS[$i]}" "${STEP_SECONDS[$i]}"
    done
  } | tee "$OUT/summary.txt" | tee -a "$LOG"
  for i in "${STEP_RESULTS[@]}"; do
    if [ "$i" = FAIL ]; then failed=1; fi
  done
  return "$failed"
}

log "gpu_check: $(date -u '+%Y-%m-%dT%H:%M:%SZ') on $(hostname), build dir $BUILD_ARG, out $OUT"
log "CUDALLOC_CONF=${CUDALLOC_CONF:-} CUDALLOC_LOG=${CUDALLOC_LOG:-}"

if ! BUILD=$(cd "$BUILD_ARG" 2>/dev/null && pwd); then
  BUILD=$BUILD_ARG
  log "build dir $BUILD_ARG does not exist"
fi

run_step nvidia-smi "$LIMIT_SMI" nvidia-smi -L

GPU_TEST=$(find_binary tests/gpu/cudalloc_gpu_test cudalloc_gpu_test)
if want gpu-test; then
  if [ -n "$GPU_TEST" ]; then
    run_binary_step gpu-test "$LIMIT_GPU_TEST" "$GPU_TEST"
    # Every page move the policy can make (no slack: idle pages move before new memory is
    # taken), and plain segments.
    run_binary_step gpu-test-page-moves "$LIMIT_GPU_TEST" env CUDALLOC_CONF=page_slack:0 "$GPU_TEST"
    run_binary_step gpu-test-plain "$LIMIT_GPU_TEST" env CUDALLOC_CONF=vmm:0 "$GPU_TEST"
  else
    fail_step gpu-test "cudalloc_gpu_test not found under $BUILD"
  fi
fi

BENCH=$(find_binary tools/bench/cudalloc-bench cudalloc-bench)
if want bench; then
  if [ -n "$BENCH" ]; then
    run_binary_step bench "$LIMIT_BENCH" "$BENCH" --json "$OUT/bench.json"
  else
    fail_step bench "cudalloc-bench not found under $BUILD"
  fi
fi

want torch-train && run_python_step torch-train "$LIMIT_TORCH_TRAIN" tests/python/test_torch_train.py
want torch-empty && run_python_step torch-empty "$LIMIT_TORCH_EMPTY" tools/bench/torch_empty_bench.py
want torch-snapshot && run_python_step torch-snapshot "$LIMIT_TORCH_SNAPSHOT" tests/python/test_snapshot_tools.py
if want torch-workloads; then
  run_step torch-workloads "$LIMIT_TORCH_WORKLOADS" env CUDALLOC_LIBRARY="$BUILD/libcudalloc.so" \
    PYTHONPATH="tools/python${PYTHONPATH:+:$PYTHONPATH}" python3 tools/bench/torch_workloads.py \
    --json "$OUT/torch_workloads.json"
fi

LOOP=$(find_binary training_loop training_loop)
if want training-loop; then
  if [ -n "$LOOP" ]; then
    run_binary_step training-loop "$LIMIT_LOOP" "$LOOP" 300
  else
    fail_step training-loop "training_loop not found under $BUILD"
  fi
fi

# LD_PRELOAD: a program with the CUDA runtime linked statically, with and without cudalloc;
# the snapshot at exit proves who served its allocations.
CHURN=$(find_binary preload_churn preload_churn)
PRELOAD=$BUILD/libcudalloc_preload.so
if want preload; then
  if [ -n "$CHURN" ] && [ -f "$PRELOAD" ]; then
    run_step churn-plain "$LIMIT_CHURN" "$CHURN" 3000
    run_step churn-preload "$LIMIT_CHURN" env LD_PRELOAD="$PRELOAD" \
      CUDALLOC_CONF="snapshot_at_exit:$OUT/churn_snapshot.json" "$CHURN" 3000
    run_step churn-served "$LIMIT_SMI" python3 -c "import json,sys; s=json.load(open('$OUT/churn_snapshot.json'))['cudalloc']['devices'][0]['stats']; print({k: s[k]['total'] for k in ('allocated_count','device_allocs','cache_hits','pending_frees')}); sys.exit(0 if s['allocated_count']['total'] >= 6000 else 1)"
  else
    fail_step preload "preload_churn or libcudalloc_preload.so missing under $BUILD"
  fi
fi
if want frameworks; then
  run_step frameworks "$LIMIT_FRAMEWORKS" python3 tests/python/preload_frameworks.py "$PRELOAD" \
    --json "$OUT/frameworks.json"
fi
if want sanitizer; then
  SANITIZER=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
  if [ -n "$SANITIZER" ] && [ -n "$GPU_TEST" ]; then
    for tool in memcheck racecheck; do
      run_step "$tool" "$LIMIT_SANITIZER" env LD_LIBRARY_PATH="$(binary_library_path "$GPU_TEST")" \
        "$SANITIZER" --tool "$tool" --error-exitcode 9 "$GPU_TEST"
    done
  else
    skip_step memcheck "compute-sanitizer not found"
  fi
fi

if print_summary; then exit 0; else exit 1; fi
