#!/usr/bin/env bash
# Installs what is missing, builds cudalloc twice (plain, and with AddressSanitizer and
# UndefinedBehaviorSanitizer) and runs every test in both, the concurrent tests under
# ThreadSanitizer, and each fuzz target for FUZZ_SECONDS (default 20). GPU tests report
# themselves as skipped on machines without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
jobs=$(nproc)

cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j"$jobs"
(cd build && ctest -j"$jobs" --output-on-failure)

# Sanitizer build: the unit and C API tests, no CUDA code.
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCUDALLOC_SANITIZE=address,undefined \
      -DCUDALLOC_BUILD_CUDA=OFF
cmake --build build-asan -j"$jobs"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
   ctest -j"$jobs" --output-on-failure -L "unit|capi")

# ThreadSanitizer build: the concurrent tests.
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DCUDALLOC_SANITIZE=thread \
      -DCUDALLOC_BUILD_CUDA=OFF
cmake --build build-tsan -j"$jobs" --target cudalloc_unit_tests
(cd build-tsan && TSAN_OPTIONS=halt_on_error=1 ctest --output-on-failure -L concurrency)

# Fuzz targets (clang, libFuzzer, ASan/UBSan): the kept crashers, then a short run of each.
bash scripts/fuzz.sh "${FUZZ_SECONDS:-20}"
