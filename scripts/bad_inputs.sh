#!/usr/bin/env bash
# Feeds cudalloc bad input on every surface and prints what happened as Markdown table rows
# (surface | input | result | message), the source of the bad-input table in
# docs/reliability.md. Not a test: it reports whatever happens, crashes included. The readers'
# hostile-input cases (nesting, inflation, FIFOs, sizes...) are scripts/reader_hardening.sh.
#
#   bash scripts/bad_inputs.sh [BUILD_DIR]     (default build/, configured like scripts/test.sh)
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
cmake --build "$build" -j"${JOBS:-$(nproc)}" --target cudalloc_cli cudalloc_bad_input_probe \
      cudalloc_preload >/dev/null || exit 1
cli=$build/cudalloc
preload=$(readlink -f "$build/libcudalloc_preload.so")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export CUDALLOC_LOG=warn

first_line() { tr '\n|' ' /' | cut -c1-160; }
# run SURFACE INPUT COMMAND...: one row with the exit status (or signal) and the first line.
run() {
  local surface=$1 input=$2
  shift 2
  local out rc
  out=$(timeout 20 "$@" 2>&1)
  rc=$?
  local result="exit $rc"
  [ $rc -eq 124 ] && result="**hang** (killed after 20 s)"
  [ $rc -gt 128 ] && [ $rc -ne 124 ] && result="**signal $((rc - 128))**"
  printf '| %s | %s | %s | %s |\n' "$surface" "$input" "$result" "$(first_line <<<"$out")"
}

echo "| surface | input | result | message |"
echo "|---|---|---|---|"

# The C API on a simulated pair of 64 MiB devices.
CUDALLOC_DEVICE=fake:64M:2 "$build/tests/cudalloc_bad_input_probe" 2>/dev/null

# CUDALLOC_CONF and CUDALLOC_DEVICE, as the options command and a library user see them.
for conf in "limit:lots" "fraction:0" "fraction:nan" "slab_max:4M" "slab_keep:-1" \
            "limit:99999999999999999999" "colour:blue" "limit" ",,,:,:" "limit:1G,limit:x"; do
  run CUDALLOC_CONF "\`$conf\`" "$cli" options --conf "$conf"
done
big_key=$(python3 -c 'print("k" * 100000 + ":1")')
run CUDALLOC_CONF "a 100,000-character unknown key" "$cli" options --conf "$big_key"
for device in fake:0 fake:-1G fake:1G:0 fake:1G:65 fake:18446744073709549568 fake:1G:2:3 fakeish \
              fake:xyz banana; do
  run CUDALLOC_DEVICE "\`$device\`" env CUDALLOC_DEVICE="$device" "$build/tests/cudalloc_bad_input_probe"
done

