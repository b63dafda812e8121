#!/usr/bin/env bash
# Builds cudalloc on the GPU machine, where Debian's -dev packages are absent, against the
# installed PyTorch (so the adapter is built too):
#
#   scripts/gpu_build.sh DEPS_ROOT [BUILD_DIR]   (BUILD_DIR default build-gpu)
#
# DEPS_ROOT holds the headers of spdlog, fmt, nlohmann-json and zlib unpacked from Debian's
# packages on the development machine (scripts/gpu_deps.sh makes it). Release build (or
# $CUDALLOC_BUILD_TYPE, e.g. RelWithDebInfo for a debugger's backtrace), no unit tests: the
# libraries, the adapter, cudalloc-bench and page-move-bench.
set -euo pipefail
deps=$(cd "${1:?deps root}" && pwd)
build=${2:-build-gpu}
torch_dir=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')
zlib=$(ls /usr/lib/x86_64-linux-gnu/libz.so.1 /lib/x86_64-linux-gnu/libz.so.1 2>/dev/null | head -n 1)
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE="${CUDALLOC_BUILD_TYPE:-Release}" -DCUDALLOC_BUILD_TESTS=OFF \
  -DCMAKE_PREFIX_PATH="$deps/usr" -DSPDLOG_INCLUDE_DIR="$deps/usr/include" \
  -DFMT_INCLUDE_DIR="$deps/usr/include" -DZLIB_INCLUDE_DIR="$deps/usr/include" \
  -DZLIB_LIBRARY="$zlib" -DCUDALLOC_TORCH_DIR="$torch_dir" >/dev/null
cmake --build "$build" -j"$(nproc)" --target cudalloc cudalloc_preload cudalloc_torch \
  cudalloc-bench page-move-bench 2>&1 | grep -E "error|warning|Built target" || true
ls "$build"/libcudalloc.so "$build"/libcudalloc_preload.so "$build"/libcudalloc_torch.so
# The adapter is built only here, where no unit test runs: check its exports (a C++ standard
# library instance exported from it crashed cuDNN's first convolution).
bash tests/check_library_exports.sh "$build"/libcudalloc_torch.so cudalloc_torch_
