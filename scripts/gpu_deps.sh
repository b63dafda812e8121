#!/usr/bin/env bash
# Unpacks the headers scripts/gpu_build.sh needs (spdlog, fmt, nlohmann-json, zlib) from
# Debian's packages into DIR (default .deps, ignored by git), to be carried to the GPU machine.
set -euo pipefail
dir=${1:-.deps}
mkdir -p "$dir/debs"
(cd "$dir/debs" && apt-get download libspdlog-dev libfmt-dev nlohmann-json3-dev zlib1g-dev)
for f in "$dir"/debs/*.deb; do dpkg -x "$f" "$dir/root"; done
rm -rf "$dir/debs"
echo "$dir/root"
