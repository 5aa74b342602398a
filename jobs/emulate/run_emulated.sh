# What the emulation experiments share, sourced by each from the repository
# root. `start_experiment OUT DEFAULT_STEPS [STEPS]`: $out and $steps (STEPS,
# else DEFAULT_STEPS), the folder made, one OpenMP thread per rank.
start_experiment() {
  out=$1
  steps=${3:-$2}
  mkdir -p "$out"
  export OMP_NUM_THREADS=1
}
# The world-wide scenario's four sites, two ranks each, the bandwidth x0.05.
# shellcheck disable=SC2034  # for the experiments that source this file
world_wide_file=inputs/scenarios/world-wide.toml
# shellcheck disable=SC2034
world_wide_sites="--sites Oregon,Virginia,Tokyo,London --devices 2,2,2,2 --bandwidth-scale 0.05"

# The one training run: `run NAME SCENARIO_FILE "EMULATE OPTIONS" PLACEMENT
# SCHEDULE SUFFIX [GEOTRAIN OPTIONS...]` trains inputs/models/emulation.toml
# as 4 stages x 2 replicas in jobs/emulate/emulate.py's emulated network and
# writes $out/NAME-PLACEMENTSUFFIX.h5 and, beside it, -traffic.json: the
# bytes the emulated router carried between every pair of ranks (needs $out
# and $steps). Later GEOTRAIN OPTIONS override earlier ones (e.g. the stages).
run() {
  local name=$1 file=$2 options=$3 placement=$4 schedule=$5 suffix=$6
  shift 6
  echo "== $name, $placement, $schedule${suffix:+ ($suffix)}"
  # shellcheck disable=SC2086  # options are words
  python3 jobs/emulate/emulate.py run "$file" $options --matrix-out "$out/$name-matrix.toml" --timeout 900 \
    --traffic-out "$out/$name-$placement$suffix-traffic.json" -- \
    "$PWD/build/release/geotrain" train "$PWD/inputs/quickstart.toml" --pipeline.stages=4 \
    --model.file="$PWD/inputs/models/emulation.toml" --pipeline.schedule="$schedule" \
    --pipeline.placement="$placement" --network.matrix="$PWD/$out/$name-matrix.toml" \
    --train.steps="$steps" --optimizer.warmup_steps=2 --train.log_every_steps=1 --train.eval_every_steps=0 \
    --train.eval_batches=1 --checkpoint.dir= --network.deadline_s=600 \
    --timing.file="$PWD/$out/$name-$placement$suffix.h5" "$@" 2>&1 | grep -E "^(plan|  pipeline|time per step|emulate:)" || true
  [[ -f $out/$name-$placement$suffix.h5 ]] || { echo "$0: $name $placement $schedule$suffix wrote no timing file" >&2; exit 1; }
}
