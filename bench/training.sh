#!/usr/bin/env bash
# Training throughput and peak memory: geotrain against PyTorch (CPU, fp32)
# on the same model shape, batch, threads and optimizer, in one run.
#
#   bash bench/training.sh [STEPS]      (needs build/release with the kernels, python3-torch)
#
# Prints a markdown table; analysis/results/training_cpu.md holds a run.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-6}
threads=${THREADS:-2}
geotrain=${GEOTRAIN:-build/release/geotrain}
python=/usr/bin/python3   # Debian's python, where python3-torch lives
export OMP_NUM_THREADS=$threads
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "OpenBLAS core type: ${OPENBLAS_CORETYPE:-auto-detected}; threads $threads; $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
echo
echo "PyTorch is run twice: as installed, and with OPENBLAS_NUM_THREADS=1 (its BLAS then runs inside"
echo "PyTorch's own OpenMP threads instead of nesting a second pool: its faster setting here)."
echo "The ratio is geotrain / the faster PyTorch."
echo
echo "| model | layers x hidden, seq, batch | geotrain tok/s | PyTorch tok/s | PyTorch, 1 BLAS thread | ratio | geotrain peak RSS (MiB) | PyTorch peak RSS (MiB) |"
echo "|---|---|---|---|---|---|---|---|"
run_case() {  # name layers hidden heads seq vocab batch
  local name=$1 layers=$2 hidden=$3 heads=$4 seq=$5 vocab=$6 batch=$7
  printf '[model]\nname = "%s"\nlayers = %d\nhidden = %d\nheads = %d\nsequence_length = %d\nvocabulary = %d\n' \
    "$name" "$layers" "$hidden" "$heads" "$seq" "$vocab" > "$work/model.toml"
  /usr/bin/time -f "%M" -o "$work/ours.rss" "$geotrain" train --model.file="$work/model.toml" \
    --train.steps="$steps" --train.micro_batch_sequences="$batch" --optimizer.warmup_steps=0 \
    --train.eval_batches=1 --train.eval_every_steps=0 --device.kind=cpu > "$work/ours.log"
  local ours; ours=$(sed -n 's/^final validation loss .*, \([0-9]*\) tokens\/s.*/\1/p' "$work/ours.log")
  /usr/bin/time -f "%M" -o "$work/torch.rss" "$python" bench/pytorch_gpt.py "$layers" "$hidden" "$heads" \
    "$seq" "$vocab" "$batch" "$steps" > "$work/torch.log"
  local theirs; theirs=$(sed -n 's/.*tokens_per_s=\([0-9.]*\).*/\1/p' "$work/torch.log")
  OPENBLAS_NUM_THREADS=1 "$python" bench/pytorch_gpt.py "$layers" "$hidden" "$heads" "$seq" "$vocab" "$batch" \
    "$steps" > "$work/torch1.log"
  local single; single=$(sed -n 's/.*tokens_per_s=\([0-9.]*\).*/\1/p' "$work/torch1.log")
  local best; best=$(echo "if ($theirs > $single) $theirs else $single" | bc -l)
  printf '| %s | %d x %d, %d, %d | %s | %.0f | %.0f | %.2f | %d | %d |\n' "$name" "$layers" "$hidden" "$seq" \
    "$batch" "$ours" "$theirs" "$single" "$(echo "$ours / $best" | bc -l)" $(( $(cat "$work/ours.rss") / 1024 )) \
    $(( $(cat "$work/torch.rss") / 1024 ))
}
run_case tiny 4 128 4 128 256 8
run_case small-6L 6 384 6 256 256 4
run_case gpt2-124m 12 768 12 256 50257 4
