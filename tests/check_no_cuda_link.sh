#!/usr/bin/env bash
# libcudalloc.so must load without a driver: it may not depend on libcuda or libcudart.
set -u
lib=${1:?usage: check_no_cuda_link.sh LIBRARY}
needed=$(readelf -d "$lib" | grep NEEDED)
echo "$needed"
if echo "$needed" | grep -qE "libcuda|libcudart"; then
  echo "FAIL: $lib links CUDA"; exit 1
fi
echo "ok: no CUDA link"
