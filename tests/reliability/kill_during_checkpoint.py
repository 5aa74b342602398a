#!/usr/bin/env python3
"""kill -9 at random moments of a run that checkpoints every step: after
every kill, the checkpoint `latest` names must load (h5py: the format's
attributes and every parameter with both moments) and geotrain must resume
from it (--checkpoint.resume=auto), never going back. Every other kill aims
at a write (a few milliseconds after a temporary file appears); the kills
that landed while a checkpoint was being written (a .tmp file left behind)
are counted. Writes are asynchronous (the default): the kills land while
training goes on beside a write. FORM (single, the default alone, sharded,
parallel or per_site) chooses checkpoint.form; a folder checkpoint's
manifest and every shard it lists must load.

With `-- MPIRUN...` the run is 2 ranks (2 stages) under that mpirun and each
kill -9 hits one rank at random (mpirun then stops the other, wherever it
is: inside a collective parallel HDF5 write, for the parallel forms).

usage: kill_during_checkpoint.py GEOTRAIN CONFIG WORKDIR [KILLS] [SEED] [FORM] [-- MPIRUN...]
"""
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

import h5py

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "analysis"))
from load_checkpoint import checkpoint_files  # noqa: E402

LATEST_NAME = r"step_(\d{8})(\.h5)?"


def fail(message):
    sys.exit("FAILED: " + message)


def check_latest(directory):
    """The step of the checkpoint `latest` names, after checking the file whole."""
    with open(os.path.join(directory, "latest")) as f:
        name = f.read().strip()
    path = os.path.join(directory, name)
    match = re.fullmatch(LATEST_NAME, name)
    if not match or not os.path.exists(path):
        fail(f"latest names '{name}', not a checkpoint in {directory}")
    try:
        root, files = checkpoint_files(path)
    except ValueError as e:
        fail(f"latest names '{name}': {e}")
    with h5py.File(root, "r") as f:
        step = int(f.attrs["completed_steps"])
    if step != int(match.group(1)):
        fail(f"{root}: completed_steps {step} does not match its name")
    names = 0
    for file in files:
        with h5py.File(file, "r") as f:
            for n in f["params"]:
                shape = f["params"][n].shape
                if f["optimizer/m"][n].shape != shape or f["optimizer/v"][n].shape != shape:
                    fail(f"{file}: {n}: moments missing or of another shape")
                f["params"][n][()]  # the bytes are readable
                names += 1
    if not names:
        fail(f"{path}: no parameters")
    return step


def temporary_files(directory):
    """The .tmp files of a write in progress (in the directory or a step folder)."""
    return [name for _, _, names in os.walk(directory) for name in names if name.endswith(".tmp")]


def rank_processes(mpirun_pid):
    """PIDs of mpirun's children (the ranks); [] once they are gone."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == mpirun_pid:
                    found.append(int(entry))
        except (OSError, ValueError, IndexError):
            continue
    return found


def main():
    argv, mpirun = sys.argv, []
    if "--" in argv:
        argv, mpirun = sys.argv[:sys.argv.index("--")], sys.argv[sys.argv.index("--") + 1:]
    geotrain, config, workdir = argv[1:4]
    kills = int(argv[4]) if len(argv) > 4 else 15
    rng = random.Random(int(argv[5]) if len(argv) > 5 else 1)
    form = argv[6] if len(argv) > 6 else "single"
    shutil.rmtree(workdir, ignore_errors=True)
    directory = os.path.join(workdir, "checkpoints")
    command = [geotrain, "train", config, f"--pipeline.stages={2 if mpirun else 1}", "--train.steps=100000",
               "--train.log_every_steps=1", "--train.eval_every_steps=0", "--train.eval_batches=1",
               "--optimizer.warmup_steps=1", f"--checkpoint.dir={directory}", "--checkpoint.every_steps=1",
               "--checkpoint.keep=2", "--checkpoint.resume=auto", f"--checkpoint.form={form}", "--timing.file="]
    if mpirun:
        command = [*mpirun, "-n", "2", *command]
    last_step, mid_write = 0, 0
    for attempt in range(kills):
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        # Wait for a new checkpoint past the last one, then kill at a random moment after it.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if process.poll() is not None:
                fail(f"attempt {attempt}: geotrain exited {process.returncode} before a checkpoint: "
                     f"{process.stderr.read().decode()}")
            latest = os.path.join(directory, "latest")
            if os.path.exists(latest):
                with open(latest) as f:
                    found = re.fullmatch(LATEST_NAME, f.read().strip())
                if found and int(found.group(1)) > last_step:
                    break
            time.sleep(0.01)
        else:
            process.kill()
            fail(f"attempt {attempt}: no new checkpoint within 120 s")
        if attempt % 2 == 0:
            time.sleep(rng.uniform(0.0, 0.4))  # anywhere in a step
        else:  # inside a write: once a temporary file shows up, a few milliseconds in
            until = time.monotonic() + 30
            while time.monotonic() < until and not temporary_files(directory):
                time.sleep(0.0005)
            time.sleep(rng.uniform(0.0, 0.01))
        if mpirun:
            ranks = rank_processes(process.pid)
            if not ranks:
                fail(f"attempt {attempt}: no rank processes under mpirun")
            os.kill(rng.choice(ranks), signal.SIGKILL)
            try:
                process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                process.kill()
                fail(f"attempt {attempt}: mpirun did not end within 120 s after a rank was killed")
        else:
            process.send_signal(signal.SIGKILL)
            process.wait()
        if temporary_files(directory):
            mid_write += 1
        step = check_latest(directory)
        if step < last_step:
            fail(f"attempt {attempt}: latest went back from step {last_step} to {step}")
        last_step = step
    # A last run resumes from what the kills left and takes a step.
    done = subprocess.run([*[a for a in command if not a.startswith("--train.steps")],
                           f"--train.steps={last_step + 1}"], capture_output=True, text=True, timeout=300)
    if done.returncode != 0 or f"after step {last_step}" not in done.stdout:
        fail(f"the final resume from step {last_step} failed (exit {done.returncode}):\n{done.stdout}\n{done.stderr}")
    print(f"ok: {kills} kills -9 ({mid_write} while a checkpoint was being written); latest always loaded; "
          f"resumed at step {last_step}")


if __name__ == "__main__":
    main()
