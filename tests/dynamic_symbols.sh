#!/usr/bin/env bash
# The symbols a shared library defines for the dynamic linker, one "TYPE NAME" per line, with
# symbol versions cut off and version definitions (type A) left out. Shared by the export
# checks (check_library_exports.sh, interpose/check_exports.sh).
#   dynamic_symbols.sh LIBRARY
set -euo pipefail
nm -D --defined-only "${1:?library}" | awk 'NF == 3 && $2 != "A" {sub(/@.*/, "", $3); print $2, $3}'
