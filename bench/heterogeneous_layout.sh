#!/usr/bin/env bash
# The layout search's uneven split and idle ranks, measured: ranks made
# slower with emulation.compute_slowdown (emulation only: a rank sleeps
# (factor - 1) x each forward and backward, so identical CPUs act as mixed
# devices), the tiny model with more layers, the same global batch (16
# sequences of 128 tokens) and seed in every case; each case trains STEPS
# steps and reports its steady step time, tokens/s and compute utilisation
# (compute, the emulated slowdown included, over wall time; mean over the
# training ranks). Writes one log per case and a JSON summary.
#
#   bash bench/heterogeneous_layout.sh [OUT.json]   (build/release, mpirun)
#
# Environment: STEPS (30), CASES (names below).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/bench-heterogeneous/summary.json}
steps=${STEPS:-30}
work=$(dirname "$out")
mkdir -p "$work"
geotrain=build/release/geotrain
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
mpirun=(mpirun --oversubscribe --mca btl self,vader,tcp --mca pml ob1 --mca mpi_yield_when_idle 1)
common=(inputs/quickstart.toml --train.steps="$steps" --optimizer.warmup_steps=2 --train.eval_every_steps=0
  --train.eval_batches=2 --train.log_every_steps=10 --checkpoint.dir= --timing.file= --train.metrics_file=
  --train.micro_batch_sequences=2)
# Two ranks (one per core), rank 1 three times slower, 8 layers.
two=("${mpirun[@]}" -n 2 "$geotrain" train "${common[@]}" --model.layers=8 --train.gradient_accumulation=8
  --pipeline.stages=2 --emulation.compute_slowdown=[1,3])
# Four ranks (two per core), rank 3 four times slower, 12 layers.
four=("${mpirun[@]}" -n 4 "$geotrain" train "${common[@]}" --model.layers=12 --emulation.compute_slowdown=[1,1,1,4])
declare -A commands=(
  [two-even]="${two[*]} --pipeline.placement=rank-order"
  [two-planned-split]="${two[*]} --pipeline.placement=rank-order --pipeline.layers_per_stage=[6,2]"
  [two-auto]="${two[*]} --pipeline.layout=auto"
  [four-dtfm-4x1-even]="${four[*]} --pipeline.stages=4 --train.gradient_accumulation=8"
  [four-dtfm-2x2-even]="${four[*]} --pipeline.stages=2 --train.gradient_accumulation=4"
  [four-auto]="${four[*]} --pipeline.stages=4 --train.gradient_accumulation=8 --pipeline.layout=auto")
cases=${CASES:-"two-even two-planned-split two-auto four-dtfm-4x1-even four-dtfm-2x2-even four-auto"}
for name in $cases; do
  echo "== $name"
  # shellcheck disable=SC2086  # the command is words
  ${commands[$name]} > "$work/$name.log" 2>&1
  tail -3 "$work/$name.log"
done
/usr/bin/python3 - "$work" "$out" $cases <<'PY'
import json, re, sys
work, out, names = sys.argv[1], sys.argv[2], sys.argv[3:]
summary = {}
for name in names:
    text = open(f"{work}/{name}.log").read()
    steps = [float(m) for m in re.findall(r"^step +\d+/\d+ \|.*?\| +([\d.]+) ms \|", text, re.M)]
    end = re.search(r"final validation loss ([\d.]+) .*?, (\d+) tokens/s, compute utilisation ([\d.]+)% "
                    r"\(mean over ranks; lowest ([\d.]+)%", text)
    layout = re.search(r"^layout \(auto\): (.*?); predicted ([\d.e+-]+) s per step", text, re.M)
    per_step = re.search(r"^time per step \(mean over (\d+) ranks\): ([\d.]+) ms", text, re.M)
    pipelines = re.findall(r"^  pipeline \d+: ranks (.*)$", text, re.M)
    summary[name] = {
        "step_ms": float(per_step.group(2)) if per_step else None,
        "training_ranks": int(per_step.group(1)) if per_step else None,
        "logged_step_ms": steps,
        "tokens_per_s": int(end.group(2)) if end else None,
        "utilisation_mean": float(end.group(3)) / 100 if end else None,
        "utilisation_min": float(end.group(4)) / 100 if end else None,
        "final_validation_loss": float(end.group(1)) if end else None,
        "layout": layout.group(1) if layout else None,
        "predicted_step_s": float(layout.group(2)) if layout else None,
        "pipelines": [re.sub(r" \([^)]*\)", "", p) for p in pipelines],
        "idle": re.findall(r"^geotrain: rank (\d+) \(host [^)]*\): idle:", text, re.M),
    }
json.dump(summary, open(out, "w"), indent=1)
print(f"wrote {out}")
PY
