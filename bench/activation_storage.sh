#!/usr/bin/env bash
# bf16 activation storage (device.activation_storage = bf16) against fp32
# storage: (1) memory of a GPT-2 124M stage at T = 1024 (the bytes the stage,
# AdamW and the pipeline allocate, as `geotrain train` reports them, and the
# process's peak resident memory over one step); (2) convergence at equal
# tokens, with fp32 and with bf16 GEMM operands (each beside its fp32-storage
# peer), loss curves plotted.
#
#   bash bench/activation_storage.sh [OUT.md]   (build/release, mpirun, /usr/bin/python3 with matplotlib)
#
# Environment: MODELS="tiny:300 emulation:150" (model file : steps),
# GPT2_SEQUENCES="1 4" (sequences per micro-batch for the memory table).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-analysis/results/activation_storage.md}
models=${MODELS:-"tiny:300 emulation:150"}
gpt2_sequences=${GPT2_SEQUENCES:-"1 4"}
cases="fp32 bf16-storage bf16-gemm bf16-gemm+storage"
declare -A options=([fp32]="" [bf16-storage]="--device.activation_storage=bf16"
  [bf16-gemm]="--device.matmul_precision=bf16"
  [bf16-gemm+storage]="--device.matmul_precision=bf16 --device.activation_storage=bf16")
declare -A peer=([fp32]=fp32 [bf16-storage]=fp32 [bf16-gemm]=fp32 [bf16-gemm+storage]=bf16-gemm)
geotrain=build/release/geotrain
work=runs/bench-activation-storage
mkdir -p "$work" "$(dirname "$out")"
source bench/convergence_case.sh
# The report's last section, "## Reading", is written by hand: kept as it is.
kept=$(sed -n '/^## Reading/,$p' "$out" 2>/dev/null || true)

{
  echo "# bf16 activation storage: memory and convergence against fp32 storage"
  echo
  echo "Regenerate: \`bash bench/activation_storage.sh\` ($(date -u +%Y-%m-%d); $(nproc --all) cores, $(lscpu | sed -n 's/^Model name: *//p'); CPU backend)."
  echo "\`device.activation_storage = bf16\` keeps each layer's activations from the forward to the backward in bf16"
  echo "(round to nearest even); the forward, the weights, gradients and AdamW state stay fp32. Peer: the same"
  echo "binary with fp32 storage, in the same script."
  echo
  echo "## Memory: GPT-2 124M, T = 1024, one rank, one micro-batch in flight"
  echo
  echo "Allocated: what the stage, AdamW and the pipeline's buffers allocate, as \`geotrain train\` reports it"
  echo "(the planner's memory model, equal to the allocations by \`tests/model/test_memory_model.cpp\`). Peak"
  echo "resident: the process's largest resident set over one training step (\`/usr/bin/time\`), which adds"
  echo "the data, the checkpoint-free run's host buffers and the libraries."
  echo
  echo "| sequences per micro-batch | storage | activations (MiB) | workspace (MiB) | activations + workspace (MiB) | fp32 / this | weights, gradients, AdamW (MiB) | peak resident (MiB) | step (s) |"
  echo "|---:|---|---:|---:|---:|---:|---:|---:|---:|"
} > "$out"
for b in $gpt2_sequences; do
  reference=""
  for storage in fp32 bf16; do
    log=$work/gpt2-b$b-$storage.log
    /usr/bin/time -f "peak_kib %M" "$geotrain" train --model.file=inputs/models/gpt2-124m.toml --pipeline.stages=1 \
      --train.micro_batch_sequences="$b" --train.gradient_accumulation=1 --train.steps=1 --optimizer.warmup_steps=0 \
      --train.eval_every_steps=0 --train.eval_batches=1 --checkpoint.dir= --timing.file= \
      --device.activation_storage="$storage" > "$log" 2>&1
    line=$(grep -E '^  memory of stage' "$log")
    state=$(sed -n 's/.*AdamW \([0-9.]*\) MiB.*/\1/p' <<<"$line")
    activations=$(sed -n 's/.*activations \([0-9.]*\) MiB.*/\1/p' <<<"$line")
    workspace=$(sed -n 's/.*workspace \([0-9.]*\) MiB.*/\1/p' <<<"$line")
    peak=$(sed -n 's/^peak_kib \([0-9]*\)/\1/p' "$log")
    seconds=$(sed -n 's/^step .*| *\([0-9.]*\) ms |.*/\1/p' "$log" | tail -1)
    total=$(awk -v a="$activations" -v w="$workspace" 'BEGIN { print a + w }')
    [[ -z $reference ]] && reference=$total
    awk -v b="$b" -v s="$storage" -v a="$activations" -v w="$workspace" -v t="$total" -v r="$reference" \
        -v st="$state" -v p="$peak" -v ms="$seconds" \
        'BEGIN { printf "| %d | %s | %.1f | %.1f | %.1f | %.2fx | %.1f | %.0f | %.1f |\n", b, s, a, w, t, r / t, st, p / 1024, ms / 1000 }' >> "$out"
    echo "gpt2 b=$b $storage: activations $activations MiB, workspace $workspace MiB, peak $peak KiB"
  done
done

for entry in $models; do
  model=${entry%%:*} steps=${entry#*:}
  files=() labels=()
  declare -A validation_of=()
  {
    echo
    echo "## Convergence: model \`$model\`, $steps steps"
    echo
    echo "\`mpirun -n 4 geotrain train inputs/quickstart.toml --model.file=inputs/models/$model.toml\` (2 stages x 2"
    echo "replicas, the shipped corpus, seed 1), the same tokens in the same order in every case; each case beside"
    echo "its peer with fp32 storage and the same GEMM precision."
    echo
    echo "| case | options | final validation loss | peer | vs peer | training loss (last 10 steps) | tokens/s | compute utilisation |"
    echo "|---|---|---:|---|---:|---:|---:|---:|"
  } >> "$out"
  for name in $cases; do
    # shellcheck disable=SC2086  # options are words
    read -r validation train tokens utilisation < <(convergence_case "$work" "$model" "$steps" "$name" ${options[$name]})
    [[ -n $validation ]] || { echo "$0: $model $name: the run failed (see $work/$model-$name.err)" >&2; exit 1; }
    files+=("$work/$model-$name.jsonl") labels+=("$name")
    validation_of[$name]=$validation
    reference=${validation_of[${peer[$name]}]}
    awk -v n="$name" -v o="${options[$name]:-(defaults)}" -v v="$validation" -v p="${peer[$name]}" -v r="$reference" \
        -v t="$train" -v k="$tokens" -v u="$utilisation" \
        'BEGIN { printf "| %s | `%s` | %.4f | %s | %+.3f%% | %.4f | %.0f | %.1f%% |\n", n, o, v, p, 100 * (v - r) / r, t, k, 100 * u }' >> "$out"
    echo "$model $name: validation $validation"
  done
  png=$(dirname "$out")/activation_storage-$model.png
  /usr/bin/python3 analysis/plot_metrics.py "${files[@]}" --labels "$(IFS=,; echo "${labels[*]}")" --out "$png" > /dev/null
  { echo; echo "![loss curves, $model]($(basename "$png"))"; } >> "$out"
  unset validation_of
done
if [[ -n $kept ]]; then printf '\n%s\n' "$kept" >> "$out"; fi
echo "written: $out"
