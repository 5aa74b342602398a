#!/usr/bin/env bash
# with_peak_memory.sh FILE COMMAND...
# Runs COMMAND while nvidia-smi samples the GPU's used memory every 100 ms,
# then writes "peak_mib baseline_mib" to FILE: the largest sample and the one
# taken before COMMAND started (the difference is what the run added: its
# allocations, the CUDA context and cuBLAS workspaces). Exits with COMMAND's
# status. Without nvidia-smi, FILE says "unknown unknown".
set -uo pipefail
file=$1
shift
if ! command -v nvidia-smi >/dev/null; then
  echo "unknown unknown" >"$file"
  exec "$@"
fi
query=(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits --id=0)
baseline=$("${query[@]}" 2>/dev/null | head -1 | tr -dc '0-9')
"${query[@]}" -lms 100 >"$file.samples" 2>/dev/null &
sampler=$!
rc=0
"$@" || rc=$?
kill "$sampler" 2>/dev/null
wait "$sampler" 2>/dev/null
peak=$(tr -dc '0-9\n' <"$file.samples" | sort -n | tail -1)
echo "${peak:-unknown} ${baseline:-unknown}" >"$file"
rm -f "$file.samples"
exit "$rc"
