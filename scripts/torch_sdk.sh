#!/usr/bin/env bash
# Packs the installed PyTorch's C++ headers (c10, torch/csrc/cuda) and the c10 libraries into
# $OUT/torch-sdk.tgz, so that the PyTorch adapter (torch/) can be compiled on a machine
# without PyTorch against exactly the version the GPU machine runs.
set -euo pipefail
out=${OUT:?}
tdir=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')
python3 -c 'import torch; print(torch.__version__, torch.version.cuda, torch._C._GLIBCXX_USE_CXX11_ABI)' | tee "$out/torch-version.txt"
cd "$tdir"
tar czf "$out/torch-sdk.tgz" include/c10 include/torch/csrc/cuda include/torch/headeronly \
  lib/libc10.so lib/libc10_cuda.so cuda/memory.py cuda/graphs.py _C/__init__.pyi \
  _inductor/cudagraph_trees.py multiprocessing/reductions.py 2>&1 || true
ls -la "$out"
