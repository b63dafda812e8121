#!/usr/bin/env bash
# `cudalloc view` in a real browser: headless Chromium loads the generated pages from disk,
# and the test reads the DOM after the scripts ran. A page passes when it set
# body[data-rendered="ok"] (every plot drawn on a non-empty canvas) and recorded no script
# error in #errors. Pages and a screenshot stay in OUT_DIR as test artifacts.
# Interaction: tests/viewer_interaction.js, appended to a copy of a page, drives the timeline's
# brush and clicks, the event slider, address search and the stream filter, and writes what it
# found drawn and written into the DOM; each of its "FAIL" lines fails the test. The
# screenshots of the driven pages show the page after the interaction (docs/viewer.md).
# Usage: check_viewer.sh CUDALLOC_CLI TRACE FIXTURE CUT_TRACE_FIXTURE OUT_DIR
# Exit 77 (skipped) only when no Chromium is installed (scripts/install_deps.sh installs it).
set -u
cli=${1:?usage: check_viewer.sh CUDALLOC_CLI TRACE FIXTURE CUT_TRACE_FIXTURE OUT_DIR}
trace=${2:?}
fixture=${3:?}
cut_fixture=${4:?}
out=${5:?}
frames_fixture="$(dirname "$0")/data/viewer_frames.json"
driver="$(dirname "$0")/viewer_interaction.js"

browser=""
for name in chromium chromium-browser google-chrome; do
  if command -v "$name" >/dev/null; then browser=$name; break; fi
done
if [ -z "$browser" ]; then
  echo "SKIP: no chromium found (scripts/install_deps.sh installs the chromium package)"
  exit 77
fi

mkdir -p "$out"
: >"$out/chromium.log"
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# Runs the browser on a page (a path, or a file:// URL); extra arguments choose what it
# produces (--dump-dom, --screenshot).
browse() {
  local page=$1 url
  shift
  case $page in file://*) url=$page ;; *) url="file://$(realpath "$page")" ;; esac
  timeout 120 "$browser" --headless --no-sandbox --disable-gpu --disable-extensions \
    --disable-dev-shm-usage \
    --no-first-run --hide-scrollbars --user-data-dir="$profile" --window-size=1280,1600 \
    --virtual-time-budget=10000 "$@" "$url" 2>>"$out/chromium.log"
}

check_page() {  # check_page PAGE PNG: rendered, no script error, no network reference
  local page=$1 png=$2 dom
  if grep -qE '(src|href)="?(https?:)?//' "$page"; then fail "$page refers to the network"; fi
  dom=$(browse "$page" --dump-dom --screenshot="$png")
  if ! grep -q 'data-rendered="ok"' <<<"$dom"; then
    fail "$page: not rendered ($(grep -o 'data-rendered="[a-z]*"' <<<"$dom" || echo no flag))"
  fi
  if grep -q '<pre id="errors" hidden="">' <<<"$dom"; then
    echo "ok: $page rendered without script errors"
  else
    fail "$page: script errors: $(sed -n 's/.*<pre id="errors"[^>]*>\([^<]*\)<.*/\1/p' <<<"$dom")"
  fi
  [ -s "$png" ] && echo "ok: screenshot $png" || fail "no screenshot of $page"
}

# A replayed trace: cudalloc's snapshot with segments, slabs and a trace.
"$cli" replay --policy cudalloc --conf trace:100000 --snapshot "$out/replayed.json" "$trace" >/dev/null ||
  fail "replay"
"$cli" view "$out/replayed.json" -o "$out/replayed.html" >/dev/null || fail "view replayed.json"
check_page "$out/replayed.html" "$out/replayed.png"

# Optional fields: an expandable segment with pages, a host-tier segment, a second device
# without a trace, segment_map/unmap events, and settings text that looks like markup.
"$cli" view "$fixture" -o "$out/optional_fields.html" >/dev/null || fail "view $fixture"
check_page "$out/optional_fields.html" "$out/optional_fields.png"

