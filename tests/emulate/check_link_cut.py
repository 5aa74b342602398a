#!/usr/bin/env python3
"""A link cut under the WAN emulator (100% loss between two pipeline peers,
both processes alive): the job ends within the deadline plus 10 s instead of
hanging, non-zero, with a line naming one of the two ranks, the emulation is
torn down, and the last checkpoint loads.

usage: check_link_cut.py GEOTRAIN WORKDIR [DEADLINE_S]  (as root)
"""
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(HERE, "..", "reliability"))
from kill_during_checkpoint import check_latest, fail  # noqa: E402
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from training_script import wait_for_exit  # noqa: E402

EMULATE = os.path.join(REPO, "jobs", "emulate", "emulate.py")
SCENARIO = os.path.join(REPO, "inputs", "scenarios", "emulation-test.toml")


def main():
    geotrain, workdir = os.path.abspath(sys.argv[1]), sys.argv[2]
    deadline = float(sys.argv[3]) if len(sys.argv) > 3 else 5.0
    shutil.rmtree(workdir, ignore_errors=True)
    directory = os.path.join(workdir, "checkpoints")
    job = subprocess.Popen(
        [sys.executable, EMULATE, "run", SCENARIO, "--timeout", "300", "--", geotrain, "train",
         os.path.join(REPO, "inputs", "quickstart.toml"), "--train.steps=100000", "--train.log_every_steps=1",
         "--train.eval_every_steps=0", "--train.eval_batches=1", "--optimizer.warmup_steps=1",
         f"--checkpoint.dir={directory}", "--checkpoint.every_steps=2", f"--network.deadline_s={deadline}",
         "--timing.file=", "--pipeline.placement=rank-order", "--network.probe_bytes=262144"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pair = None
    try:
        for line in job.stdout:
            found = re.match(r"\s*pipeline 0: ranks (\d+) \([^)]*\) -> (\d+) ", line)
            if found:
                pair = int(found.group(1)), int(found.group(2))
            if re.match(r"step\s+5/", line):
                break
        else:
            fail(f"training never reached step 5: {job.stderr.read()[-3000:]}")
        if pair is None:
            fail("no 'pipeline 0: ranks A -> B' line: which link to cut is unknown")
        subprocess.run([sys.executable, EMULATE, "cut", str(pair[0]), str(pair[1])], check=True)
        finished = wait_for_exit(job, deadline + 60)
        if finished is None:
            fail(f"the job still runs {deadline + 60:.0f} s after the link {pair[0]} <-> {pair[1]} was cut (a hang)")
        _, stderr, elapsed = finished
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    ours = [line for line in stderr.splitlines() if line.startswith("geotrain: ")]
    print(f"link {pair[0]} <-> {pair[1]} cut after step 5; the job exited {job.returncode} after {elapsed:.1f} s "
          f"(deadline {deadline:.0f} s)\n  " + "\n  ".join(ours))
    if job.returncode == 0:
        fail("the job exited 0")
    if not any(re.search(rf"\brank ({pair[0]}|{pair[1]})\b", line) for line in ours):
        fail(f"no geotrain line names rank {pair[0]} or {pair[1]}:\n{stderr[-3000:]}")
    if elapsed > deadline + 10:
        fail(f"took {elapsed:.1f} s, more than the deadline + 10 s")
    left = [n for n in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
            if n.startswith("gt-")]
    if left:
        fail(f"the emulation was not torn down: namespaces {left}")
    step = check_latest(directory)
    print(f"ok: deadline abort, not a hang; the last checkpoint (step {step}) loads")


if __name__ == "__main__":
    main()
