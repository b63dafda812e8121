#!/usr/bin/env bash
# docs/configuration.md must contain the table generated from the options table.
set -u
cli=${1:?usage: check_options_doc.sh CUDALLOC_CLI DOC}
doc=${2:?}
expected=$("$cli" options --markdown) || exit 1
if ! grep -qF -- "$(echo "$expected" | head -3 | tail -1)" "$doc"; then
  echo "FAIL: $doc is out of date; regenerate the table with: cudalloc options --markdown"; exit 1
fi
while IFS= read -r line; do
  grep -qxF -- "$line" "$doc" || { echo "FAIL: missing or stale row in $doc: $line"; exit 1; }
done <<< "$expected"
# Sizes are for people: in binary units (256 KiB), never a raw byte count (0, no cap, aside).
if raw=$(grep -E '^\| `[a-z_]+` \| bytes \| `[0-9]+` \|' <<< "$expected" | grep -vF '| `0` |'); then
  echo "FAIL: a size default is a raw byte count, not in binary units: $raw"; exit 1
fi
echo "ok: $doc matches the options table"
