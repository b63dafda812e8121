#!/usr/bin/env bash
# `cudalloc view` in a real browser: headless Chromium loads the generated pages from disk,
# and the test reads the DOM after the scripts ran. A page passes when it set
# body[data-rendered="ok"] (every plot drawn on a non-empty canvas) and recorded no script
# error in #errors. Pages and a screenshot stay in OUT_DIR as test artifacts.
# Usage: check_viewer.sh CUDALLOC_CLI TRACE FIXTURE OUT_DIR
# Exit 77 (skipped) only when no Chromium is installed (scripts/install_deps.sh installs it).
set -u
cli=${1:?usage: check_viewer.sh CUDALLOC_CLI TRACE FIXTURE OUT_DIR}
trace=${2:?}
fixture=${3:?}
out=${4:?}

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

# Runs the browser on a page; extra arguments choose what it produces (--dump-dom, --screenshot).
browse() {
  local page=$1
  shift
  timeout 120 "$browser" --headless --no-sandbox --disable-gpu --disable-extensions \
    --disable-dev-shm-usage \
    --no-first-run --hide-scrollbars --user-data-dir="$profile" --window-size=1280,1600 \
    --virtual-time-budget=10000 "$@" "file://$(realpath "$page")" 2>>"$out/chromium.log"
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

echo "$failures failure(s)"
if [ "$failures" -ne 0 ]; then
  echo "last lines of $out/chromium.log:"
  tail -n 20 "$out/chromium.log"
fi
[ "$failures" -eq 0 ]
