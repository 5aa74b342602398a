#!/usr/bin/env bash
# Convergence of local steps (outer.local_steps, DiLoCo) against synchronous
# training: the same model, tokens, seed and layout (4 ranks under mpirun:
# 2 stages x 2 replicas, each replica a whole pipeline), once per case; the
# validation loss at equal tokens (every 50 steps: right after an outer step
# for H = 10 and 50 unstreamed, when the replicas agree) and the data-parallel
# bytes each case sends per step. Writes one metrics file per case and a
# JSON summary that analysis/low_communication_report.py turns into tables
# and plots.
#
#   bash bench/local_steps.sh [OUT.json]   (build/release, mpirun, /usr/bin/python3)
#
# Environment: MODEL (inputs/models/NAME.toml, tiny), STEPS (300), CASES (names below);
# LAYOUT=whole8: 8 ranks, each a whole model (8 replicas of one micro-batch
# of 2 sequences: the same 16 sequences per step), the emulation's fastest
# layout (jobs/emulate/local_steps.sh's pp1 runs); SEQUENCES (2) sets each
# whole-model replica's sequences per step (4: 32 per step, the layout of the
# longer utilisation runs). LAYOUT=inside8: 8 ranks, 2 stages x 4 replicas
# of 4 micro-batches of 1 sequence (16 per step), the pipelines-inside-sites
# layout of the emulation (its -inside runs); there SEQUENCES (4) sets each
# replica's micro-batches of 1 sequence (16: 64 per step, the emulation's
# -inside-s16 runs). LAYOUT=pipelines4x2: 8 ranks, 4 stages x 2 replicas,
# each SEQUENCES (8) micro-batches of 1 sequence (16 per step): the layout the
# planner picks with local steps on the emulation (its planned-m8 runs;
# SEQUENCES=32: 64 per step, its tokyo-london runs). LAYOUT=pipelines2x2: 4
# ranks, 2 stages x 2 replicas of SEQUENCES (8) micro-batches of 1 sequence
# (SEQUENCES=32: the emulation's tokyo-london-4 runs). The flushless cases
# (pipeline.flushless: gradients one update stale) are the emulation's
# flushless runs.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/bench-local-steps/summary.json}
model=${MODEL:-tiny}
steps=${STEPS:-300}
cases=${CASES:-"sync H10 H10-momentum0.9 H10-int8 H10-F5-int4 H20-int8 H40-int8 H50 H50-int8"}
# Outer step: learning rate 0.7 (the default), Nesterov momentum as the case
# says (0.5 where the name does not; the default, DiLoCo's 0.9, wins only in
# long runs).
declare -A options=([sync]="" [H10]="--outer.local_steps=10 --outer.momentum=0.5"
  [H10-momentum0.9]="--outer.local_steps=10 --outer.momentum=0.9"
  [H10-int8]="--outer.local_steps=10 --compression.gradients=int8 --outer.momentum=0.5"
  [H10-F5-int4]="--outer.local_steps=10 --outer.fragments=5 --compression.gradients=int4 --outer.momentum=0.5"
  [H20-int8]="--outer.local_steps=20 --compression.gradients=int8 --outer.momentum=0.5"
  [H40-int8]="--outer.local_steps=40 --compression.gradients=int8 --outer.momentum=0.5"
  [H40-int4]="--outer.local_steps=40 --compression.gradients=int4 --outer.momentum=0.5"
  [H20-int8-averaged]="--outer.local_steps=20 --compression.gradients=int8 --outer.learning_rate=1 --outer.momentum=0"
  [H20-int8-momentum0.3]="--outer.local_steps=20 --compression.gradients=int8 --outer.momentum=0.3"
  [H20-int8-inner-lr3.5e-4]="--outer.local_steps=20 --compression.gradients=int8 --optimizer.learning_rate=3.5e-4 --outer.momentum=0.5"
  [H20-int8-momentum0.9]="--outer.local_steps=20 --compression.gradients=int8 --outer.momentum=0.9"
  [H20-int8-lr1-momentum0.9]="--outer.local_steps=20 --compression.gradients=int8 --outer.learning_rate=1 --outer.momentum=0.9"
  [H40-int8-momentum0.9]="--outer.local_steps=40 --compression.gradients=int8 --outer.momentum=0.9"
  [H20-int8all-momentum0.9]="--outer.local_steps=20 --compression.gradients=int8 --compression.activations=int8 --compression.activation_gradients=int8 --outer.momentum=0.9"
  [H20-F5-int4all-momentum0.9]="--outer.local_steps=20 --outer.fragments=5 --compression.gradients=int4 --compression.activations=int4 --compression.activation_gradients=int4 --outer.momentum=0.9"
  [H20-F5-int4-momentum0.9]="--outer.local_steps=20 --outer.fragments=5 --compression.gradients=int4 --outer.momentum=0.9"
  [H20-F5-int4-act8-momentum0.9]="--outer.local_steps=20 --outer.fragments=5 --compression.gradients=int4 --compression.activations=int8 --compression.activation_gradients=int8 --outer.momentum=0.9"
  [H10-F5-int4-momentum0.9]="--outer.local_steps=10 --outer.fragments=5 --compression.gradients=int4 --outer.momentum=0.9"
  [H10-F5-int4-act8-momentum0.9]="--outer.local_steps=10 --outer.fragments=5 --compression.gradients=int4 --compression.activations=int8 --compression.activation_gradients=int8 --outer.momentum=0.9"
  [H10-int8-momentum0.9]="--outer.local_steps=10 --compression.gradients=int8 --outer.momentum=0.9"
  [H20-int8-lr0.5-momentum0.9]="--outer.local_steps=20 --compression.gradients=int8 --outer.learning_rate=0.5 --outer.momentum=0.9"
  [H20-F5-int4-lr1-momentum0.9]="--outer.local_steps=20 --outer.fragments=5 --compression.gradients=int4 --outer.learning_rate=1 --outer.momentum=0.9"
  [H40-F5-int4-act8-momentum0.9]="--outer.local_steps=40 --outer.fragments=5 --compression.gradients=int4 --compression.activations=int8 --compression.activation_gradients=int8 --outer.momentum=0.9"
  [H40-F5-int4-momentum0.9]="--outer.local_steps=40 --outer.fragments=5 --compression.gradients=int4 --outer.momentum=0.9"
  [H4-F4-int4-averaged]="--outer.local_steps=4 --outer.fragments=4 --compression.gradients=int4 --outer.learning_rate=1 --outer.momentum=0"
  [H8-F4-int4-averaged]="--outer.local_steps=8 --outer.fragments=4 --compression.gradients=int4 --outer.learning_rate=1 --outer.momentum=0"
  [H20-F5-int8-momentum0.9]="--outer.local_steps=20 --outer.fragments=5 --compression.gradients=int8 --outer.momentum=0.9"
  [H20-int8-lr0.85-momentum0.9]="--outer.local_steps=20 --compression.gradients=int8 --outer.learning_rate=0.85 --outer.momentum=0.9"
  [H30-int8-momentum0.9]="--outer.local_steps=30 --compression.gradients=int8 --outer.momentum=0.9"
  [H20-int8-act8-momentum0.9]="--outer.local_steps=20 --compression.gradients=int8 --compression.activations=int8 --compression.activation_gradients=int8 --outer.momentum=0.9"
  [S20-H20-F5-int4-act8-momentum0.9]="--outer.synchronous_steps=20 --outer.local_steps=20 --outer.fragments=5 --compression.gradients=int4 --compression.activations=int8 --compression.activation_gradients=int8 --outer.momentum=0.9"
  [S50-H20-F5-int4-act8-momentum0.9]="--outer.synchronous_steps=50 --outer.local_steps=20 --outer.fragments=5 --compression.gradients=int4 --compression.activations=int8 --compression.activation_gradients=int8 --outer.momentum=0.9"
  [S100-H20-F5-int4-act8-momentum0.9]="--outer.synchronous_steps=100 --outer.local_steps=20 --outer.fragments=5 --compression.gradients=int4 --compression.activations=int8 --compression.activation_gradients=int8 --outer.momentum=0.9"
  [S50-H20-int8-act8-momentum0.9]="--outer.synchronous_steps=50 --outer.local_steps=20 --compression.gradients=int8 --compression.activations=int8 --compression.activation_gradients=int8 --outer.momentum=0.9"
  [S100-H20-int8-act8-momentum0.9]="--outer.synchronous_steps=100 --outer.local_steps=20 --compression.gradients=int8 --compression.activations=int8 --compression.activation_gradients=int8 --outer.momentum=0.9"
  [H50]="--outer.local_steps=50 --outer.momentum=0.5" [H50-int8]="--outer.local_steps=50 --compression.gradients=int8 --outer.momentum=0.5"
  [flushless]="--pipeline.flushless=true"
  [flushless-lr5e-4]="--pipeline.flushless=true --optimizer.learning_rate=5e-4"
  [flushless-int8all]="--pipeline.flushless=true --compression.gradients=int8 --compression.activations=int8 --compression.activation_gradients=int8"
  [H20-int8all-momentum0.9-flushless]="--pipeline.flushless=true --outer.local_steps=20 --compression.gradients=int8 --compression.activations=int8 --compression.activation_gradients=int8 --outer.momentum=0.9")
