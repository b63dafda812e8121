#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang (ASan + UBSan), replays the crashers
# kept in tests/fuzz/regressions/<target>/, then fuzzes each target for SECONDS (default 20)
# from its seed corpus in tests/fuzz/corpus/<target>/. New inputs go to build-fuzz/corpus/
# (not committed); a crash leaves its input in build-fuzz/artifacts/<target>/ and makes the
# script fail. Keep a fixed crasher in tests/fuzz/regressions/<target>/.
#
#   bash scripts/fuzz.sh [SECONDS] [TARGET...]     JOBS=n sets the build parallelism
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}
shift || true
all_targets=(fuzz_conf fuzz_pickle fuzz_trace_reader fuzz_ops fuzz_capi fuzz_preload)
[ $# -gt 0 ] && targets=("$@") || targets=("${all_targets[@]}")
jobs=${JOBS:-$(nproc)}
build=build-fuzz

cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
      -DCMAKE_CXX_COMPILER=clang++ -DCUDALLOC_FUZZ=ON -DCUDALLOC_BUILD_CUDA=OFF \
      -DCUDALLOC_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" -j"$jobs" --target "${targets[@]}"

export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export CUDALLOC_LOG=off
declare -A dict=([fuzz_conf]=tests/fuzz/conf.dict [fuzz_trace_reader]=tests/fuzz/trace_reader.dict)
declare -A max_len=([fuzz_conf]=512 [fuzz_pickle]=4096 [fuzz_trace_reader]=8192 [fuzz_ops]=2048
                  [fuzz_capi]=1024 [fuzz_preload]=1024)
status=0
summary=()
for t in "${targets[@]}"; do
  bin=$build/fuzz/$t
  regressions=(tests/fuzz/regressions/$t/*)
  if [ -e "${regressions[0]}" ]; then
    echo "== $t: replaying ${#regressions[@]} regression input(s)"
    "$bin" -runs=1 "${regressions[@]}" >"$build/$t.replay.log" 2>&1 \
      || { echo "FAIL: $t regression replay (see $build/$t.replay.log)"; tail -30 "$build/$t.replay.log"; status=1; }
  fi
  [ "$seconds" -gt 0 ] || continue
  mkdir -p "$build/corpus/$t" "$build/artifacts/$t"
  args=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
        -max_len="${max_len[$t]}" -artifact_prefix="$build/artifacts/$t/")
  [ -n "${dict[$t]:-}" ] && args+=(-dict="${dict[$t]}")
  echo "== $t: fuzzing for ${seconds}s"
  if "$bin" "${args[@]}" "$build/corpus/$t" "tests/fuzz/corpus/$t" >"$build/$t.log" 2>&1; then
    result=ok
  else
    result="CRASH (input in $build/artifacts/$t/, log $build/$t.log)"
    tail -40 "$build/$t.log"
    status=1
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$build/$t.log")
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$build/$t.log")
  cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$build/$t.log" | tail -1)
  summary+=("$t: ${runs:-?} runs, ${speed:-?} exec/s, ${cov:-no coverage line}: $result")
done
echo "== fuzz summary (${seconds}s per target)"
printf '  %s\n' "${summary[@]}"
exit $status