# interact PAGE CHECKS PNG: drives a copy of PAGE with viewer_interaction.js, running the
# comma-separated CHECKS; prints each check's lines and counts its failures.
interact() {
  local page=$1 checks=$2 png=$3 driven lines
  driven="${page%.html}.driven.html"
  python3 - "$page" "$driver" "$driven" <<'PY' || { fail "cannot drive $page"; return; }
import sys
page, driver, out = sys.argv[1:]
text = open(page).read()
at = text.rindex("</body>")
open(out, "w").write(text[:at] + "<script>\n" + open(driver).read() + "\n</script>\n" + text[at:])
PY
  lines=$(browse "file://$(realpath "$driven")#$checks" --dump-dom --screenshot="$png" | python3 -c '
import html, sys
dom = sys.stdin.read()
tag = "<pre id=\"test-results\">"
done = tag in dom and "data-tested=\"done\"" in dom
print(html.unescape(dom.rsplit(tag, 1)[1].split("</pre>")[0]) if done else "FAIL: the checks did not run")
if "<pre id=\"errors\" hidden=\"\">" not in dom: print("FAIL: script errors on the page")
')
  echo "$lines" | sed "s|^|  ${driven##*/}: |"
  local n
  n=$(grep -c '^FAIL' <<<"$lines")
  failures=$((failures + n))
  [ -s "$png" ] || fail "no screenshot of $driven"
}

# The whole replayed trace: the panel's peak reserved is the timeline's; the brush, a click,
# the slider and address search. The screenshot shows the map at an earlier event.
"$cli" replay --policy cudalloc --conf trace:1000000 --snapshot "$out/whole.json" "$trace" >/dev/null ||
  fail "replay whole"
"$cli" view "$out/whole.json" -o "$out/whole.html" >/dev/null || fail "view whole.json"
interact "$out/whole.html" peaks,zoom,slider,search,pick,settings,fragmentation,replayed "$out/interaction.png"

# A device too small for the trace, and a ring buffer too small to keep it all.
"$cli" replay --policy cudalloc --capacity 12G --conf trace:1000000 --snapshot "$out/oom.json" \
  "$trace" >/dev/null 2>&1 || fail "replay oom"
"$cli" view "$out/oom.json" -o "$out/oom.html" >/dev/null || fail "view oom.json"
interact "$out/oom.html" oom "$out/oom.png"
"$cli" replay --policy cudalloc --conf trace:1000 --snapshot "$out/ring.json" "$trace" >/dev/null ||
  fail "replay ring"
"$cli" view "$out/ring.json" -o "$out/ring.html" >/dev/null || fail "view ring.json"
interact "$out/ring.html" incomplete "$out/ring.png"

# PyTorch's kind of cut trace (no count of dropped events), an oom with device_free, a
# 512-byte block in a 1 GiB segment; and two streams in the optional-fields fixture.
"$cli" view "$cut_fixture" -o "$out/cut_trace.html" >/dev/null || fail "view $cut_fixture"
interact "$out/cut_trace.html" incomplete,oom,small_blocks "$out/cut_trace.png"
interact "$out/optional_fields.html" streams "$out/streams.png"
# A PyTorch snapshot whose allocs carry frames: who holds memory at each moment, the bands.
"$cli" view "$frames_fixture" -o "$out/frames.html" >/dev/null || fail "view $frames_fixture"
interact "$out/frames.html" bands,who_holds "$out/who_holds.png"
# The same, as snapshot_on_oom writes it: the page names the failed request at the top.
python3 - "$frames_fixture" "$out/written_at_oom.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
doc["cudalloc"] = {"oom": {"device": 0, "size": 512 << 20, "stream": 7, "sequence": 2,
                           "device_free": 100 << 20, "message": "out of memory: 512 MiB"}}
json.dump(doc, open(sys.argv[2], "w"))
PY
"$cli" view "$out/written_at_oom.json" -o "$out/written_at_oom.html" >/dev/null || fail "view written_at_oom.json"
interact "$out/written_at_oom.html" written_at_oom "$out/written_at_oom.png"

echo "$failures failure(s)"
if [ "$failures" -ne 0 ]; then
  echo "last lines of $out/chromium.log:"
  tail -n 20 "$out/chromium.log"
fi
[ "$failures" -eq 0 ]
