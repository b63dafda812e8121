#!/usr/bin/env bash
# A shared library exports only its own C entry points: every defined dynamic symbol starts
# with PREFIX. Anything else, above all a C++ standard library template instance, would
# interpose the process's own copy for every library loaded after this one.
#   check_library_exports.sh LIBRARY PREFIX
set -euo pipefail
lib=${1:?library} prefix=${2:?prefix}
stray=$(nm -D --defined-only "$lib" | awk 'NF == 3 && $2 != "A" {print $3}' | sed 's/@.*//' |
        grep -v "^$prefix" || true)
if [ -n "$stray" ]; then
  echo "$lib exports $(wc -l <<<"$stray") symbols outside $prefix*, e.g.:"
  head -n 20 <<<"$stray" | c++filt
  exit 1
fi
echo "$lib: $(nm -D --defined-only "$lib" | grep -c " $prefix") symbols, all $prefix*"
