#!/usr/bin/env bash
# Lower layers never include higher ones: util -> device -> core -> api -> snapshot.
# Only allocator/device/ may include CUDA headers.
set -u
root=${1:?usage: check_layers.sh ALLOCATOR_DIR}
status=0
check() {  # check DIR FORBIDDEN_PATTERN WHY
  local hits
  hits=$(grep -rnE "#include [<\"]($2)" "$root/$1" 2>/dev/null)
  if [ -n "$hits" ]; then
    echo "layer violation ($3):"; echo "$hits"; status=1
  fi
}
check util   "device/|core/|api/|snapshot/" "util includes nothing above it"
check device "core/|api/|snapshot/"         "device includes neither core nor api"
check core   "api/|snapshot/"               "core does not include api or snapshot"
check api    "snapshot/"                    "api does not include snapshot"
for dir in util core api; do
  check "$dir" "cuda\.h|cuda_runtime|cudaTypedefs" "only device/ talks to CUDA"
done
[ $status -eq 0 ] && echo "layers ok"
exit $status
