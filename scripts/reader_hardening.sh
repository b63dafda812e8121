#!/usr/bin/env bash
# Hostile input against every reader of the cudalloc CLI (replay, inspect, convert, view, diff):
# nesting, inflation, FIFOs, directories, devices, byte-order marks, CRLF line ends, negative,
# huge and non-numeric sizes, device numbers, input that is no snapshot at all. Each case says
# the exit status it must give and a pattern its message must match.
#
#   bash scripts/reader_hardening.sh CLI           Markdown rows (case | command | exit | first
#                                                  line of the output): the reader hardening
#                                                  table of docs/reliability.md
#   bash scripts/reader_hardening.sh CLI --check   asserts every case (ctest cli.reader_hardening)
#
# Every command runs under `timeout 20`: a reader that blocks (a FIFO) or runs away fails.
set -u
cli=$(readlink -f "${1:?usage: reader_hardening.sh CUDALLOC_CLI [--check]}")
mode=${2:-table}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir" || exit 1
failures=0

# ---- Inputs ------------------------------------------------------------------------------
python3 - <<'EOF'
import gzip, pickle
def write(name, text): open(name, 'wb').write(text.encode() if isinstance(text, str) else text)
def trace(size): return '{"segments": [], "device_traces": [[{"action": "alloc", "addr": 4096, "size": %s, "stream": 0}]]}' % size
good = trace(512)
write('good.json', good)
write('deep.json', '[' * 1000000 + ']' * 1000000)                       # 2 MB of nested lists
write('deep_meta.json', '{"meta": ' + '[' * 1000000 + ']' * 1000000 + ', "device_traces": []}')
write('deep_objects.json', '{"a": ' * 300000 + '1' + '}' * 300000)
write('depth_200.json', '{"meta": ' + '[' * 199 + ']' * 199 + ', "segments": [], "device_traces": []}')
write('depth_201.json', '{"meta": ' + '[' * 200 + ']' * 200 + ', "segments": [], "device_traces": []}')
with gzip.open('bomb.json.gz', 'wb', compresslevel=9) as f:               # 64 MiB in 65 KB
    f.write(b'{"meta": "')
    for _ in range(64): f.write(b'A' * (1 << 20))
    f.write(b'", "segments": [], "device_traces": []}')
write('bom.json', b'\xef\xbb\xbf' + good.encode())
write('bom.csv', b'\xef\xbb\xbfThread,Time,Action,Pointer,Size,Stream\n1,0,allocate,0x10,8,0\n')
csv = 'Thread,Time,Action,Pointer,Size,Stream\n1,0,allocate,0x10,%s,0\n1,0,free,0x10,%s,0\n'
write('crlf.csv', (csv % (8, 8)).replace('\n', '\r\n'))
for name, size in [('negative', '-5'), ('huge', '18446744073709551615'), ('past_2_50', str((1 << 50) + 1)),
                   ('past_64_bits', '99999999999999999999'), ('not_a_number', 'abc')]:
    write(name + '.csv', csv % (size, size))
write('negative.json', trace(-5))
write('huge.json', trace(18446744073709551615))
write('past_2_50.json', trace((1 << 50) + 1))
write('string_size.json', trace('"512"'))
write('float_size.json', trace('1e30'))
def event(size): return {'segments': [], 'device_traces': [[{'action': 'alloc', 'addr': 4096, 'size': size, 'stream': 0}]]}
write('negative.pickle', pickle.dumps(event(-5), protocol=2))
write('huge.pickle', pickle.dumps(event(1 << 62), protocol=2))
seg = '{"segments": [{"device": %s, "address": 4096, "total_size": %s, "stream": 0, "blocks": [{"address": 4096, "size": %s, "state": "active_allocated"}]}]}'
write('segment_negative.json', seg % (0, -5, 512))
write('block_huge.json', seg % (0, 2097152, 18446744073709551615))
write('device_2_32.json', seg % (4294967296, 2097152, 512))
write('device_negative.json', seg % (-1, 2097152, 512))
write('cudalloc_device_2_31.json', '{"segments": [], "cudalloc": {"devices": [{"device": 2147483648}]}}')
write('cudalloc_slab_negative.json', '{"segments": [], "cudalloc": {"devices": [{"device": 0, "slabs": [{"address": 4096, "bytes": -1}]}]}}')
write('garbage.txt', 'not a trace')
write('number.json', '5')
write('foo.json', '{"foo": 1}')
write('profiler.json', '{"traceEvents": [{"ph": "X", "name": "kernel", "ts": 0, "dur": 5}]}')
write('foo.pickle', pickle.dumps({'foo': [1, 2]}, protocol=2))
write('empty', '')
import random; random.seed(7); write('random.bin', bytes(random.randrange(256) for _ in range(4096)))
EOF
mkfifo fifo
mkdir directory