geotrain=build/release/geotrain
work=$(dirname "$out")
mkdir -p "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
ranks=4 stages=2 layout=() sequences_per_step=16
if [[ ${LAYOUT:-} == whole8 ]]; then
  ranks=8 stages=1 layout=(--pipeline.stages=1 --train.gradient_accumulation=1 --train.micro_batch_sequences="${SEQUENCES:-2}")
  sequences_per_step=$((8 * ${SEQUENCES:-2}))
elif [[ ${LAYOUT:-} == inside8 ]]; then
  ranks=8 stages=2 layout=(--pipeline.stages=2 --train.gradient_accumulation="${SEQUENCES:-4}" --train.micro_batch_sequences=1)
  sequences_per_step=$((4 * ${SEQUENCES:-4}))
elif [[ ${LAYOUT:-} == pipelines4x2 ]]; then
  ranks=8 stages=4 layout=(--pipeline.stages=4 --train.gradient_accumulation="${SEQUENCES:-8}" --train.micro_batch_sequences=1)
  sequences_per_step=$((2 * ${SEQUENCES:-8}))
elif [[ ${LAYOUT:-} == pipelines2x2 ]]; then
  layout=(--pipeline.stages=2 --train.gradient_accumulation="${SEQUENCES:-8}" --train.micro_batch_sequences=1)
  sequences_per_step=$((2 * ${SEQUENCES:-8}))
