#!/usr/bin/env bash
# Builds the libFuzzer harnesses (the `fuzz` preset: clang, ASan + UBSan) and
# fuzzes each for SECONDS_PER_TARGET seconds, one per core at a time
# (FUZZ_PARALLEL), on a scratch copy of its committed corpus
# (fuzz/corpus/<name>/ stays as it is).
#
#   bash fuzz/run.sh SECONDS_PER_TARGET [OUT_DIR]     (OUT_DIR: build/fuzz/results)
#
# OUT_DIR gets <name>.log per harness, any crash, leak, timeout or
# out-of-memory input under <name>/, and fuzz-summary.json. Exit status 1 if
# any harness found something: keep the input in fuzz/corpus/<name>/ once
# fixed (fuzz.replay.<name> then checks it in every build). 2: bad usage or
# the build failed.
set -uo pipefail

usage="usage: bash fuzz/run.sh SECONDS_PER_TARGET [OUT_DIR]"
seconds=${1:-}
[[ "$seconds" =~ ^[1-9][0-9]*$ ]] || { echo "$usage" >&2; exit 2; }
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${2:-$root/build/fuzz/results}
mkdir -p "$out" && out=$(cd "$out" && pwd) || exit 2
cd "$root" || exit 2

harnesses=(config scenario model_file token_shard plan_codec checkpoint checkpoint_folder checkpoint_tensors tokenizer
  safetensors)
jobs=${FUZZ_BUILD_JOBS:-2}

started=$SECONDS
echo "fuzz: configuring and building (preset fuzz, -j$jobs; log: $out/build.log)"
# The libraries as unity batches (as the sanitizer builds of tests/run.sh):
# 1:21 instead of 2:15 on 2 cores.
if ! { cmake --preset fuzz -DCMAKE_UNITY_BUILD=ON && cmake --build --preset fuzz -j "$jobs"; } >"$out/build.log" 2>&1; then
  tail -n 40 "$out/build.log" >&2
  echo "fuzz: build failed" >&2
  exit 2
fi
echo "fuzz: built in $((SECONDS - started)) s"

scratch=$(mktemp -d "${TMPDIR:-/tmp}/geotrain-fuzz.XXXXXX") || exit 2
trap 'rm -rf "$scratch"' EXIT

# libFuzzer's final statistics name the executions even after a crash; the
# last progress line ("#1234 ...") is the fallback.
executions_in() {
  local log=$1 n
  n=$(sed -n 's/^stat::number_of_executed_units: *\([0-9][0-9]*\).*/\1/p' "$log" | tail -n 1)
  [[ -n "$n" ]] || n=$(sed -n 's/^#\([0-9][0-9]*\).*/\1/p' "$log" | tail -n 1)
  echo "${n:-0}"
}

# One harness: its log, artifacts, table line and JSON row (the last two in
# $scratch/results/<name>.{line,json}, put together in order below).
fuzz_one() {
  local name=$1 corpus="$scratch/corpus/$1" artifacts="$out/$1" log="$out/$1.log" t0=$SECONDS status elapsed runs
  local result artifact_list="" found dictionary=()
  mkdir -p "$corpus" "$artifacts" "$scratch/tmp/$name" "$scratch/results"
  rm -f "$artifacts"/crash-* "$artifacts"/leak-* "$artifacts"/timeout-* "$artifacts"/oom-* "$artifacts"/slow-unit-*
  cp -R "fuzz/corpus/$name/." "$corpus/"
  [[ -f "fuzz/dict/$name.dict" ]] && dictionary=(-dict="fuzz/dict/$name.dict")
  TMPDIR="$scratch/tmp/$name" UBSAN_OPTIONS=print_stacktrace=1 \
    "build/fuzz/fuzz/fuzz_$name" "$corpus" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
    -print_final_stats=1 -artifact_prefix="$artifacts/" "${dictionary[@]}" >"$log" 2>&1
  status=$?
  elapsed=$((SECONDS - t0))
  runs=$(executions_in "$log")
  mapfile -t found < <(cd "$artifacts" && ls -1 crash-* leak-* timeout-* oom-* 2>/dev/null)
  if ((status != 0 || ${#found[@]} > 0)); then
    result="FOUND ${#found[@]} (exit $status): ${found[*]:-see $log}"
    touch "$scratch/results/$name.found"
  else
    result=ok
  fi
  printf '%-26s %8d %12d %10d  %s\n' "fuzz_$name" "$elapsed" "$runs" "$((runs / (elapsed > 0 ? elapsed : 1)))" "$result" \
    >"$scratch/results/$name.line"
  ((${#found[@]} > 0)) && artifact_list=$(printf '"%s",' "${found[@]/#/$name/}")
  printf '{"target": "fuzz_%s", "seconds": %d, "executions": %d, "crashes": %d, "exit_code": %d, "artifacts": [%s]}' \
    "$name" "$elapsed" "$runs" "${#found[@]}" "$status" "${artifact_list%,}" >"$scratch/results/$name.json"
}

# Each harness is one process on one core: FUZZ_PARALLEL of them at a time
# (default: the cores), each its full SECONDS_PER_TARGET.
parallel=${FUZZ_PARALLEL:-$(nproc)}
running=0
for name in "${harnesses[@]}"; do
  if ((running >= parallel)); then
    wait -n
    running=$((running - 1))
  fi
  fuzz_one "$name" &
  running=$((running + 1))
done
wait

found_anything=0
json_rows=()
printf '%-26s %8s %12s %10s  %s\n' harness seconds executions exec/s result
for name in "${harnesses[@]}"; do
  cat "$scratch/results/$name.line" 2>/dev/null || printf '%-26s  no result (the harness did not run)\n' "fuzz_$name"
  [[ -f "$scratch/results/$name.found" || ! -f "$scratch/results/$name.json" ]] && found_anything=1
  json_rows+=("$(cat "$scratch/results/$name.json" 2>/dev/null || printf '{"target": "fuzz_%s", "exit_code": -1}' "$name")")
done

{
  echo "{\"seconds_per_target\": $seconds, \"total_seconds\": $((SECONDS - started)), \"harnesses\": ["
  for i in "${!json_rows[@]}"; do
    sep=","; ((i == ${#json_rows[@]} - 1)) && sep=""
    echo "  ${json_rows[$i]}$sep"
  done
  echo "]}"
} >"$out/fuzz-summary.json"
echo "fuzz: $((SECONDS - started)) s in all; summary: $out/fuzz-summary.json"
exit "$found_anything"