# ---- Cases -------------------------------------------------------------------------------
# case NAME WANT_EXIT PATTERN COMMAND ARGS...: COMMAND is a cudalloc subcommand.
case_() {
  local name=$1 want=$2 pattern=$3
  shift 3
  local out rc
  out=$(timeout 20 "$cli" "$@" 2>&1 </dev/null)
  rc=$?
  out=${out//$dir\//}
  if [ "$mode" = --check ]; then
    if [ "$rc" -ne "$want" ] || ! grep -qE -- "$pattern" <<<"$out"; then
      echo "FAIL: $name: cudalloc $* -> exit $rc (want $want, /$pattern/):"
      head -3 <<<"$out"
      failures=$((failures + 1))
    else
      echo "ok: $name: cudalloc $* -> $rc"
    fi
    return
  fi
  local result="exit $rc"
  [ "$rc" -eq 124 ] && result="**hang** (killed after 20 s)"
  [ "$rc" -gt 128 ] && result="**signal $((rc - 128))**"
  local first
  first=$(head -1 <<<"$out" | tr '|' '/' | cut -c1-150)
  printf '| %s | `cudalloc %s` | %s | %s |\n' "$name" "$*" "$result" "$first"
}

# Every reading command with its arguments for one input file X: cmd_for COMMAND X
readers=(replay inspect convert view diff)
args_for() {
  case $1 in
    convert) echo "convert $2 -o out.pickle" ;;
    view) echo "view $2 -o out.html" ;;
    diff) echo "diff good.json $2" ;;
    *) echo "$1 $2" ;;
  esac
}
# each NAME WANT PATTERN FILE [COMMANDS...]: the case for each command (default: every reader)
each() {
  local name=$1 want=$2 pattern=$3 file=$4
  shift 4
  local commands=("$@")
  [ ${#commands[@]} -eq 0 ] && commands=("${readers[@]}")
  for c in "${commands[@]}"; do
    # shellcheck disable=SC2046
    case_ "$name" "$want" "$pattern" $(args_for "$c" "$file")
  done
}

[ "$mode" = --check ] || { echo "| case | command | exit | message |"; echo "|---|---|---|---|"; }
nested="nested deeper than 200 levels"
# replay reads a trace, always an object: it refuses a list before parsing it.
each "depth: 10^6 nested lists (2 MB)" 2 "$nested|not a JSON snapshot, a pickle" deep.json
each "depth: 10^6 nested lists under \"meta\"" 2 "$nested" deep_meta.json replay view
each "depth: 3×10^5 nested objects" 2 "$nested" deep_objects.json replay inspect view
each "depth: 200 levels (the bound)" 0 "" depth_200.json replay view
each "depth: 201 levels" 2 "$nested" depth_201.json replay inspect view
export CUDALLOC_MAX_INPUT=16M
each "inflation: 65 KB gzip of 64 MiB, CUDALLOC_MAX_INPUT=16M" 2 "larger than 16.00 MiB once decompressed.*--max-input" bomb.json.gz
case_ "inflation: the same with --max-input 128M" 0 "peak live" replay bomb.json.gz --max-input 128M
unset CUDALLOC_MAX_INPUT
case_ "inflation: bad --max-input" 2 "--max-input needs a size" replay good.json --max-input lots
each "FIFO without a writer" 2 "is a FIFO \(named pipe\), not a trace or snapshot file" fifo
each "directory" 2 "is a directory, not a trace or snapshot file" directory
each "character device" 2 "is a character device" /dev/zero replay inspect
each "missing file" 2 "cannot open: No such file" missing.json replay view
each "UTF-8 byte-order mark" 0 "" bom.json
case_ "UTF-8 byte-order mark, RMM CSV" 0 "peak live" replay bom.csv
case_ "CRLF line ends, RMM CSV" 0 "peak live" replay crlf.csv
size="'Size' must be an integer from 0 to 1125899906842624 \(2\^50 bytes"
jsize="'size' must be an integer from 0 to 1125899906842624 \(2\^50 bytes"
case_ "negative size, RMM CSV (-5)" 2 "$size.*not -5 on RMM log line 2" replay negative.csv
case_ "huge size, RMM CSV (2^64 - 1)" 2 "$size.*not 18446744073709551615" replay huge.csv
case_ "size past 2^50, RMM CSV" 2 "$size" replay past_2_50.csv
case_ "size past 64 bits, RMM CSV" 2 "$size.*not \"99999999999999999999\"" replay past_64_bits.csv
case_ "non-numeric size, RMM CSV" 2 "$size.*not \"abc\"" replay not_a_number.csv
each "negative size, JSON trace event (-5)" 2 "$jsize.*not -5 \(device 0, event 0\)" negative.json
each "huge size, JSON trace event (2^64 - 1)" 2 "$jsize.*not 18446744073709551615" huge.json
case_ "huge size, PyTorch rules only" 2 "$jsize" replay --policy pytorch huge.json
each "size past 2^50, JSON trace event" 2 "$jsize" past_2_50.json replay view
each "string size, JSON trace event" 2 "$jsize.*not \"512\"" string_size.json replay view
each "float size, JSON trace event (1e30)" 2 "$jsize.*not 1e\+30" float_size.json replay view
each "negative size, pickle (-5)" 2 "$jsize.*not -5" negative.pickle
each "huge size, pickle (2^62)" 2 "$jsize.*not 4611686018427387904" huge.pickle replay view
each "negative segment total_size" 2 "segments\[0\]: 'total_size' must be an integer from 0" segment_negative.json inspect convert view diff
each "huge block size" 2 "segments\[0\].blocks\[0\]: $jsize" block_huge.json inspect view diff
each "segment device 2^32" 2 "segments\[0\]: 'device' must be an integer from 0 to 2147483647, not 4294967296" device_2_32.json inspect view diff
each "segment device -1" 2 "'device' must be an integer from 0 to 2147483647, not -1" device_negative.json inspect view
each "cudalloc device 2^31" 2 "cudalloc.devices\[0\]: 'device' must be an integer from 0 to 2147483647" cudalloc_device_2_31.json inspect view
each "cudalloc slab of -1 bytes" 2 "cudalloc.devices\[0\].slabs\[0\]: 'bytes' must be an integer from 0" cudalloc_slab_negative.json inspect view
each "non-snapshot: text" 2 "not a JSON snapshot|malformed JSON at byte" garbage.txt
each "non-snapshot: random bytes" 2 "not a JSON snapshot|malformed JSON|pickle:" random.bin
each "non-snapshot: a JSON number" 2 "not a JSON snapshot|no segments list|not a snapshot" number.json replay inspect view
each "non-snapshot: empty file" 2 "not a JSON snapshot|malformed JSON|is empty" empty
each "non-snapshot: {\"foo\": 1}" 2 "is not a memory snapshot: a JSON object without \"segments\" or \"device_traces\" \(its keys: \"foo\"\)" foo.json
each "non-snapshot: a profiler trace" 2 "is a profiler trace \(Chrome trace format, traceEvents\), not a memory snapshot" profiler.json
each "non-snapshot: a pickle of something else" 2 "is not a memory snapshot|has no device_traces" foo.pickle

if [ "$mode" = --check ]; then
  echo "$failures failure(s)"
  [ "$failures" -eq 0 ]
fi
