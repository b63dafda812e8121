#!/usr/bin/env bash
# PyTorch drop-in fidelity on the GPU machine (docs/pytorch.md has the table):
#
#   scripts/gpu_dropin.sh [BUILD_DIR] [torch_dropin.py options...]
#
# Runs tools/bench/torch_dropin.py with the cudalloc of BUILD_DIR (default build-gpu, which
# must hold libcudalloc_torch.so: configure it with -DCUDALLOC_TORCH_DIR). Output goes to
# $OUT (default ./gpu-dropin-out): dropin.txt (the table) and dropin.json.
set -u
build=${1:-build-gpu}
shift || true
out=${OUT:-$PWD/gpu-dropin-out}
mkdir -p "$out"
export CUDALLOC_LIBRARY=$PWD/$build/libcudalloc.so PYTHONUNBUFFERED=1
python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name(0))'
python3 tools/bench/torch_dropin.py --json "$out/dropin.json" "$@" 2>"$out/stderr.txt" \
  | tee "$out/dropin.txt"
rc=${PIPESTATUS[0]}
tail -c 200000 "$out/stderr.txt" > "$out/stderr_tail.txt"; rm -f "$out/stderr.txt"
exit "$rc"
