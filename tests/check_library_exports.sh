#!/usr/bin/env bash
# A shared library exports only its own C entry points: every defined dynamic symbol starts
# with PREFIX. Anything else, above all a C++ standard library template instance, would
# interpose the process's own copy for every library loaded after this one.
#   check_library_exports.sh LIBRARY PREFIX
set -euo pipefail
lib=${1:?library} prefix=${2:?prefix}
names=$("$(dirname "$0")"/dynamic_symbols.sh "$lib" | cut -d' ' -f2)
stray=$(grep -v "^$prefix" <<<"$names" || true)
if [ -n "$stray" ]; then
  echo "$lib exports $(wc -l <<<"$stray") symbols outside $prefix*, e.g.:"
  head -n 20 <<<"$stray" | c++filt
  exit 1
fi
echo "$lib: $(grep -c "^$prefix" <<<"$names") symbols, all $prefix*"
