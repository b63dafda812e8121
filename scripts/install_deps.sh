#!/usr/bin/env bash
# Installs what building and testing cudalloc needs from Debian/Ubuntu packages, if missing.
# The CUDA toolkit itself (nvcc, headers) is expected at /usr/local/cuda or on PATH.
set -euo pipefail

packages=(cmake g++ make libspdlog-dev libfmt-dev nlohmann-json3-dev catch2 zlib1g-dev python3)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if [ ! -e /usr/local/cuda/include/cuda.h ] && ! command -v nvcc >/dev/null; then
  echo "error: the CUDA toolkit is missing (expected /usr/local/cuda); install it first" >&2
  exit 1
fi
# The fuzz targets (scripts/fuzz.sh) need clang and its libFuzzer runtime. Debian 12 ships the
# runtime in libclang-rt-14-dev (pulled in by libclang-rt-dev), which clang does not depend on;
# elsewhere (older Ubuntu) it comes with clang itself.
if ! command -v clang >/dev/null || [ ! -e "$(clang -print-file-name=libclang_rt.fuzzer-x86_64.a)" ]; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  fuzz_packages=(clang)
  if apt-cache show libclang-rt-dev >/dev/null 2>&1; then fuzz_packages+=(libclang-rt-dev); fi
  echo "installing: ${fuzz_packages[*]} (fuzzing)"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${fuzz_packages[@]}"
fi
