#!/usr/bin/env python3
"""A rank that stops answering in the middle of training (SIGSTOP: a hung
process or an unreachable host, not a crash the launcher would see) makes the
others exit within the deadline, non-zero, with a message naming it.

usage: stop_rank_mid_training.py GEOTRAIN CONFIG RANKS STAGES SILENT_RANK DEADLINE_S -- MPIRUN...
"""
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid


def pid_of_rank(marker, rank):
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if f"GEOTRAIN_TEST_MARKER={marker}".encode() in env and f"OMPI_COMM_WORLD_RANK={rank}".encode() in env:
            return int(pid)
    return None


def main():
    separator = sys.argv.index("--")
    geotrain, config, ranks, stages, silent, deadline = sys.argv[1:separator]
    mpirun = sys.argv[separator + 1:]
    marker = uuid.uuid4().hex
    env = dict(os.environ, GEOTRAIN_TEST_MARKER=marker)
    command = [*mpirun, "-n", ranks, geotrain, "train", config, "--train.steps=100000",
               "--train.log_every_steps=1", "--train.log_json=true", "--train.eval_every_steps=0",
               f"--pipeline.stages={stages}", f"--network.deadline_s={deadline}", "--optimizer.warmup_steps=1",
               "--checkpoint.dir="]  # no checkpoints: parallel tests share the working directory
    job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    stopped = None
    try:
        for line in job.stdout:  # wait until training runs: the third step has been reported
            if line.startswith("{") and json.loads(line).get("step") == 3:
                break
        else:
            sys.exit(f"FAILED: training never reached step 3: {job.stderr.read()}")
        stopped = pid_of_rank(marker, silent)
        if stopped is None:
            sys.exit(f"FAILED: no process of rank {silent} found")
        os.kill(stopped, signal.SIGSTOP)
        start = time.monotonic()
        try:
            _, stderr = job.communicate(timeout=float(deadline) + 60)
        except subprocess.TimeoutExpired:
            sys.exit(f"FAILED: the job still runs {float(deadline) + 60:.0f} s after rank {silent} stopped (a hang)")
        elapsed = time.monotonic() - start
    finally:
        if stopped is not None:
            for sig in (signal.SIGKILL, signal.SIGCONT):
                try:
                    os.kill(stopped, sig)
                except ProcessLookupError:
                    pass
        if job.poll() is None:
            job.kill()
    named = re.search(rf"no answer from (rank {silent}\b|the other ranks .*\(waiting for ranks? ([0-9, ]*, )?{silent}\b)", stderr)
    print(f"rank {silent} stopped; job exited {job.returncode} after {elapsed:.1f} s (deadline {deadline} s)")
    print("\n".join(l for l in stderr.splitlines() if "geotrain" in l))
    if job.returncode == 0:
        sys.exit("FAILED: the job exited 0")
    if not named:
        sys.exit(f"FAILED: no message names rank {silent}")
    if elapsed > float(deadline) + 10:
        sys.exit(f"FAILED: took {elapsed:.1f} s, more than the deadline + 10 s")
    print("ok")


if __name__ == "__main__":
    main()
