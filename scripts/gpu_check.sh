#!/usr/bin/env bash
# Every GPU-side check in one call, run on the GPU machine from the repository root:
#
#   scripts/gpu_check.sh [BUILD_DIR]      (BUILD_DIR: an already-built Release tree, default build-gpu)
#
# Steps, in running order (GPU_STEPS="NAME ..." runs only those named; nvidia-smi always runs):
#   gpu-test         tests/gpu/cudalloc_gpu_test, also with page_slack:0, vmm:0 and offload:host
#   bench            cudalloc-bench, JSON into $OUT/bench.json
#   page-moves       page-move-bench: the driver calls behind moving pages, and whole moves
#   torch-train, torch-empty, torch-snapshot
#                    tests/python/test_torch_train.py, tools/bench/torch_empty_bench.py,
#                    tests/python/test_snapshot_tools.py (with CUDALLOC_LIBRARY and PYTHONPATH)
#   torch-workloads  tools/bench/torch_workloads.py, JSON into $OUT/torch_workloads.json
#   examples-pytorch examples/pytorch/train_with_cudalloc.py, snapshot_on_oom.py $OUT, and
#                    examples/replay/record_trace.py followed by cudalloc replay and view
#   offload-adamw    examples/offload/adamw_offload.py, JSON into $OUT/adamw_offload.json
#   offload-limit    torch_workloads.py gpt2_train with cudalloc at 0.6 x native's peak and
#                    offload:host, JSON into $OUT/offload_limit.json; then a check: no OOM,
#                    spills > 0, peak reserved within the limit, losses as native's
#   training-loop    examples/c_api/training_loop.c
#   preload          examples/preload/churn.cu with and without LD_PRELOAD, and its snapshot
#   offload-preload  examples/offload/oversubscribe.cu (3 GiB) without LD_PRELOAD, then under
#                    LD_PRELOAD with limit:1G,offload:host; its snapshot must show spills > 0
#   frameworks       tests/python/preload_frameworks.py
#   sanitizer        compute-sanitizer memcheck and racecheck on the GPU test
#   multi-gpu        examples/multi_gpu: DDP GPT-2 on 2 GPUs (native, cudalloc, LD_PRELOAD) and
#                    one process driving two GPUs (skipped with fewer than 2 GPUs)
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

# Per-step wall-clock limits (s). All steps together take longer than one 10-minute device
# call: choose a subset with GPU_STEPS.
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
LIMIT_EXAMPLES=120
LIMIT_OFFLOAD_PRELOAD=120
LIMIT_OFFLOAD_ADAMW=300
LIMIT_OFFLOAD_LIMIT=420
LIMIT_MULTI_GPU=300

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

run_python_step() {  # NAME LIMIT SCRIPT [ARGS...]
  local name=$1 limit=$2 script=$3
  shift 3
  if [ ! -f "$script" ]; then
    skip_step "$name" "$script does not exist"
    return
  fi
  run_step "$name" "$limit" env CUDALLOC_LIBRARY="$BUILD/libcudalloc.so" \
    PYTHONPATH="tools/python${PYTHONPATH:+:$PYTHONPATH}" OUT="$OUT" python3 "$script" "$@"
}

# python3 -c checks of the offload steps' outputs (argument: the file to read).
CHECK_OFFLOAD_SNAPSHOT='
import json, sys
s = json.load(open(sys.argv[1]))["cudalloc"]["devices"][0]["stats"]
get = lambda name, field: s.get(name, {}).get(field, 0)
print({n: get(n, "total") for n in ("allocated_count", "spills", "page_offloads", "page_prefetches")},
      {n + " peak": get(n, "peak") for n in ("reserved_bytes", "host_reserved_bytes", "host_active_bytes")})
ok = get("spills", "total") > 0 and 0 < get("reserved_bytes", "peak") <= (1 << 30)
sys.exit(0 if ok else 1)'
CHECK_OFFLOAD_LIMIT='
import json, sys
doc = json.load(open(sys.argv[1]))
runs = [r for r in doc["runs"] if r["mode"] == "cudalloc"]
row = doc["rows"][0] if doc["rows"] else {}
diff = (row.get("values_vs_native") or {}).get("cudalloc")
problems = [] if runs else ["no cudalloc run"]
for r in runs:
    c = r.get("counters_end") or {}
    limit, peak = r.get("limit_bytes"), r.get("peak_reserved")
    print({"status": r["status"], "message": r.get("message", ""), "limit": limit,
           "peak_reserved": peak, "losses_vs_native": diff,
           "step_time_vs_native_pct": row.get("step_time_vs_native_pct"),
           **{n: c.get(n) for n in ("spills", "page_offloads", "page_prefetches")}})
    if r["status"] != "ok":
        problems.append("cudalloc run " + r["status"])
    if not c.get("spills"):
        problems.append("no spills")
    if limit and peak and peak > limit:
        problems.append("peak reserved above the limit")
