#!/usr/bin/env bash
# Installs what is missing, builds cudalloc and shows it working.
#  - With an NVIDIA GPU: a training-shaped loop on the real device, then the benchmark against
#    cudaMalloc, cudaMallocAsync and CUB's caching allocator.
#  - Without one: a real PyTorch allocation trace (GPT-2 training) replayed through cudalloc
#    and through PyTorch's own rules on the simulated device, with the resulting snapshot
#    inspected and converted for PyTorch's memory viewer.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)"

if command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q GPU; then
  echo "== GPU found: $(nvidia-smi -L | head -1)"
  ./build/training_loop 200
  [ -x build/cudalloc-bench ] && ./build/cudalloc-bench --quick
  exit 0
fi

trace=examples/replay/gpt2_train.json.gz
echo "== no GPU: replaying $trace on the simulated device"
./build/cudalloc replay "$trace"
echo
./build/cudalloc replay --table "$trace"
echo
echo "== cudalloc's state after the replay (build/demo_snapshot.json)"
./build/cudalloc replay --policy cudalloc --conf trace:20000 --snapshot build/demo_snapshot.json \
  "$trace" >/dev/null
./build/cudalloc inspect build/demo_snapshot.json --top 5
./build/cudalloc convert build/demo_snapshot.json -o build/demo_snapshot.pickle
echo "== build/demo_snapshot.pickle opens in https://pytorch.org/memory_viz or with"
echo "   python -m torch.cuda._memory_viz trace_plot build/demo_snapshot.pickle -o trace.html"
