#!/usr/bin/env bash
# The sbatch scripts on a real single-node Slurm (jobs/slurm/local-cluster.sh):
#  1. train.sbatch, 4 tasks by srun: pre-empted with SIGTERM mid-run (as
#     --signal does before the time limit), it checkpoints, requeues itself
#     and the second run resumes from the checkpoint to the last step; the
#     log, both timing files and the final checkpoint are checked;
#  2. train.sbatch with the mpirun fallback, 4 tasks, a few steps;
#  3. plan.sbatch on a paper scenario: its JSON plan is read back;
#  4. a job resubmitted under the same name (not a requeue) resumes from the
#     first one's checkpoint, and the user's own --timing.file wins over the
#     script's default.
# Every wait is a bounded loop; the daemons are stopped on any exit.
# usage: check_slurm_jobs.sh SCRATCH_DIR PYTHON (run from the repository root, as root)
set -uo pipefail
scratch=$(realpath -m "${1:?usage: check_slurm_jobs.sh SCRATCH_DIR PYTHON}")
python=${2:?python with h5py}
repo=$PWD
rm -rf "$scratch"
mkdir -p "$scratch"
trap 'bash "$repo/jobs/slurm/local-cluster.sh" stop "$scratch/cluster"' EXIT
fail() {
  echo "FAIL: $*"
  for f in "$scratch"/work/runs/*.out "$scratch"/cluster/log/slurmctld.log; do [[ -f $f ]] && { echo "--- $f"; tail -30 "$f"; }; done
  exit 1
}

eval "$(bash "$repo/jobs/slurm/local-cluster.sh" start "$scratch/cluster")" || fail "the local cluster did not start"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
# A submission folder of its own (its runs/ is what the jobs write), with
# the repository's build and inputs.
work=$scratch/work
mkdir -p "$work/runs"
ln -s "$repo/build" "$repo/inputs" "$work/"
export GEOTRAIN_HOME=$work

state() { scontrol show job "$1" 2>/dev/null | grep -oE 'JobState=[A-Z_]+' | cut -d= -f2; }
restarts() { scontrol show job "$1" 2>/dev/null | grep -oE 'Restarts=[0-9]+' | cut -d= -f2; }
wait_for() {  # JOB STATE SECONDS
  for _ in $(seq $((2 * $3))); do
    case $(state "$1") in
      "$2") return 0 ;;
      FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY) fail "job $1 ended $(state "$1")" ;;
    esac
    sleep 0.5
  done
  fail "job $1 not $2 within $3 s (now $(state "$1"))"
}

# 1. Pre-emption and requeue.
steps=40
job=$(sbatch --parsable --ntasks=4 --job-name=requeue --chdir="$work" "$repo/jobs/slurm/train.sbatch" inputs/quickstart.toml \
        --train.steps=$steps --train.log_every_steps=1 --train.eval_every_steps=0 --train.eval_batches=2 \
        --checkpoint.every_steps=1000) || fail "sbatch refused train.sbatch"
out=$work/runs/requeue-$job.out
for _ in $(seq 240); do
  grep -q "^step     8/" "$out" 2>/dev/null && break
  [[ $(state "$job") == FAILED ]] && fail "job $job failed"
  sleep 0.5
done
grep -q "^step     8/" "$out" || fail "job $job: no step 8 within 120 s"
scancel --signal=TERM "$job"
for _ in $(seq 240); do [[ $(restarts "$job") == 1 ]] && break; sleep 0.5; done
[[ $(restarts "$job") == 1 ]] || fail "job $job was not requeued after SIGTERM"
wait_for "$job" COMPLETED 300
stopped=$(sed -n 's/^geotrain: stopped by SIGTERM after step \([0-9]*\);.*/\1/p' "$out")
[[ -n $stopped ]] || fail "no 'stopped by SIGTERM' line in $out"
# A checkpoint is step_N.h5 (one file) or step_N/ (sharded, the default under several ranks).
grep -Eq "resumed from runs/requeue/checkpoints/step_$(printf %08d "$stopped")(\.h5)? after step $stopped" "$out" \
  || fail "the requeued run did not resume from step $stopped"
grep -q "^final validation loss" "$out" || fail "no final validation loss"
[[ $(grep -c "^final validation loss" "$out") == 1 ]] || fail "a final validation loss printed by the stopped run"
"$python" - "$work/runs/requeue" "$stopped" "$steps" "$job" <<'PY' || fail "job $job's HDF5 files"
import sys, h5py
run, stopped, steps, job = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
with h5py.File(f"{run}/timing-{job}-0.h5") as f:
    assert int(f.attrs["ranks"]) == 4 and int(f.attrs["first_step"]) == 0, "timing-0.h5 attributes"
    assert list(f["steps/step"][()]) == list(range(1, stopped + 1)), "timing-0.h5 steps"
with h5py.File(f"{run}/timing-{job}-1.h5") as f:
    assert int(f.attrs["first_step"]) == stopped, "timing-1.h5 first_step"
    assert list(f["steps/step"][()]) == list(range(stopped + 1, steps + 1)), "timing-1.h5 steps"
    assert f["steps/wall_time"].shape == (4, steps - stopped), "timing-1.h5 wall_time"
import os
final = f"{run}/checkpoints/step_{steps:08d}"
with h5py.File(final + ".h5" if os.path.exists(final + ".h5") else final + "/manifest.h5") as f:
    assert int(f.attrs["completed_steps"]) == steps, "final checkpoint"
print(f"job files ok: stopped after {stopped}, resumed, finished {steps}")
PY
echo "ok: train.sbatch pre-empted after step $stopped, requeued, resumed, completed (job $job)"

# 2. The mpirun fallback.
job=$(GEOTRAIN_LAUNCHER=mpirun sbatch --parsable --ntasks=4 --chdir="$work" "$repo/jobs/slurm/train.sbatch" \
        inputs/quickstart.toml --train.steps=3 --train.eval_batches=2 --optimizer.warmup_steps=1) || fail "sbatch (mpirun)"
wait_for "$job" COMPLETED 180
grep -q "via mpirun" "$work/runs/geotrain-$job.out" && grep -q "^final validation loss" "$work/runs/geotrain-$job.out" \
  || fail "job $job (mpirun) did not train"
echo "ok: train.sbatch with mpirun (job $job)"

# 3. The planner job.
job=$(sbatch --parsable --chdir="$work" "$repo/jobs/slurm/plan.sbatch" inputs/scenarios/world-wide.toml \
        --candidates 200 --no-baselines) || fail "sbatch refused plan.sbatch"
wait_for "$job" COMPLETED 120
"$python" -c "import json,sys; p=json.load(open(sys.argv[1])); assert p" "$work/runs/geotrain-plan-$job.json" \
  || fail "runs/geotrain-plan-$job.json is not a JSON plan"
echo "ok: plan.sbatch (job $job)"
[[ $(grep -c "^Pipeline" "$work/runs/geotrain-plan-$job.out") == 1 ]] || fail "plan.sbatch did not search exactly once"

# 4. Resubmission resumes; the user's settings win.
short=(inputs/quickstart.toml --train.eval_batches=2 --optimizer.warmup_steps=1 --checkpoint.every_steps=2)
first=$(sbatch --parsable --ntasks=2 --job-name=resubmit --chdir="$work" "$repo/jobs/slurm/train.sbatch" "${short[@]}" \
          --train.steps=4 --timing.file=runs/mine.h5) || fail "sbatch (first submission)"
wait_for "$first" COMPLETED 180
[[ -f $work/runs/mine.h5 && ! -e $work/runs/resubmit/timing-$first-0.h5 ]] || fail "the user's --timing.file did not win"
second=$(sbatch --parsable --ntasks=2 --job-name=resubmit --chdir="$work" "$repo/jobs/slurm/train.sbatch" "${short[@]}" \
           --train.steps=6) || fail "sbatch (resubmission)"
wait_for "$second" COMPLETED 180
grep -Eq "resumed from runs/resubmit/checkpoints/step_00000004(\.h5)? after step 4" "$work/runs/resubmit-$second.out" \
  || fail "the resubmitted job $second did not resume from job $first's checkpoint"
grep -q "^step     6/6" "$work/runs/resubmit-$second.out" || fail "the resubmitted job did not reach step 6"
echo "ok: a resubmitted job resumes; the user's settings win (jobs $first, $second)"