if diff is None or diff["max_rel"] > 1e-3:
    problems.append("losses differ from native")
print("FAIL: " + ", ".join(problems) if problems else "OK")
sys.exit(1 if problems else 0)'


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
    # The host tier: spilling past a device budget, promotion, kernels on host-backed pages.
    run_binary_step gpu-test-offload "$LIMIT_GPU_TEST" env CUDALLOC_CONF=offload:host "$GPU_TEST"
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

PAGE_MOVES=$(find_binary tools/bench/page-move-bench page-move-bench)
if want page-moves; then
  if [ -n "$PAGE_MOVES" ]; then
    run_binary_step page-moves "$LIMIT_BENCH" "$PAGE_MOVES" 256
  else
    fail_step page-moves "page-move-bench not found under $BUILD"
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

if want examples-pytorch; then
  run_python_step example-train "$LIMIT_EXAMPLES" examples/pytorch/train_with_cudalloc.py
  run_python_step example-oom "$LIMIT_EXAMPLES" examples/pytorch/snapshot_on_oom.py "$OUT"
  # Record a trace under PyTorch's allocator, then replay it and view it with the CLI.
  rm -f "$OUT/trace.json"
  run_step example-record "$LIMIT_EXAMPLES" python3 examples/replay/record_trace.py "$OUT/trace.json"
  run_step example-replay "$LIMIT_EXAMPLES" "$BUILD/cudalloc" replay "$OUT/trace.json"
  run_step example-view "$LIMIT_SMI" "$BUILD/cudalloc" view "$OUT/trace.json" -o "$OUT/trace.html"
fi
if want offload-adamw; then
  run_python_step offload-adamw "$LIMIT_OFFLOAD_ADAMW" examples/offload/adamw_offload.py \
    --child-timeout 140 --json "$OUT/adamw_offload.json"
fi
if want offload-limit; then
  rm -f "$OUT/offload_limit.json"
  run_step offload-limit "$LIMIT_OFFLOAD_LIMIT" env CUDALLOC_LIBRARY="$BUILD/libcudalloc.so" \
    PYTHONPATH="tools/python${PYTHONPATH:+:$PYTHONPATH}" python3 tools/bench/torch_workloads.py \
    --workloads gpt2_train --modes native,cudalloc --limit-fraction 0.6 --conf offload:host \
    --deterministic --steps 8 --child-timeout 200 --json "$OUT/offload_limit.json"
  run_step offload-limit-ok "$LIMIT_SMI" python3 -c "$CHECK_OFFLOAD_LIMIT" "$OUT/offload_limit.json"
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
# Host offload: a program whose 3 GiB working set is 3x the 1 GiB budget cudalloc is given;
# without LD_PRELOAD it must run too (a plain cudaMalloc of 3 GiB).
OVERSUB=$(find_binary offload_oversubscribe offload_oversubscribe)
if want offload-preload; then
  if [ -n "$OVERSUB" ] && [ -f "$PRELOAD" ]; then
    rm -f "$OUT/offload_snapshot.json"
    run_step offload-plain "$LIMIT_OFFLOAD_PRELOAD" "$OVERSUB" 24 128
    run_step offload-preload "$LIMIT_OFFLOAD_PRELOAD" env LD_PRELOAD="$PRELOAD" \
      CUDALLOC_CONF="limit:1G,offload:host,snapshot_at_exit:$OUT/offload_snapshot.json" \
      "$OVERSUB" 24 128
    run_step offload-spilled "$LIMIT_SMI" python3 -c "$CHECK_OFFLOAD_SNAPSHOT" \
      "$OUT/offload_snapshot.json"
  else
    fail_step offload-preload "offload_oversubscribe or libcudalloc_preload.so missing under $BUILD"
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

# Several GPUs (skipped with one): DDP training under torchrun with native, cudalloc and
# LD_PRELOAD; one process with a model split across two devices.
if want multi-gpu; then
  run_python_step ddp-gpt2 "$LIMIT_MULTI_GPU" examples/multi_gpu/ddp_gpt2.py \
    --preload "$PRELOAD" --json "$OUT/ddp_gpt2.json"
  run_python_step two-devices "$LIMIT_MULTI_GPU" examples/multi_gpu/two_devices.py \
    --json "$OUT/two_devices.json"
fi

if print_summary; then exit 0; else exit 1; fi
