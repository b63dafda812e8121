#!/usr/bin/env bash
# scripts/segv_backtrace.c, preloaded into a program that dies of SIGSEGV, must print the
# faulting address and the native frames down to the faulting function, and leave the exit
# status of the signal (gpu_workload_crash.sh relies on both on machines without gdb).
#
#   check_segv_backtrace.sh HANDLER_SO TARGET_PROGRAM
set -u
handler=${1:?handler} target=${2:?target}
err=$(LD_PRELOAD=$handler "$target" 2>&1 >/dev/null)
status=$?
fail() { echo "FAIL: $1"; echo "$err"; exit 1; }
[ "$status" -eq 139 ] || fail "exit status $status, expected 139 (SIGSEGV)"
grep -q "== signal 11 at address (nil); native frames:" <<<"$err" || fail "no signal line"
grep -q "read_through_null" <<<"$err" || fail "the faulting function is not among the frames"
grep -q "== end of native frames" <<<"$err" || fail "no end line"
echo "ok: native frames printed, exit status 139"