# Trace and snapshot files through the CLI.
trace=examples/replay/gpt2_train.json.gz
gzip -dc "$trace" | head -c 5000 >"$dir/truncated.json"
head -c 3000 "$trace" >"$dir/truncated.json.gz"
: >"$dir/empty"
printf 'not a trace' >"$dir/garbage"
head -c 100000 /dev/urandom >"$dir/random"
python3 -c "print('[' * 100000 + ']' * 100000)" >"$dir/deep_list.json"
python3 -c "print('{\"device_traces\": [[' + '[' * 50000 + ']' * 50000 + ']]}')" >"$dir/deep_event.json"
printf '{"device_traces": [[{"action": "alloc", "addr": 1, "size": -1}]]}' >"$dir/negative_size.json"
printf '{"device_traces": [[{"action": "alloc", "addr": 1, "size": 1e30}]]}' >"$dir/float_size.json"
printf '{"device_traces": [[{"action": "alloc", "addr": 1, "size": 18446744073709551615}]]}' >"$dir/huge_size.json"
printf '{"device_traces": {"0": []}}' >"$dir/traces_not_list.json"
printf 'Thread,Time,Action,Pointer,Size,Stream\n1,0,allocate,0x10,notanumber,0\n' >"$dir/bad_row.csv"
printf 'Thread,Time,Action,Pointer,Size,Stream\n1,0,allocate,0x10\n' >"$dir/short_row.csv"
printf 'Thread,Time,Action,Pointer,Size,Stream\n1,0,explode,0x10,8,0\n' >"$dir/bad_action.csv"
printf '\x80\x02X\x04\x00\x00\x00\xff\xfe\xfd\xfc.' >"$dir/invalid_utf8.pickle"
printf '\x80\x02}X\x08\x00\x00\x00segments]X\x03\x00\x00\x00\xff\xfe\xfdas.' >"$dir/invalid_utf8_segments.pickle"
cp tests/fuzz/regressions/fuzz_pickle/* "$dir/"
for f in truncated.json truncated.json.gz empty garbage random deep_list.json deep_event.json \
         negative_size.json float_size.json huge_size.json traces_not_list.json bad_row.csv \
         short_row.csv bad_action.csv binunicode8_length_wraps_around failed_append_ignored \
         shared_lists_billion_laughs list_appended_to_itself_leaks; do
  run "cudalloc replay" "$f" "$cli" replay "$dir/$f"
done
for f in deep_list.json invalid_utf8.pickle invalid_utf8_segments.pickle shared_lists_billion_laughs; do
  run "cudalloc inspect" "$f" "$cli" inspect "$dir/$f"
  run "cudalloc convert" "$f" "$cli" convert "$dir/$f" -o "$dir/out.pickle"
done
run "cudalloc convert" "invalid_utf8.pickle to JSON" "$cli" convert "$dir/invalid_utf8.pickle" -o "$dir/out.json"
printf '[[1]]' >"$dir/list_of_lists.json"
run "cudalloc inspect" "list_of_lists.json (\`[[1]]\`)" "$cli" inspect "$dir/list_of_lists.json"
run "cudalloc replay" "a directory" "$cli" replay "$dir"
run "cudalloc replay" "/dev/zero" "$cli" replay /dev/zero

# LD_PRELOAD on programs that do not use CUDA, on the simulated device.
export CUDALLOC_DEVICE=fake:1G
run LD_PRELOAD "/bin/true" env LD_PRELOAD="$preload" /bin/true
run LD_PRELOAD "\`sh -c 'exit 3'\` (status kept?)" env LD_PRELOAD="$preload" sh -c 'exit 3'
run LD_PRELOAD "shell that forks 20 subshells" env LD_PRELOAD="$preload" \
    bash -c 'for i in $(seq 20); do (true) & done; wait; echo forked ok'
run LD_PRELOAD "python3 with a thread, os.fork, child exits" env LD_PRELOAD="$preload" \
    python3 -c 'import os,threading; t=threading.Thread(target=lambda: None); t.start(); pid=os.fork()
if pid == 0: os._exit(7)
print("child status", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])); t.join()'
run LD_PRELOAD "CUDALLOC_CONF=limit:lots on /bin/true" env CUDALLOC_CONF=limit:lots \
    LD_PRELOAD="$preload" /bin/true
run LD_PRELOAD "CUDALLOC_DEVICE=cuda (no driver) on /bin/true" env CUDALLOC_DEVICE=cuda \
    LD_PRELOAD="$preload" /bin/true

# The CUDA entry points with NULL, 0, foreign and huge arguments, and fork while threads
# allocate (tests/interpose/preload_test; built when the CUDA toolkit's headers are found).
probe=$build/tests/interpose/preload_test
if [ -x "$probe" ]; then
  stub=$build/tests/interpose/stub_driver
  for mode in answers fork; do
    run LD_PRELOAD "\`preload_test $mode\` (see tests/interpose/preload_test.cpp)" sh -c \
      "env LD_PRELOAD='$preload' LD_LIBRARY_PATH='$stub' CUDALLOC_CONF=limit:512M '$probe' $mode | tail -1"
  done
  run LD_PRELOAD "CUDALLOC_DISABLE=false: cudalloc still serves" sh -c \
    "env LD_PRELOAD='$preload' LD_LIBRARY_PATH='$stub' CUDALLOC_DISABLE=false CUDALLOC_CONF=limit:512M CUDALLOC_LOG=error '$probe' serve | tail -1"
fi
