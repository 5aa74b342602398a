#!/usr/bin/env bash
# expect_failure.sh EXIT_CODE PATTERN -- COMMAND...
# Passes when COMMAND exits with EXIT_CODE, prints exactly one line on stderr,
# that line matches the extended regex PATTERN, and stdout stays empty.
set -u
expected_code=$1 pattern=$2
shift 3
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
"$@" >"$out" 2>"$err"
code=$?
fail() { echo "FAIL: $1"; echo "--- stderr:"; cat "$err"; echo "--- stdout:"; head -5 "$out"; exit 1; }
[[ $code -eq $expected_code ]] || fail "exit code $code, expected $expected_code"
[[ $(wc -l <"$err") -eq 1 ]] || fail "stderr has $(wc -l <"$err") lines, expected one"
grep -Eq -- "$pattern" "$err" || fail "stderr does not match: $pattern"
[[ ! -s $out ]] || fail "stdout is not empty"
echo "ok: exit $code: $(cat "$err")"
