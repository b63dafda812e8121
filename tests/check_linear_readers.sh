#!/usr/bin/env bash
# Every reader of snapshots (inspect, convert, diff, view; JSON, and PyTorch's pickle for
# inspect, convert and view) does work linear in the trace's length. Counted in instructions (valgrind's callgrind, deterministic), never in wall time: a
# snapshot of N events and one of 4N must cost at most MAX_RATIO (5.5) times as many
# instructions. Linear work gives a ratio just under 4; a reader that rescans the event list
# after each event, as nlohmann-json 3.11.2's callback parser did, gives about 16.
# Usage: check_linear_readers.sh CUDALLOC_CLI [EVENTS]   (exit 77 without valgrind)
set -u
cli=${1:?usage: check_linear_readers.sh CUDALLOC_CLI [EVENTS]}
events=${2:-10000}
max_ratio=${MAX_RATIO:-5.5}
if ! command -v valgrind >/dev/null; then
  echo "SKIP: no valgrind (scripts/install_deps.sh installs it)"
  exit 77
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failures=0
declare -A count

# A snapshot of N trace events in PyTorch's schema that exercises every per-event model: about
# 2,000 allocations live at once (so moments and bands have work), frames on a third of the
# allocs (50 distinct stacks), an out-of-memory event every 1,000 events.
generate() {
  python3 - "$1" "$2" <<'PY'
import json, sys
n, out = int(sys.argv[1]), sys.argv[2]
base, live, events = 0x7f0000000000, 2000, []
stacks = [[{"filename": "/src/m%d.py" % k, "line": 10 + d, "name": "f%d_%d" % (k, d)}
           for d in range(4)] for k in range(50)]
i = 0
while len(events) < n:
    e = {"action": "alloc", "addr": base + (i % (2 * live)) * 4096, "size": 4096, "stream": 0,
         "time_us": len(events)}
    if i % 3 == 0:
        e["frames"] = stacks[i % 50]
    events.append(e)
    if i >= live:
        events.append({"action": "free_completed", "addr": base + ((i - live) % (2 * live)) * 4096,
                       "size": 4096, "stream": 0, "time_us": len(events)})
    if len(events) % 1000 < 2:
        events.append({"action": "oom", "size": 1 << 30, "device_free": 0, "time_us": len(events)})
    i += 1
seg = {"device": 0, "address": base, "total_size": 64 << 20, "allocated_size": 0,
       "active_size": 0, "requested_size": 0, "stream": 0, "segment_type": "large",
       "blocks": [{"address": base, "size": 64 << 20, "requested_size": 0, "state": "inactive"}]}
json.dump({"segments": [seg], "device_traces": [events[:n]]}, open(out, "w"))
PY
}

# Instructions the command executed (callgrind's total).
instructions() {
  valgrind --tool=callgrind --callgrind-out-file="$dir/cg.out" "$@" >/dev/null 2>"$dir/vg.txt" ||
    { echo "FAIL: $* under valgrind: $(tail -n 3 "$dir/vg.txt")" >&2; echo 0; return; }
  sed -n 's/^==[0-9]*== Collected : \([0-9]*\)$/\1/p' "$dir/vg.txt"
}

generate "$events" "$dir/small.json"
generate $((4 * events)) "$dir/large.json"
for size in small large; do  # PyTorch's pickles take the other read path
  "$cli" convert "$dir/$size.json" -o "$dir/$size.pickle" >/dev/null || failures=$((failures + 1))
done
for command in inspect inspect-pickle convert convert-pickle diff view view-pickle; do
  for size in small large; do
    case $command in
      inspect) args=(inspect "$dir/$size.json") ;;
      inspect-pickle) args=(inspect "$dir/$size.pickle") ;;
      convert) args=(convert "$dir/$size.json" -o "$dir/$size.out.json") ;;
      convert-pickle) args=(convert "$dir/$size.pickle" -o "$dir/$size.out.json") ;;
      diff) args=(diff "$dir/$size.json" "$dir/$size.json") ;;
      view) args=(view "$dir/$size.json" -o "$dir/$size.html") ;;
      view-pickle) args=(view "$dir/$size.pickle" -o "$dir/$size.html") ;;
    esac
    count[$size]=$(instructions "$cli" "${args[@]}")
  done
  verdict=$(python3 -c "
s, l, m = ${count[small]:-0}, ${count[large]:-0}, $max_ratio
print('ok' if s > 0 and l / s <= m else 'FAIL', '%.2f' % (l / s if s else 0))")
  echo "${verdict%% *}: $command: $events events ${count[small]} instructions, $((4 * events)) events ${count[large]} (ratio ${verdict##* }, at most $max_ratio)"
  [ "${verdict%% *}" = ok ] || failures=$((failures + 1))
done
echo "$failures failure(s)"
[ "$failures" -eq 0 ]
