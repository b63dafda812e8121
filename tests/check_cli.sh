#!/usr/bin/env bash
# The cudalloc CLI on good and bad input: exit codes (0 ok, 2 bad input) and messages that say
# what is wrong and where. Usage: check_cli.sh CUDALLOC_CLI TRACE [TEST_DATA_DIR]
set -u
cli=${1:?usage: check_cli.sh CUDALLOC_CLI TRACE [TEST_DATA_DIR]}
trace=${2:?}
data=${3:-$(dirname "$0")/data}
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
# --policy: all (the default) is cudalloc and both PyTorch models, both is cudalloc and native.
expect 0 "^  expandable +peak reserved" "$cli" replay "$trace"
expect 0 '"policies":\{"cudalloc".*"expandable".*"pytorch"' "$cli" replay --json --policy all "$trace"
expect 0 '^\{' bash -c "'$cli' replay --json --policy both '$trace' | grep -v '\"expandable\":'"
expect 0 '"policies":\{"expandable":\{[^}]*"page_maps"' "$cli" replay --json --policy expandable "$trace"
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

# One peak reserved everywhere: replay's, inspect's, the page's panel and its timeline (on a
# trace that holds every event) are the stats' reserved_bytes peak. The mappings' sum is more:
# paged segments map a physical page at more than one address.
"$cli" replay --policy cudalloc --json --conf trace:1000000 --snapshot "$dir/whole.json" "$trace" \
  >"$dir/whole.replay" 2>/dev/null
"$cli" inspect --json "$dir/whole.json" >"$dir/whole.inspect"
"$cli" view "$dir/whole.json" -o "$dir/whole.html" >/dev/null
expect 0 "peak reserved agrees: [0-9]+ < mapped [0-9]+" python3 - "$dir" <<'PY'
import json, re, sys
d = sys.argv[1]
replay = json.load(open(d + "/whole.replay"))["peak_reserved_bytes"]
inspect = json.load(open(d + "/whole.inspect"))[0]["peak_reserved_bytes"]
page = open(d + "/whole.html").read()
model = json.loads(re.search(r'id="model">(.*?)</script>', page, re.S).group(1))["devices"][0]
panel, timeline = model["fragmentation"]["peak_reserved"], model["timeline"]["peak_reserved"]["bytes"]
mapped = peak = 0
for e in json.load(open(d + "/whole.json"))["device_traces"][0]:
    mapped += {"segment_map": e["size"], "segment_alloc": e["size"],
               "segment_unmap": -e["size"], "segment_free": -e["size"]}.get(e["action"], 0)
    peak = max(peak, mapped)
print(replay, inspect, panel, timeline, peak)
if len({replay, inspect, panel, timeline}) == 1 and peak > replay:
    print("peak reserved agrees: %d < mapped %d" % (replay, peak))
PY
expect 0 "peak reserved [0-9.]+ GiB, peak live .*cudalloc stats" "$cli" inspect "$dir/whole.json"

# Incomplete traces: cudalloc's ring buffer counts what it dropped; PyTorch's says nothing,
# and its cut shows as frees of blocks never allocated in the trace.
"$cli" replay --policy cudalloc --conf trace:1000 --snapshot "$dir/ring.json" "$trace" >/dev/null 2>&1
expect 0 "Incomplete trace: the ring buffer \(trace:1000\) kept the last 1,000 events and dropped [1-9][0-9,]+ older" \
  "$cli" inspect "$dir/ring.json"
expect 0 "dropped [0-9]+ of [0-9]+" python3 -c "
import json, subprocess, sys
ring = json.loads(subprocess.run(['$cli', 'inspect', '--json', '$dir/ring.json'], capture_output=True).stdout)[0]
whole = json.load(open('$dir/whole.inspect'))[0]
print('dropped', ring['trace']['dropped'], 'of', whole['trace']['kept'])
sys.exit(ring['trace']['dropped'] + 1000 != whole['trace']['kept'])"
expect 0 "Incomplete trace: it starts mid-run, with 1 free of a block .*max_entries" \
  "$cli" inspect "$data/viewer_cut_trace.json"
expect 0 "trace: [0-9]+ events$" "$cli" inspect "$dir/whole.json"

# Out of memory: every oom event with its request and the state then.
"$cli" replay --policy cudalloc --capacity 12G --conf trace:1000000 --snapshot "$dir/oom.json" \
  "$trace" >/dev/null 2>&1
