#!/usr/bin/env bash
# The cudalloc CLI on good and bad input: exit codes (0 ok, 2 bad input) and messages that say
# what is wrong and where. Usage: check_cli.sh CUDALLOC_CLI TRACE
set -u
cli=${1:?usage: check_cli.sh CUDALLOC_CLI TRACE}
trace=${2:?}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failures=0

expect() {  # expect CODE PATTERN COMMAND...: exit status CODE and PATTERN in the output
  local code=$1 pattern=$2
  shift 2
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  if [ "$rc" -ne "$code" ] || ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL: $* -> exit $rc (want $code), output:"; echo "$out" | head -5
    failures=$((failures + 1))
  else
    echo "ok: $* -> $rc"
  fi
}

# Good input.
expect 0 "peak live" "$cli" replay "$trace"
expect 0 '"fragmentation"' "$cli" replay --json "$trace"
expect 0 "^\| trace" "$cli" replay --table "$trace"
expect 0 "" "$cli" replay --conf trace:1000 --snapshot "$dir/s.json" "$trace"
expect 0 "reserved" "$cli" inspect "$dir/s.json"
expect 0 "" "$cli" convert "$dir/s.json" -o "$dir/s.pickle"
expect 0 "reserved" "$cli" inspect "$dir/s.pickle"
expect 0 "" "$cli" convert "$dir/s.pickle" -o "$dir/back.json.gz"
# A ring-buffer trace starts mid-run: its first frees are of allocations it never saw.
expect 2 "not live; --skip-inconsistent" "$cli" replay "$dir/s.pickle"
expect 0 "skipped [0-9]+ inconsistent" "$cli" replay --policy pytorch --skip-inconsistent "$dir/s.pickle"
expect 0 "commands:" "$cli" help

# view and diff.
expect 0 "s.html" "$cli" view "$dir/s.json" -o "$dir/s.html"
expect 0 "" grep -q 'id="model"' "$dir/s.html"
expect 0 "" "$cli" view "$dir/s.pickle" -o "$dir/p.html"
expect 0 "back.html" "$cli" view "$dir/back.json.gz"
expect 0 "reserved_bytes.*->" "$cli" diff "$dir/s.json" "$dir/s.pickle"
expect 0 '"devices"' "$cli" diff --json "$dir/s.json" "$dir/back.json.gz"
# Plain segments place blocks elsewhere (replayed addresses are deterministic).
"$cli" replay --conf trace:1000,vmm:0 --snapshot "$dir/small.json" --policy cudalloc "$trace" >/dev/null
expect 0 "blocks (allocated|freed): [1-9]" "$cli" diff "$dir/small.json" "$dir/s.json"

# --help on every subcommand: the usage on stdout, exit 0; `cudalloc --help` lists them all.
for command in options replay inspect convert view diff; do
  expect 0 "usage: cudalloc $command" "$cli" "$command" --help
done
expect 0 "view .*diff|diff .*view" bash -c "'$cli' --help | tr '\n' ' '"
expect 0 "exit codes: 0 success, 1 .*2 bad usage" bash -c "'$cli' --help | tr '\n' ' '"

# --progress goes to stderr only: --json stdout stays one parseable object per trace.
expect 0 "" bash -c "'$cli' replay --progress --json --policy cudalloc '$trace' 2>/dev/null |
                     python3 -c 'import json, sys; json.load(sys.stdin)'"
expect 0 "cudalloc replay: \[ *[0-9.]+ s\] parsing" "$cli" replay --progress --policy cudalloc "$trace"

# Bad input: clear messages, exit 2, never a crash.
gzip -dc "$trace" | head -c 5000 > "$dir/truncated.json"
expect 2 "malformed JSON at byte" "$cli" replay "$dir/truncated.json"
head -c 3000 "$trace" > "$dir/truncated.json.gz"
expect 2 "truncated|corrupt|malformed" "$cli" replay "$dir/truncated.json.gz"
printf '{"device_traces": [[{"action": "alloc", "addr": 1, "size": 8}, {"action": "free_completed", "addr": 2, "size": 8}]]}' > "$dir/inconsistent.json"
expect 2 "event 1 .*not live" "$cli" replay "$dir/inconsistent.json"
expect 0 "peak live" "$cli" replay --skip-inconsistent "$dir/inconsistent.json"
printf '{"device_traces": [[{"action": "alloc", "addr": 1, "size": 8}, {"action": "alloc", "addr": 1, "size": 8}]]}' > "$dir/double.json"
expect 2 "still live since event 0" "$cli" replay "$dir/double.json"
printf 'not a trace' > "$dir/garbage"
expect 2 "not a JSON snapshot" "$cli" replay "$dir/garbage"
expect 2 "cannot open" "$cli" replay "$dir/missing.json"
expect 2 "usage" "$cli" replay
expect 2 "usage" "$cli" replay --capacity lots "$trace"
expect 2 "no segments|neither JSON" "$cli" inspect "$dir/garbage"
expect 2 "usage" "$cli" convert "$dir/s.json" -o "$dir/out.txt"
expect 2 "malformed JSON at byte" "$cli" view "$dir/truncated.json"
expect 2 "truncated|corrupt|malformed" "$cli" view "$dir/truncated.json.gz"
expect 2 "neither JSON nor a pickle" "$cli" view "$dir/garbage"
expect 2 "cannot open" "$cli" view "$dir/missing.json"
printf '{"segments": 5}' > "$dir/segments_not_list.json"
expect 2 "segments.* is not a list" "$cli" view "$dir/segments_not_list.json"
printf '{"segments": [{"device": "zero"}]}' > "$dir/bad_type.json"
expect 2 "segments\[0\]: 'device' must be an integer" "$cli" view "$dir/bad_type.json"
expect 2 "segments\[0\]: 'device' must be an integer" "$cli" diff "$dir/bad_type.json" "$dir/s.json"
printf '{"segments": [{"blocks": [{"state": 5}]}]}' > "$dir/bad_state.json"
expect 2 "malformed snapshot" "$cli" view "$dir/bad_state.json"
expect 2 "malformed snapshot" "$cli" diff "$dir/bad_state.json" "$dir/s.json"
expect 1 "cannot write" "$cli" view "$dir/s.json" -o "$dir/no/such/dir/x.html"
expect 2 "usage" "$cli" view
expect 2 "usage" "$cli" view "$dir/s.json" --frobnicate
expect 2 "usage" "$cli" diff "$dir/s.json"
expect 2 "cannot open" "$cli" diff "$dir/s.json" "$dir/missing.json"
expect 2 "malformed JSON at byte" "$cli" diff "$dir/truncated.json" "$dir/s.json"
expect 2 "unknown command" "$cli" frobnicate
expect 2 "bad value" "$cli" options --conf "limit:lots"

echo "$failures failure(s)"
[ "$failures" -eq 0 ]
