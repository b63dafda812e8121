#!/usr/bin/env bash
# Soak: replays every trace in ../shared/traces (or TRACES_DIR) in a loop through one
# long-lived allocator for MINUTES (default 5), printing per iteration the reserved memory,
# the segments obtained so far and the host RSS, so that their flatness can be judged. Not
# part of CI. Builds build/ (the plain configuration) first.
#
#   bash scripts/soak.sh [MINUTES]      JOBS=n sets the build parallelism
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-5}
traces_dir=${TRACES_DIR:-../shared/traces}
shopt -s nullglob
traces=("$traces_dir"/*.json.gz "$traces_dir"/*.json "$traces_dir"/*.pickle "$traces_dir"/*.csv)
if [ ${#traces[@]} -eq 0 ]; then
  echo "no traces in $traces_dir" >&2
  exit 1
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"${JOBS:-$(nproc)}" --target cudalloc_soak
echo "soak: ${#traces[@]} traces, ${minutes} min"
CUDALLOC_LOG=error build/tests/cudalloc_soak "$((minutes * 60))" "${traces[@]}"
