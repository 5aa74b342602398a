# Sourced by the convergence benches (compression.sh, activation_storage.sh):
# one case on the 4-rank quickstart layout (2 stages x 2 replicas, the
# shipped corpus, seed 1; the same tokens in the same order whatever the
# options), validated 5 times, every replica checked identical at the end.
#
#   convergence_case WORK MODEL STEPS NAME [GEOTRAIN OPTIONS...]
#
# Writes WORK/MODEL-NAME.jsonl (metrics), .log and .err; prints one line:
# final validation loss, mean training loss of the last 10 steps, tokens/s,
# mean compute utilisation.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1

convergence_case() {
  local work=$1 model=$2 steps=$3 name=$4
  shift 4
  local metrics=$work/$model-$name.jsonl
  rm -f "$metrics"
  mpirun --oversubscribe --mca btl self,vader,tcp --mca pml ob1 --mca mpi_yield_when_idle 1 -n 4 \
    build/release/geotrain train inputs/quickstart.toml --model.file="inputs/models/$model.toml" \
    --train.steps="$steps" --train.eval_every_steps=$((steps / 5)) --train.log_json=true \
    --train.metrics_file="$metrics" --checkpoint.dir= --timing.file= "$@" \
    > "$work/$model-$name.log" 2> "$work/$model-$name.err"
  /usr/bin/python3 - "$metrics" <<'PY'
import json, sys
records = [json.loads(line) for line in open(sys.argv[1])]
steps = [r["loss"] for r in records if r["event"] == "step"]
end = [r for r in records if r["event"] == "end"][0]
assert end["replicas_identical"], f"{sys.argv[1]}: the replicas differ at the end"
print(end["final_validation_loss"], sum(steps[-10:]) / 10, end["tokens_per_s"], end["compute_utilisation_mean"])
PY
}
