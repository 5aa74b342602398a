#!/usr/bin/env python3
"""pipeline.flushless (PipeDream-2BW): N ranks follow the single-rank run,
and the gradients are one update stale.

1. Staleness, against synchronous training (an independent run of the
   same binary without the mode): step 1 and step 2 both read the initial
   weights, so
   - step 1's loss equals the synchronous step 1's bit for bit (same batch,
     same weights);
   - step 2's loss equals that of a synchronous run whose first update is
     negligible (learning rate 1e-12: the loss of batch 2 at the initial
     weights), and differs from the synchronous step 2's (which reads the
     updated weights).
2. Layouts: the flushless run alone (one stage) against pipelines of 2 and
   4 stages and 2 x 2 (pipelines with replicas summing every step, with
   and without buckets), with forwards run further ahead
   (pipeline.flushless_ahead), the same global batch; the validation every 5
   steps drains the stream and starts it again, so restarts are covered.
   Every step's loss and the final validation loss within 1e-5 (the
   replicas' sum changes the order of additions, as in
   check_trajectories.py).
3. Local steps: 2 replicas of 2 stages against 2 replicas of one stage.
4. Bad input exits 2 with the key named: GPipe, fewer micro-batches than
   stages, checkpoints.

usage: check_flushless.py GEOTRAIN CONFIG -- MPIRUN...
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "support"))
from conclude import conclude  # noqa: E402
from training_script import arguments_and_mpirun, short_run_flags, train_records  # noqa: E402

TOLERANCE = 1e-5
initial = []  # every run's validation loss before training
STEPS = 12
GLOBAL_MICRO_BATCHES = 8


def run(command, expect=0):
    if expect != 0:
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        if done.returncode != expect:
            sys.exit(f"FAILED (exit {done.returncode}, expected {expect}): {' '.join(command)}\n"
                     f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        return done.stderr
    finished = train_records(command, STEPS)
    initial.append(finished.end["initial_validation_loss"])
    return finished.losses, finished.end["final_validation_loss"]


def worst_difference(run_a, run_b):
    (losses_a, final_a), (losses_b, final_b) = run_a, run_b
    pairs = list(zip(losses_a, losses_b)) + [(final_a, final_b)]
    return max(abs(a - b) / max(abs(b), 1e-30) for a, b in pairs)


def main():
    (geotrain, config), mpirun = arguments_and_mpirun()
    common = short_run_flags(config, STEPS, 4) + ["--train.eval_every_steps=5"]
    alone = [geotrain, "train", *common, "--pipeline.stages=1"]
    failures = []

    reference = run([*alone, "--pipeline.flushless=true", f"--train.gradient_accumulation={GLOBAL_MICRO_BATCHES}"])
    synchronous = run([*alone, f"--train.gradient_accumulation={GLOBAL_MICRO_BATCHES}"])
    frozen = run([*alone, f"--train.gradient_accumulation={GLOBAL_MICRO_BATCHES}", "--optimizer.learning_rate=1e-12"])
    losses, sync_losses, frozen_losses = reference[0], synchronous[0], frozen[0]
    print(f"alone: flushless steps 1, 2 = {losses[0]:.8f}, {losses[1]:.8f}; synchronous {sync_losses[0]:.8f}, "
          f"{sync_losses[1]:.8f}; synchronous at learning rate 1e-12: step 2 {frozen_losses[1]:.8f}")
    if losses[0] != sync_losses[0]:
        failures.append(f"step 1 reads the initial weights in both modes: {losses[0]} vs {sync_losses[0]}")
    if abs(losses[1] - frozen_losses[1]) > 1e-6 * abs(frozen_losses[1]):
        failures.append(f"step 2 must read the initial weights: {losses[1]} vs {frozen_losses[1]} (learning rate 1e-12)")
    if abs(losses[1] - sync_losses[1]) < 1e-4 * abs(sync_losses[1]):
        failures.append(f"step 2 equals the synchronous step 2 ({losses[1]}): its gradient is not stale")
    if not reference[1] < 0.9 * initial[0]:
        failures.append(f"the flushless run does not learn: final validation loss {reference[1]}")

    for pp, dp, extra in ((2, 1, []), (4, 1, []), (4, 1, ["--pipeline.flushless_ahead=1"]),
                          (2, 2, ["--network.gradient_bucket_mb=0"]),
                          (2, 2, ["--network.gradient_bucket_mb=0.0625", "--pipeline.flushless_ahead=2"])):
        command = [*mpirun, "-n", str(pp * dp), geotrain, "train", *common, f"--pipeline.stages={pp}",
                   f"--train.gradient_accumulation={GLOBAL_MICRO_BATCHES // dp}", "--pipeline.flushless=true",
                   "--pipeline.placement=rank-order", *extra]
        worst = worst_difference(run(command), reference)
        print(f"flushless {pp} stages x {dp} replicas {' '.join(extra)}: max relative difference {worst:.2e} "
              f"{'ok' if worst <= TOLERANCE else 'MISMATCH'}")
        if worst > TOLERANCE:
            failures.append(f"{pp} x {dp} {extra}: differs from the single-rank flushless run by {worst:.2e}")

    local = ["--outer.local_steps=3", "--pipeline.flushless=true", "--pipeline.placement=rank-order",
             f"--train.gradient_accumulation={GLOBAL_MICRO_BATCHES // 2}"]
    whole = run([*mpirun, "-n", "2", geotrain, "train", *common, "--pipeline.stages=1", *local])
    piped = run([*mpirun, "-n", "4", geotrain, "train", *common, "--pipeline.stages=2", *local])
    worst = worst_difference(piped, whole)
    print(f"local steps, 2 replicas: 2 stages vs one, max relative difference {worst:.2e}")
    if worst > TOLERANCE:
        failures.append(f"local steps: 2 stages differ from one by {worst:.2e}")

    for flags, key in ((["--pipeline.schedule=gpipe"], "pipeline.flushless"),
                       (["--train.gradient_accumulation=2", "--pipeline.stages=4"], "train.gradient_accumulation"),
                       (["--checkpoint.dir=unused-flushless-checkpoints"], "checkpoint.dir")):
        stderr = run([geotrain, "train", *common, "--pipeline.flushless=true", *flags], expect=2)
        if key not in stderr or stderr.count("\n") > 1:
            failures.append(f"{flags}: expected one line naming {key}, got: {stderr!r}")
    conclude(failures, "the flushless pipeline follows the single-rank run; its gradients are one update stale")


if __name__ == "__main__":
    main()
