#!/usr/bin/env python3
"""kill -9 of one rank mid-step (a crashed process or node): the job ends
within the deadline, non-zero, naming the lost rank (geotrain's line or the
launcher's), the last checkpoint is intact, and a job with fewer ranks
resumes from it (--checkpoint.resume=auto): it probes and plans again
(2 ranks), keeps the global batch with gradient_accumulation x replicas,
and its first loss equals the killed job's loss at that step (1e-5: the
same sequences, summed in another order).

usage: kill_rank_mid_training.py GEOTRAIN CONFIG WORKDIR RANKS STAGES KILLED_RANK DEADLINE_S -- MPIRUN...
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import json
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "mpi", "training"))
from kill_during_checkpoint import check_latest, fail  # noqa: E402
from stop_rank_mid_training import pid_of_rank  # noqa: E402
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from training_script import wait_for_exit  # noqa: E402


def main():
    separator = sys.argv.index("--")
    geotrain, config, workdir, ranks, stages, killed, deadline = sys.argv[1:separator]
    mpirun = sys.argv[separator + 1:]
    shutil.rmtree(workdir, ignore_errors=True)
    directory = os.path.join(workdir, "checkpoints")
    marker = uuid.uuid4().hex
    common = [geotrain, "train", config, "--train.log_every_steps=1", "--train.log_json=true",
              "--train.eval_every_steps=0", "--train.eval_batches=1", "--optimizer.warmup_steps=1",
              f"--checkpoint.dir={directory}", "--checkpoint.every_steps=2", "--checkpoint.resume=auto",
              f"--network.deadline_s={deadline}", "--timing.file="]
    job = subprocess.Popen([*mpirun, "-n", ranks, *common, "--train.steps=100000", f"--pipeline.stages={stages}"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=dict(os.environ, GEOTRAIN_TEST_MARKER=marker))
    losses = {}

    def note_loss(line):
        record = json.loads(line) if line.startswith("{") else {}
        if record.get("event") == "step":
            losses[record["step"]] = record["loss"]
        return record.get("step") if record.get("event") == "step" else None
    try:
        for line in job.stdout:
            if note_loss(line) == 5:
                break
        else:
            fail(f"training never reached step 5: {job.stderr.read()}")
        pid = pid_of_rank(marker, killed)
        if pid is None:
            fail(f"no process of rank {killed}")
        os.kill(pid, signal.SIGKILL)
        finished = wait_for_exit(job, float(deadline) + 60)
        if finished is None:
            fail(f"the job still runs {float(deadline) + 60:.0f} s after rank {killed} was killed (a hang)")
        rest, stderr, elapsed = finished
        for line in rest.splitlines():
            note_loss(line)
    finally:
        if job.poll() is None:
            job.kill()
    print(f"rank {killed} killed; job exited {job.returncode} after {elapsed:.1f} s (deadline {deadline} s)")
    if job.returncode == 0:
        fail("the job exited 0")
    if not re.search(rf"\brank {killed}\b", stderr):
        fail(f"no message names rank {killed}:\n{stderr}")
    if elapsed > float(deadline) + 10:
        fail(f"took {elapsed:.1f} s, more than the deadline + 10 s")
    step = check_latest(directory)
    # quickstart.toml: 4 micro-batches per replica; 2 ranks as 2 stages hold 1 replica.
    replicas = int(ranks) // int(stages)
    resumed = subprocess.run([*mpirun, "-n", "2", *common, f"--train.steps={step + 1}", "--pipeline.stages=2",
                              f"--train.gradient_accumulation={4 * replicas}"],
                             capture_output=True, text=True, timeout=300)
    if resumed.returncode != 0 or f"after step {step}" not in resumed.stderr:
        fail(f"2 ranks did not resume from step {step}:\n{resumed.stdout}\n{resumed.stderr}")
    # train.log_json: the text (network, plan, notes) is on stderr.
    if "network: probed 2 ranks" not in resumed.stderr or "plan (planned): 2 stages x 1 replicas" not in resumed.stderr:
        fail(f"the resumed job did not probe and plan its 2 ranks:\n{resumed.stderr}")
    if "note: the checkpoint's run took" in resumed.stderr:
        fail(f"the resumed job reports another global batch:\n{resumed.stderr}")
    first = [r for r in map(json.loads, resumed.stdout.splitlines()) if r["event"] == "step"][0]
    if first["step"] != step + 1:
        fail(f"the resumed job's first step is {first['step']}, expected {step + 1}")
    if step + 1 in losses:
        gap = abs(first["loss"] - losses[step + 1]) / abs(losses[step + 1])
        if gap > 1e-5:
            fail(f"step {step + 1}: loss {first['loss']} after resuming on 2 ranks, {losses[step + 1]} before the "
                 f"kill (relative {gap:.1e} > 1e-5)")
        compared = f"its step {step + 1} loss {first['loss']:.6f} equals the killed job's (relative {gap:.1e})"
    else:  # the job finished one more checkpoint before the kill landed: no logged loss to compare with
        compared = f"step {step + 1} was not logged before the kill: loss not compared"
    print(f"ok: the last checkpoint (step {step}) loads; 2 ranks re-probed, re-planned and resumed from it; {compared}")


if __name__ == "__main__":
    main()