expect 0 "out of memory: 5 events" "$cli" inspect "$dir/oom.json"
expect 0 "event [0-9]+: request 1.53 GiB failed, device free 0 B, live 11.13 GiB, reserved 12.00 GiB" \
  "$cli" inspect "$dir/oom.json"
expect 0 "event 3: request 2.00 GiB failed, device free 300.00 MiB" "$cli" inspect "$data/viewer_cut_trace.json"
expect 0 "device 0: 1 segment$" "$cli" inspect "$data/viewer_cut_trace.json"
expect 0 "out of memory: 1 event$" "$cli" inspect "$data/viewer_cut_trace.json"
expect 0 '"ooms": \[\]' "$cli" inspect --json "$dir/whole.json"

# Replay out of memory: per policy one line that counts the failed allocations, no warning per
# allocation, and fragmentation against what was live in that replay (never below 1).
"$cli" replay --capacity 12G "$trace" >"$dir/oom.txt" 2>"$dir/oom.err"
expect 0 "^3$" grep -cE "^  (cudalloc|pytorch|expandable): 5 allocations failed for lack of memory \(first: 1.53 GiB at event [0-9]+\); their frees were skipped; at most [0-9.]+ GiB live" "$dir/oom.txt"
expect 0 "^0$" bash -c "wc -l <'$dir/oom.err'"
expect 0 "^ok$" python3 -c "
import re, sys
frag = [float(f) for f in re.findall(r'fragmentation ([0-9.]+)', open('$dir/oom.txt').read())]
print('ok' if len(frag) >= 3 and min(frag) >= 1 else frag)"
expect 0 "^ok$" bash -c "'$cli' replay --json --capacity 12G '$trace' | python3 -c \"
import json, sys
r = json.load(sys.stdin)
p = r['policies']
ok = all(q['fragmentation'] >= 1 and q['oom_events'] == 5 and q['first_failed']['size'] > 0
         and q['served_peak_live_bytes'] < r['peak_live_bytes'] for q in p.values())
print('ok' if ok and len(p) == 3 else p)\""
printf '{"device_traces": [[{"action": "alloc", "addr": 1, "size": 3221225472}, {"action": "free_completed", "addr": 1, "size": 3221225472}, {"action": "alloc", "addr": 2, "size": 512}]]}' > "$dir/one_oom.json"
expect 0 "^  pytorch: 1 allocation failed for lack of memory \(first: 3.00 GiB at event 0\); its free was skipped; at most 512 B live" \
  "$cli" replay --capacity 2G "$dir/one_oom.json"
expect 0 "device allocs 1 segment " "$cli" replay --capacity 2G --policy pytorch "$dir/one_oom.json"
printf '{"device_traces": [[{"action": "alloc", "addr": 1, "size": 512}], [{"action": "alloc", "addr": 2, "size": 512}, {"action": "alloc", "addr": 1, "size": 3221225472}]]}' > "$dir/two_oom.json"
expect 0 "^  expandable: 1 allocation failed .*at event 1 of device 1\)" \
  "$cli" replay --capacity 2G --policy expandable "$dir/two_oom.json"

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
# Percent read, from the one read path of every command: asked for, it rises to 100% on
# stderr; not asked for and not on a terminal, nothing.
"$cli" view --progress "$dir/whole.json" -o "$dir/p.html" 2>"$dir/progress.txt" >/dev/null
expect 0 "read to 100%" python3 - "$dir/progress.txt" <<'PY'
import re, sys
lines = [l for l in open(sys.argv[1]).read().splitlines() if re.search(r"reading .*%", l)]
seen = [int(re.search(r"(\d+)%", l).group(1)) for l in lines]
ok = seen and seen == sorted(seen) and seen[-1] == 100 and all("whole.json" in l for l in lines)
print("read to 100%" if ok else lines)
PY
expect 0 "reading .*gz: +100%" "$cli" replay --progress --policy cudalloc "$trace"
# inspect, convert and diff take --progress too (main() reports the read for them), and their
# stdout stays what it was.
expect 0 "reading .*whole.json: +100%" "$cli" inspect --progress "$dir/whole.json"
expect 0 "" bash -c "'$cli' inspect --progress --json '$dir/whole.json' 2>/dev/null |
                     python3 -c 'import json, sys; json.load(sys.stdin)'"
