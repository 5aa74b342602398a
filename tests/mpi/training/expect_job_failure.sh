#!/usr/bin/env bash
# expect_job_failure.sh EXIT_CODE PATTERN -- MPIRUN ... geotrain ...
# Passes when the MPI job exits with EXIT_CODE and geotrain printed exactly
# one line ("geotrain: ...") on stderr, matching the extended regex PATTERN.
# (mpirun adds its own banner about the exit status; that is not ours.)
set -u
expected_code=$1 pattern=$2
shift 3
err=$(mktemp)
trap 'rm -f "$err"' EXIT
"$@" >/dev/null 2>"$err"
code=$?
ours=$(grep -E '^geotrain: ' "$err")
fail() { echo "FAIL: $1"; echo "--- stderr:"; cat "$err"; exit 1; }
[[ $code -eq $expected_code ]] || fail "exit code $code, expected $expected_code"
[[ $(grep -cE '^geotrain: ' "$err") -eq 1 ]] || fail "expected exactly one geotrain line on stderr"
grep -Eq -- "$pattern" <<<"$ours" || fail "stderr does not match: $pattern"
echo "ok: exit $code: $ours"