fi
mpirun=(mpirun --oversubscribe --mca btl self,vader,tcp --mca pml ob1 --mca mpi_yield_when_idle 1 -n "$ranks")
entries=()
for name in $cases; do
  metrics=$work/$model-$name.jsonl
  rm -f "$metrics"
  # shellcheck disable=SC2086  # option lists are words
  "${mpirun[@]}" "$geotrain" train inputs/quickstart.toml --model.file="inputs/models/$model.toml" \
    --train.steps="$steps" --train.eval_every_steps=50 --train.log_json=true --train.metrics_file="$metrics" \
    --checkpoint.dir= --timing.file= "${layout[@]}" ${options[$name]} > "$work/$model-$name.log" 2> "$work/$model-$name.err"
  entries+=("{\"case\": \"$name\", \"options\": \"${options[$name]}\", \"metrics\": \"$(basename "$metrics")\"}")
  echo "$model $name: $(grep -o '"final_validation_loss": [0-9.]*' "$metrics")"
done
# Cases run before (CASES chose fewer this time) keep their entries.
/usr/bin/python3 - "$out" "$model" "$steps" "$ranks" "$stages" "$sequences_per_step" \
    "${STEPS:+STEPS=$STEPS }${LAYOUT:+LAYOUT=$LAYOUT }${SEQUENCES:+SEQUENCES=$SEQUENCES }bash bench/local_steps.sh" "$(date -u +%Y-%m-%d)" \
    "$(nproc --all) cores, $(lscpu | sed -n 's/^Model name: *//p')" "${entries[@]}" <<'PY'
import json, os, sys
out, model, steps, ranks, stages, sequences_per_step, command, date, machine, *entries = sys.argv[1:]
fresh = {e["case"]: e for e in map(json.loads, entries)}
cases = []
if os.path.exists(out):
    with open(out) as f:
        old = json.load(f)
    if (old.get("model"), old.get("steps"), old.get("sequences_per_step", 16)) == (model, int(steps), int(sequences_per_step)):
        cases = [fresh.pop(e["case"], e) for e in old["cases"]]  # in their order, rerun ones replaced
with open(out, "w") as f:
    json.dump({"model": model, "steps": int(steps), "ranks": int(ranks), "stages": int(stages),
               "replicas": int(ranks) // int(stages), "sequences_per_step": int(sequences_per_step), "date": date,
               "machine": machine, "command": command, "cases": cases + list(fresh.values())}, f, indent=1)
PY
echo "written: $out"