expect 0 "reading .*whole.json: +100%" "$cli" convert --progress "$dir/whole.json" -o "$dir/pr.json"
expect 0 "reading .*s.json: +100%" "$cli" diff "$dir/whole.json" "$dir/s.json" --progress
# The same file twice, read at once on two threads: each read reaches 100% on its own.
"$cli" diff "$dir/whole.json" "$dir/whole.json" --progress 2>"$dir/twice.txt" >/dev/null
expect 0 "two reads to 100%" python3 - "$dir/twice.txt" <<'PY'
import re, sys
done = [l for l in open(sys.argv[1]).read().splitlines() if re.search(r"reading .*whole.json: +100%", l)]
print("two reads to 100%" if len(done) == 2 else done)
PY
expect 1 "" bash -c "'$cli' view '$dir/whole.json' -o '$dir/q.html' 2>&1 | grep -q reading"

# view replays the trace under PyTorch's rules, expandable segments and cudalloc, unless told not to.
replays() {  # replays PAGE: the replayed policies of device 0's timeline, comma-separated
  python3 - "$1" <<'PY'
import json, re, sys
page = open(sys.argv[1]).read()
model = json.loads(re.search(r'<script type="application/json" id="model">(.*?)</script>', page, re.S).group(1))
print("policies:" + ",".join(c["policy"] for c in model["devices"][0]["timeline"].get("replay", [])))
PY
}
"$cli" view "$data/viewer_frames.json" -o "$dir/replayed.html" >/dev/null
expect 0 "^policies:cudalloc,pytorch,expandable$" replays "$dir/replayed.html"
"$cli" view --no-replay "$data/viewer_frames.json" -o "$dir/unreplayed.html" >/dev/null
expect 0 "^policies:$" replays "$dir/unreplayed.html"

# inspect names who held memory at the peak and at the out-of-memory, with allocation sites.
frames="$data/viewer_frames.json"
expect 0 "largest live at peak live \(event 53\):" "$cli" inspect "$frames"
expect 0 "largest live at out of memory \(event 54\):" "$cli" inspect "$frames"
expect 0 "0x7f0000000000 +64.00 MiB  linear_init \(/home/user/project/model.py:41\)" "$cli" inspect "$frames"
expect 0 "free: 752.00 MiB in 1 block," "$cli" inspect "$frames"
# A snapshot written by snapshot_on_oom names the failed request (cudalloc.oom): inspect says so.
python3 - "$frames" "$dir/written_at_oom.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
doc["cudalloc"] = {"oom": {"device": 0, "size": 512 << 20, "stream": 7, "sequence": 2,
                           "device_free": 100 << 20, "message": "out of memory: 512 MiB"}}
json.dump(doc, open(sys.argv[2], "w"))
PY
expect 0 "written at out-of-memory error 2 of the process: 512.00 MiB on device 0, stream 0x7, failed, device free 100.00 MiB: out of memory: 512 MiB" \
  "$cli" inspect "$dir/written_at_oom.json"
expect 0 '"written_at_oom"' "$cli" inspect --json "$dir/written_at_oom.json"
expect 0 "" bash -c "'$cli' inspect --json '$frames' | python3 -c '
import json, sys
m = json.load(sys.stdin)[0][\"moments\"]
assert [x[\"label\"] for x in m] == [\"peak live\", \"out of memory\"], m
assert m[1][\"request\"] == 512 << 20 and m[1][\"top\"][0][\"size\"] == 64 << 20, m'"

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
expect 2 "replay: --capacity 'lots': expected a size" "$cli" replay --capacity lots "$trace"
expect 2 "replay: --policy 'pytroch': expected cudalloc, pytorch, expandable, both or all" \
  "$cli" replay --policy pytroch "$trace"
expect 2 "replay: --snapshot with 2 traces: expected one trace" "$cli" replay --snapshot "$dir/two.json" "$trace" "$trace"
expect 2 "inspect: --top 'x': expected a whole number" "$cli" inspect "$dir/s.json" --top x
expect 2 "inspect: --top '-3': expected a whole number" "$cli" inspect "$dir/s.json" --top -3
expect 2 "inspect: --width '0': expected a whole number from 8 to 400" "$cli" inspect "$dir/s.json" --width 0
expect 0 "device 0" "$cli" inspect "$dir/s.json" --top 0 --width 8
expect 2 "diff: --top '3x': expected a whole number" "$cli" diff "$dir/s.json" "$dir/s.json" --top 3x
expect 2 "no segments|neither JSON" "$cli" inspect "$dir/garbage"
expect 2 "convert: -o '.*out.txt': expected a name ending in .pickle" "$cli" convert "$dir/s.json" -o "$dir/out.txt"
expect 2 "usage" "$cli" convert "$dir/s.json"
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
