#!/usr/bin/env bash
# expect_named_abort.sh RANK MAX_SECONDS -- COMMAND...
# Passes when COMMAND exits non-zero within MAX_SECONDS and the first
# "no answer from" line it prints names rank RANK.
set -u
rank=$1 max_s=$2
shift 3
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start_ns=$(date +%s%N)
"$@" >"$log" 2>&1
code=$?
elapsed_ms=$(( ($(date +%s%N) - start_ns) / 1000000 ))
elapsed="$((elapsed_ms / 1000)).$(printf %03d $((elapsed_ms % 1000)))"
first=$(grep -m1 "no answer from" "$log")
fail() { echo "FAIL: $1 (exit $code, ${elapsed} s)"; cat "$log"; exit 1; }
[[ $code -ne 0 ]] || fail "exit code 0"
[[ -n $first ]] || fail "no 'no answer from' line"
echo "$first" | grep -Eq "no answer from rank $rank within" || fail "first message does not name rank $rank: $first"
(( elapsed_ms <= max_s * 1000 )) || fail "took longer than $max_s s"
echo "ok: exit $code after ${elapsed} s: $first"
