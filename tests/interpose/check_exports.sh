#!/usr/bin/env bash
# The preload library exports exactly the CUDA symbols of interpose/symbols.def, plus dlsym and
# the C API; and every entry point that interpose/*.cpp defines with default visibility is in
# the table (one left out would be defined but never handed out by dlsym or cuGetProcAddress).
#   check_exports.sh LIBRARY INTERPOSE_DIR "NAME;NAME;..."
set -euo pipefail
lib=$1 dir=$2
table=$(tr ';' '\n' <<<"$3" | sort -u)
exported=$("$(dirname "$0")"/../dynamic_symbols.sh "$lib" | awk '$1 ~ /^[TWi]$/ {print $2}' |
           grep -v -e '^cudalloc_' -e '^dlsym$' | sort -u)
defined=$(grep -hoE 'visibility\("default"\)\)\) (int|void\*) (cu[A-Za-z0-9_]+)\(' "$dir"/*.cpp |
          sed -E 's/.* (cu[A-Za-z0-9_]+)\($/\1/' | sort -u)
status=0
if [ "$exported" != "$table" ]; then
  echo "exported symbols and interpose/symbols.def disagree (< exported, > table):"
  diff <(echo "$exported") <(echo "$table") || true
  status=1
fi
if [ "$defined" != "$table" ]; then
  echo "definitions in interpose/*.cpp and interpose/symbols.def disagree (< defined, > table):"
  diff <(echo "$defined") <(echo "$table") || true
  status=1
fi
[ $status -eq 0 ] && echo "$(wc -l <<<"$table") symbols: table, definitions and exports agree"
exit $status
