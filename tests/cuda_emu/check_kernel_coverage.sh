#!/usr/bin/env bash
# check_kernel_coverage.sh KERNELS_DIR LOG -- TEST_COMMAND... [-- TEST_COMMAND...]
# Runs each test command under the CUDA emulation with its launch log on, then
# compares the kernels that ran with every __global__ function in KERNELS_DIR.
# Fails, naming them, when a hand-written kernel was never executed.
set -euo pipefail
kernels_dir=$1 log=$2
shift 2
rm -f "$log"
commands=()
run_collected() {
  if ((${#commands[@]})); then CUDA_EMU_LAUNCH_LOG="$log" "${commands[@]}" >/dev/null; fi
  commands=()
}
for argument in "$@"; do
  if [[ $argument == -- ]]; then run_collected; else commands+=("$argument"); fi
done
run_collected
declared=$(grep -ohP '__global__\s+void\s+\K\w+' "$kernels_dir"/*.cu | sort -u)
executed=$(sort -u "$log")
missing=$(comm -23 <(echo "$declared") <(echo "$executed"))
echo "hand-written kernels executed: $(comm -12 <(echo "$declared") <(echo "$executed") | wc -l) of $(echo "$declared" | wc -l)"
if [[ -n $missing ]]; then
  echo "never executed:"
  echo "$missing" | sed 's/^/  /'
  exit 1
fi
