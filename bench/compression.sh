#!/usr/bin/env bash
# Convergence of compressed traffic against the exact run: the same model,
# tokens, seed and layout (4 ranks under mpirun: 2 stages x 2 replicas), once
# per case (data-parallel gradients alone in each format; then all three
# traffic classes, gradients, activations and activation gradients, at 8 and
# 4 bits); the validation loss at equal tokens, the training curves (PNG)
# and the wire size of each format.
#
#   bash bench/compression.sh [OUT.md]     (build/release, mpirun, /usr/bin/python3 with matplotlib)
#
# Environment: MODELS="tiny:300 emulation:150" (model file : steps), CASES (names below).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-analysis/results/communication.md}
models=${MODELS:-"tiny:300 emulation:150"}
cases=${CASES:-"fp32 int8 int4 topk all-int8 all-int4 tied-int8 tied-int4 all-int8-tied all-int4-tied"}
declare -A options=([fp32]="--compression.gradients=fp32" [int8]="--compression.gradients=int8"
  [int4]="--compression.gradients=int4" [topk]="--compression.gradients=topk"
  [all-int8]="--compression.gradients=int8 --compression.activations=int8 --compression.activation_gradients=int8"
  [all-int4]="--compression.gradients=int4 --compression.activations=int4 --compression.activation_gradients=int4"
  [tied-int8]="--compression.tied_embedding=int8" [tied-int4]="--compression.tied_embedding=int4"
  [all-int8-tied]="--compression.gradients=int8 --compression.activations=int8 --compression.activation_gradients=int8 --compression.tied_embedding=int8"
  [all-int4-tied]="--compression.gradients=int4 --compression.activations=int4 --compression.activation_gradients=int4 --compression.tied_embedding=int4")
work=runs/bench-compression
mkdir -p "$work" "$(dirname "$out")"
source bench/convergence_case.sh

# Bytes on the wire per gradient value of each case's format (the default
# group of 64 values and top-k fraction of 1%).
bytes_per_value() {
  local format=${1#all-}
  format=${format#tied-}
  /usr/bin/python3 -c 'import sys; sys.path.insert(0, "analysis"); import geotrain_timing as gt; print(gt.wire_bytes_per_value(sys.argv[1]))' "${format%-tied}"
}

{
  echo "# Compressed traffic: convergence against the exact run"
  echo
  echo "Regenerate: \`bash bench/compression.sh\` ($(date -u +%Y-%m-%d); $(nproc --all) cores, $(lscpu | sed -n 's/^Model name: *//p'))."
  echo "Each run: \`mpirun -n 4 geotrain train inputs/quickstart.toml\` (2 stages x 2 replicas, 4 micro-batches of 2"
  echo "sequences per replica, the shipped corpus, seed 1) with \`--compression.gradients=FORMAT\` (int8 / int4:"
  echo "groups of 64 values with one fp32 scale; top-k: 1% of the values) and error feedback; \`all-int8\` /"
  echo "\`all-int4\` also encode the activations and their gradients between the stages (no error feedback);"
  echo "\`tied-int8\` / \`tied-int4\` encode only the tied embedding's gradient, summed every step between the"
  echo "first and the last stage (\`--compression.tied_embedding\`, error feedback), \`all-int8-tied\` /"
  echo "\`all-int4-tied\` all four classes;"
  echo "same tokens in the same order for every case. Peer: the exact (fp32) run of the same binary, in the"
  echo "same script."
  echo "Wire: bytes per gradient value of one encoded pass (with 2 replicas there is one pass; with more,"
  echo "two: the reduce-scatter's shards and the owner's summed shard)."
  echo
  echo "What this measures is convergence at equal tokens. The tokens/s and utilisation columns are not a"
  echo "speed result: the 4 ranks share this machine's cores over loopback, where the wire is never the"
  echo "bottleneck, so they show the encoding's CPU cost and the machine's load at the time (it is shared);"
  echo "the gain on slow links is for the emulated-WAN experiment: [communication-emulation.md](communication-emulation.md)"
  echo "(\`bash jobs/emulate/communication.sh\`: step time and compute utilisation with overlap, compression and"
  echo "more micro-batches on the emulated world-wide network, beside today's planned and rank-order runs)."
  echo
} > "$out"
for entry in $models; do
  model=${entry%%:*} steps=${entry#*:}
  files=() labels=()
  echo "## model \`$model\`, $steps steps" >> "$out"
  echo >> "$out"
  echo "| case | wire bytes / value | vs fp32 | final validation loss | vs fp32 | training loss (last 10 steps) | tokens/s | compute utilisation |" >> "$out"
  echo "|---|---|---|---|---|---|---|---|" >> "$out"
  reference=""
  for format in $cases; do
    # shellcheck disable=SC2086  # options are words
    read -r validation train tokens utilisation < <(convergence_case "$work" "$model" "$steps" "$format" ${options[$format]})
    [[ -n $validation ]] || { echo "$0: $model $format: the run failed (see $work/$model-$format.err)" >&2; exit 1; }
    files+=("$work/$model-$format.jsonl") labels+=("$format")
    [[ -z $reference ]] && reference=$validation
    awk -v f="$format" -v b="$(bytes_per_value "$format")" -v v="$validation" -v r="$reference" -v t="$train" \
        -v k="$tokens" -v u="$utilisation" 'BEGIN { printf "| %s | %.4g | %.3fx | %.4f | %+.2f%% | %.4f | %.0f | %.1f%% |\n", f, b, b / 4, v, 100 * (v - r) / r, t, k, 100 * u }' >> "$out"
    echo "$model $format: validation $validation"
  done
  png=$(dirname "$out")/communication-$model.png
  /usr/bin/python3 analysis/plot_metrics.py "${files[@]}" --labels "$(IFS=,; echo "${labels[*]}")" --out "$png" > /dev/null
  echo >> "$out"
  echo "![loss curves, $model]($(basename "$png"))" >> "$out"
  echo >> "$out"
done
echo "written: $out"
