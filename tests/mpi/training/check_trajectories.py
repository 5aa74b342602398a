#!/usr/bin/env python3
"""N-rank training equals 1-rank training.

Runs `geotrain train` once alone with G micro-batches per step, then under
mpirun for every (pp, dp) case with G / dp micro-batches per replica (the same
global batch), for the rank-order placement and for a shuffled (random) one,
and checks that every step's loss and the final validation loss match the
single-rank run within the relative tolerance. The golden trajectory is the
single-rank run of the same binary: the claim under test is that pipelining
and data parallelism do not change the mathematics.

Overlap: the rank-order runs sum gradients after the backward
(network.gradient_bucket_mb = 0); with replicas, the same run again with
64 KiB buckets (several start during the backward) must give the same
losses bit for bit.

Tensor parallelism: a case "t x pp x dp" runs t x pp x dp ranks with
pipeline.tensor_parallel = t (units of t consecutive ranks splitting every
layer, its heads, MLP columns and vocabulary) and must follow the same
trajectory.

usage: check_trajectories.py GEOTRAIN CONFIG CASES [TRAIN FLAGS...] -- MPIRUN...
  CASES: "1x1,2x1,1x2,2x2,4x2" (pp x dp) or "2x1x1,2x2x2" (tp x pp x dp);
  TRAIN FLAGS go to every run
  (e.g. --model.lm_head=untied)
"""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "support"))
from conclude import conclude  # noqa: E402
from training_script import arguments_and_mpirun, short_run_flags, train_records  # noqa: E402

TOLERANCE = 1e-5
GLOBAL_MICRO_BATCHES = 4
STEPS = 10


def run(command):
    done = train_records(command, STEPS)  # the text (the plan) is on stderr
    pipelines = re.findall(r"^  pipeline \d+: ranks (.*)$", done.stderr, re.M)
    return done.losses, done.end["final_validation_loss"], pipelines


def relative(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def main():
    (geotrain, config, cases, *flags), mpirun = arguments_and_mpirun()
    common = short_run_flags(config, STEPS, 4) + flags
    reference, reference_final, _ = run([geotrain, "train", *common, "--pipeline.stages=1",
                                         f"--train.gradient_accumulation={GLOBAL_MICRO_BATCHES}"])
    print(f"single rank: losses {reference[0]:.6f} .. {reference[-1]:.6f}, validation {reference_final:.6f}")
    failures = []
    for case in cases.split(","):
        sizes = [int(x) for x in case.split("x")]
        tp, pp, dp = sizes if len(sizes) == 3 else [1, *sizes]
        layouts = {}
        command = [*mpirun, "-n", str(tp * pp * dp), geotrain, "train", *common, f"--pipeline.stages={pp}",
                   f"--train.gradient_accumulation={GLOBAL_MICRO_BATCHES // dp}"]
        if tp > 1:
            command.append(f"--pipeline.tensor_parallel={tp}")
        for placement, schedule in (("rank-order", "1f1b"), ("random", "gpipe")):
            buckets = ["--network.gradient_bucket_mb=0"] if placement == "rank-order" else []
            losses, final, pipelines = run([*command, f"--pipeline.placement={placement}",
                                            f"--pipeline.schedule={schedule}", *buckets])
            if placement == "rank-order" and dp > 1:
                overlapped, _, _ = run([*command, "--pipeline.placement=rank-order", "--pipeline.schedule=1f1b",
                                        "--network.gradient_bucket_mb=0.0625"])
                same = overlapped == losses
                print(f"tp={tp} pp={pp} dp={dp} rank-order 1f1b, 64 KiB buckets: losses "
                      f"{'bitwise equal' if same else 'DIFFER'} to the sum after the backward")
                if not same:
                    failures.append(f"{case} buckets: {overlapped} vs {losses}")
            layouts[placement] = pipelines
            worst = max(relative(a, b) for a, b in zip(losses, reference))
            worst = max(worst, relative(final, reference_final))
            verdict = "ok" if worst <= TOLERANCE else "MISMATCH"
            print(f"tp={tp} pp={pp} dp={dp} {placement:10s} {schedule}: pipelines {pipelines}: "
                  f"max relative difference {worst:.2e} {verdict}")
            if worst > TOLERANCE:
                failures.append(f"{case} {placement}: {losses} vs {reference}")
        if pp * dp >= 4 and layouts["random"] == layouts["rank-order"]:
            failures.append(f"{case}: the random placement equals rank order; the shuffled case tests nothing")
    conclude(failures, "all trajectories equal the single-rank run")


if __name__ == "__main__":
    main()
