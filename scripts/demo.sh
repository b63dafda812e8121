#!/usr/bin/env bash
# Installs what is missing, builds cudalloc and shows it working: on a machine with an NVIDIA
# GPU, the allocator on the real device (a training-shaped loop and the benchmark against
# cudaMalloc, cudaMallocAsync and CUB); without one, the same loop on the simulated device.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)"

if command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q GPU; then
  echo "== GPU found: $(nvidia-smi -L | head -1)"
  ./build/training_loop 200
  [ -x build/cudalloc-bench ] && ./build/cudalloc-bench --quick
else
  echo "== no GPU: running on the simulated device (CUDALLOC_DEVICE=fake:80G)"
  CUDALLOC_DEVICE=fake:80G ./build/training_loop 200
fi
