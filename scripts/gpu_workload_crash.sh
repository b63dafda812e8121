#!/usr/bin/env bash
# Where a PyTorch workload crashes under cudalloc, on the GPU machine:
#
#   scripts/gpu_workload_crash.sh DEPS_ROOT WORKLOAD [TREE...]
#
# Builds this tree in Release with debug information (build-dbg; scripts/gpu_build.sh with
# CXXFLAGS=-g: g++ 13 at RelWithDebInfo's -O2 stops on false -Warray-bounds) and runs
# WORKLOAD's cudalloc child of tools/bench/torch_workloads.py (6 steps) under gdb, printing
# every thread's backtrace when it stops, or, without gdb, with scripts/segv_backtrace.c
# preloaded (native frames at the fault); then once through the pluggable path
# (CUDALLOC_TORCH_ADAPTER=0), which does not use the adapter. Then each TREE (another
# revision's sources, exported beside this one with `git archive REV --prefix=DIR/ | tar -x`,
# since the GPU machine gets no .git) is built in Release (with this tree's gpu_build.sh) and
# its child run once, so that one call both locates the crash and says which revisions have
# it; the backtrace comes first, so a call cut short by its time limit still returns it.
# With CARRIED_LIBRARY=PATH (a libcudalloc.so built on the development machine and carried),
# the child also runs with that library under this tree's adapter.
# Output goes to $OUT (default ./gpu-crash-out).
set -u
deps=$(cd "${1:?deps root}" && pwd)
workload=${2:?workload}
shift 2
out=${OUT:-$PWD/gpu-crash-out}
mkdir -p "$out"
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
child=(python3 tools/bench/torch_workloads.py --child cudalloc --workloads "$workload" --steps 6)
run_child() {  # LIBRARY LABEL: one child, its exit status and the end of its stderr
  CUDALLOC_LIBRARY=$1 CUDALLOC_LOG=debug PYTHONFAULTHANDLER=1 timeout 300 "${child[@]}" \
    > "$out/$2.out" 2> "$out/$2.err"
  echo "== $2: exit status $?"
  tail -n 80 "$out/$2.err" | cut -c1-400  # Python's frames, then native ones if preloaded
}
CXXFLAGS="-g ${CXXFLAGS:-}" bash scripts/gpu_build.sh "$deps" build-dbg \
  > "$out/build-dbg.txt" 2>&1 || { tail -n 40 "$out/build-dbg.txt"; exit 1; }
if command -v gdb > /dev/null; then
  echo "== this tree under gdb"
  CUDALLOC_LIBRARY=$root/build-dbg/libcudalloc.so timeout 300 gdb -q -batch \
    -ex "set pagination off" -ex run -ex "thread apply all bt 25" --args "${child[@]}" \
    > "$out/gdb.txt" 2>&1
  grep -v "^\[New Thread\|^\[Thread .* exited\|^\[Detaching" "$out/gdb.txt" | tail -n 150
else
  echo "== no gdb here: native frames from scripts/segv_backtrace.c instead"
  gcc -shared -fPIC -O1 -o "$out/segv_backtrace.so" scripts/segv_backtrace.c
  LD_PRELOAD=$out/segv_backtrace.so run_child "$root/build-dbg/libcudalloc.so" this-tree
fi
echo "== this tree, the pluggable path (CUDALLOC_TORCH_ADAPTER=0)"
CUDALLOC_TORCH_ADAPTER=0 run_child "$root/build-dbg/libcudalloc.so" this-tree-pluggable
if [ -n "${CARRIED_LIBRARY:-}" ]; then
  # A libcudalloc.so built on the development machine (g++ 12) and carried, under the adapter
  # built here: tells a fault of this machine's compiler from one of the sources.
  echo "== carried library $CARRIED_LIBRARY under this tree's adapter"
  CUDALLOC_TORCH_ADAPTER=$root/build-dbg/libcudalloc_torch.so \
    run_child "$(cd "$(dirname "$CARRIED_LIBRARY")" && pwd)/$(basename "$CARRIED_LIBRARY")" carried
fi
for tree in "$@"; do
  label=$(basename "$tree")
  (cd "$tree" && bash "$root/scripts/gpu_build.sh" "$deps" build-gpu) > "$out/build-$label.txt" 2>&1 \
    || { echo "== $label: build failed"; tail -n 20 "$out/build-$label.txt"; continue; }
  run_child "$(cd "$tree" && pwd)/build-gpu/libcudalloc.so" "$label"
done
