#!/usr/bin/env bash
# Installs what building and testing cudalloc needs from Debian/Ubuntu packages, if missing.
# The CUDA toolkit itself (nvcc, headers) is expected at /usr/local/cuda or on PATH.
set -euo pipefail

packages=(cmake g++ make libspdlog-dev libfmt-dev nlohmann-json3-dev catch2 zlib1g-dev python3
          pkg-config python3-pip python3-setuptools python3-wheel valgrind)
# For tests/check_viewer.sh (headless browser). Optional: where the distribution has no such
# package (Ubuntu ships Chromium as a snap), the install is skipped and that test reports SKIP.
optional=(chromium)
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
missing=()
for p in "${packages[@]}"; do installed "$p" || missing+=("$p"); done
missing_optional=()
for p in "${optional[@]}"; do installed "$p" || missing_optional+=("$p"); done
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
if [ ${#missing[@]} -gt 0 ] || [ ${#missing_optional[@]} -gt 0 ]; then
  $sudo apt-get update -qq
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if [ ${#missing_optional[@]} -gt 0 ]; then
  echo "installing (optional): ${missing_optional[*]}"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing_optional[@]}" || echo "warning: could not install ${missing_optional[*]}; the viewer test will be skipped" >&2
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
