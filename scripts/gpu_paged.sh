#!/usr/bin/env bash
# Paged segments on the GPU machine (docs/benchmarks.md has the tables):
#
#   scripts/gpu_paged.sh BUILD_DIR bench|workloads [WORKLOADS] [REPEAT]
#
# bench:     cudalloc-bench of BUILD_DIR twice (every allocator in the same run, the second
#            run to show the machine's noise), to $OUT/bench_{1,2}.txt and .json.
# workloads: tools/bench/torch_workloads.py for WORKLOADS (comma-separated; default the
#            varlen ones) under native, expandable segments and cudalloc, native and cudalloc
#            REPEAT times interleaved (default 2), to $OUT/workloads.txt and .json.
# $OUT defaults to ./gpu-paged-out.
set -u
build=${1:?build dir} what=${2:?bench or workloads}
out=${OUT:-$PWD/gpu-paged-out}
mkdir -p "$out"
nvidia-smi -L || true
case $what in
  bench)
    bench=$(find "$build" -name cudalloc-bench -type f -perm -u+x | head -n 1)
    [ -n "$bench" ] || { echo "no cudalloc-bench in $build"; exit 2; }
    for n in 1 2; do
      "$bench" --json "$out/bench_$n.json" | tee "$out/bench_$n.txt" || exit 1
    done ;;
  workloads)
    list=${3:-gpt2_infer_varlen,llama_train_varlen,gnn_train_varlen}
    export CUDALLOC_LIBRARY=$PWD/$build/libcudalloc.so PYTHONUNBUFFERED=1
    python3 tools/bench/torch_workloads.py --workloads "$list" --repeat "${4:-2}" \
      --json "$out/workloads.json" 2>"$out/stderr.txt" | tee "$out/workloads.txt"
    rc=${PIPESTATUS[0]}
    tail -c 100000 "$out/stderr.txt" > "$out/stderr_tail.txt"; rm -f "$out/stderr.txt"
    exit "$rc" ;;
  *) echo "unknown: $what"; exit 2 ;;
esac
