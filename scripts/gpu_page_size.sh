#!/usr/bin/env bash
# Paged segments' page size on the GPU machine (docs/benchmarks.md has the tables):
#
#   scripts/gpu_page_size.sh DEPS_ROOT STEP[,STEP...] [CONF...]
#
# Builds build-gpu (scripts/gpu_build.sh; incremental on a warm machine), then runs each STEP
# once per CONF (CUDALLOC_CONF strings; default: "" page_size:8M page_size:16M), alternating
# the CONFs so that the machine's drift falls on all alike:
#   bench      cudalloc-bench twice per CONF (every peer in the same run)
#   sleep      tools/bench/sleep_wake.py once per CONF (through the adapter and LD_PRELOAD)
#   workloads  tools/bench/torch_workloads.py over $WORKLOADS (default the varlen ones):
#              native, expandable and cudalloc with the first CONF, cudalloc alone with the
#              others, then cudalloc with the first CONF again; with $REPEAT, each of those
#              runs native and cudalloc REPEAT times, interleaved (--repeat)
# Everything goes to $OUT (default ./gpu-page-size-out); tables are printed as they come.
set -u
deps=${1:?deps root} steps=${2:?steps}
shift 2
confs=("$@")
[ ${#confs[@]} -gt 0 ] || confs=("" "page_size:8M" "page_size:16M")
out=${OUT:-$PWD/gpu-page-size-out}
mkdir -p "$out"
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
nvidia-smi -L || true
bash scripts/gpu_build.sh "$deps" build-gpu > "$out/build.txt" 2>&1 || { cat "$out/build.txt"; exit 1; }
export CUDALLOC_LIBRARY=$root/build-gpu/libcudalloc.so PYTHONUNBUFFERED=1
name_of() { [ -n "$1" ] && echo "${1//[:,]/_}" || echo default; }
rc=0
for step in ${steps//,/ }; do
  case $step in
    bench)
      for n in 1 2; do
        for conf in "${confs[@]}"; do
          f=$out/bench_$(name_of "$conf")_$n
          echo "== cudalloc-bench, CUDALLOC_CONF='$conf', run $n ($(date -u +%H:%M:%S) UTC)"
          CUDALLOC_CONF=$conf build-gpu/tools/bench/cudalloc-bench --json "$f.json" | tee "$f.txt" || rc=1
        done
      done ;;
    sleep)
      for conf in "${confs[@]}"; do
        f=$out/sleep_$(name_of "$conf")
        echo "== sleep_wake, CUDALLOC_CONF='$conf' ($(date -u +%H:%M:%S) UTC)"
        CUDALLOC_CONF=$conf CUDALLOC_LOG=debug python3 tools/bench/sleep_wake.py \
          --json "$f.json" --child-logs "$f" ${SLEEP_WAKE_ARGS:-} || rc=1
      done ;;
    workloads)
      list=${WORKLOADS:-gpt2_infer_varlen,llama_train_varlen,gnn_train_varlen}
      runs=("${confs[0]}|native,expandable,cudalloc")
      for conf in "${confs[@]:1}"; do runs+=("$conf|cudalloc"); done
      runs+=("${confs[0]}|cudalloc")
      n=0
      for run in "${runs[@]}"; do
        conf=${run%%|*} modes=${run#*|}
        n=$((n + 1))
        f=$out/workloads_${n}_$(name_of "$conf")
        echo "== torch_workloads $list, modes $modes, CUDALLOC_CONF='$conf' ($(date -u +%H:%M:%S) UTC)"
        python3 tools/bench/torch_workloads.py --workloads "$list" --modes "$modes" \
          --conf "$conf" ${REPEAT:+--repeat "$REPEAT"} --json "$f.json" 2>"$f.stderr" \
          | tee "$f.txt" || rc=1
        tail -c 20000 "$f.stderr" > "$f.stderr_tail"; rm -f "$f.stderr"
      done ;;
    *) echo "unknown step: $step"; exit 2 ;;
  esac
done
exit $rc
