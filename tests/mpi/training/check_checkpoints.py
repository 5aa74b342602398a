#!/usr/bin/env python3
"""Checkpoint and resume, end to end, on the real binary.

The golden run is the same binary trained 20 steps alone in one go (a
checkpoint every 10 steps); each case then reaches step 20 another way:

  bit-exact     alone: resume from the step-10 checkpoint, train 10 more;
                /params and /optimizer at step 20 identical bit for bit.
  sigterm       alone: SIGTERM mid-run -> exit 1 with "stopped by SIGTERM after
                step N; checkpoint ..."; `--checkpoint.resume=auto` finishes;
                identical bit for bit.
  sigint        alone: Ctrl-C (SIGINT) mid-run does the same as SIGTERM.
  cross-layout  mpirun 2 stages x 2 replicas, shuffled plan, checkpoint at step
                10; resumed on 4 stages x 2 replicas (8 ranks): losses and
                parameters within 1e-5 of the golden run.
  mpi-sigterm   mpirun 4 ranks, SIGTERM to one rank only (as a pre-emption
                notice may reach some ranks first): every rank stops with one
                checkpoint; resumed with 2 ranks (fewer) to the end, within 1e-5.
  compressed    mpirun 2 stages x 2 replicas with int8 gradients (error
                feedback): resumed from step 10 on the same layout, bit for bit
                equal to its own uninterrupted run; the same resume with the
                file's /error_feedback removed notes that the residuals restart
                and ends elsewhere (so the residuals are what makes it exact).
  interop       analysis/load_checkpoint.py (h5py + PyTorch) on the step-20
                checkpoint gives geotrain's final validation loss within 1e-5.
  interop-untied  the same with model.lm_head = untied (lm_head.weight).

usage: check_checkpoints.py CASE GEOTRAIN CONFIG WORKDIR -- MPIRUN...
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import h5py
import numpy as np

STEPS, HALF = 20, 10
GLOBAL_MICRO_BATCHES = 4
TOLERANCE = 1e-5
HERE = os.path.dirname(os.path.abspath(__file__))
LOAD_CHECKPOINT = os.path.join(HERE, "..", "..", "..", "analysis", "load_checkpoint.py")


def fail(message):
    sys.exit("FAILED: " + message)


class Runner:
    def __init__(self, geotrain, config, workdir, mpirun):
        self.geotrain, self.config, self.workdir, self.mpirun = geotrain, config, workdir, mpirun
        self.common = [config, f"--train.steps={STEPS}", "--train.log_every_steps=1", "--train.log_json=true",
                       "--optimizer.warmup_steps=2", "--train.eval_every_steps=0", "--train.eval_batches=4",
                       f"--checkpoint.every_steps={HALF}", "--checkpoint.keep=5"]

    def command(self, name, ranks=0, stages=1, extra=()):
        """geotrain train into WORKDIR/name, alone (ranks=0) or under mpirun."""
        replicas = max(ranks, 1) // stages
        args = [self.geotrain, "train", *self.common, f"--checkpoint.dir={self.dir(name)}",
                f"--pipeline.stages={stages}", f"--train.gradient_accumulation={GLOBAL_MICRO_BATCHES // replicas}",
                *extra]
        return [*self.mpirun, "-n", str(ranks), *args] if ranks else args

    def dir(self, name):
        return os.path.join(self.workdir, name)

    def run(self, command, expect=0):
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        if done.returncode != expect:
            fail(f"exit {done.returncode} (expected {expect}): {' '.join(command)}\n{done.stdout}\n{done.stderr}")
        return done

    def golden(self):
        done = self.run(self.command("golden"))
        return losses_of(done.stdout), final_validation(done.stdout)


def records(stdout, event):
    """The JSON lines of one kind (with train.log_json stdout holds nothing else)."""
    found = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    return [r for r in found if r["event"] == event]


def losses_of(stdout):
    return {r["step"]: r["loss"] for r in records(stdout, "step")}


def final_validation(stdout):
    end = records(stdout, "end")
    if len(end) != 1:
        fail("no end record in:\n" + stdout)
    return end[0]["final_validation_loss"]


def checkpoint(directory, step):
    return os.path.join(directory, f"step_{step:08d}.h5")


def tensors(path):
    """Every dataset under /params and /optimizer, by name."""
    out = {}
    with h5py.File(path, "r") as f:
        for group in ("params", "optimizer"):
            f[group].visititems(lambda name, obj: out.__setitem__(f"{group}/{name}", obj[()])
                                if isinstance(obj, h5py.Dataset) else None)
    return out


def compare_tensors(path, golden_path, exact):
    """exact: every tensor bit for bit. Otherwise each group (parameters, first
    and second moments) as one vector: |mine - golden| / |golden| (L2). Not
    per tensor: the key bias's gradient is zero in exact arithmetic (softmax
    ignores a shift shared by all keys), so its value is rounding noise that
    AdamW scales to full-size steps, different under another reduction order."""
    mine, gold = tensors(path), tensors(golden_path)
    if sorted(mine) != sorted(gold):
        fail(f"{path} holds other tensors than {golden_path}")
    squares, differences = {}, {}
    for name, value in gold.items():
        if value.shape != mine[name].shape:
            fail(f"{path}: {name}: shape {mine[name].shape}, golden {value.shape}")
        if exact and not np.array_equal(value.view(np.uint32), mine[name].view(np.uint32)):
            fail(f"{path}: {name} differs from {golden_path} (bitwise)")
        group = name.rsplit("/", 1)[0]
        squares[group] = squares.get(group, 0.0) + float(np.sum(value.astype(np.float64) ** 2))
        differences[group] = differences.get(group, 0.0) + float(
            np.sum((value.astype(np.float64) - mine[name]) ** 2))
    if exact:
        print(f"{path}: {len(gold)} tensors bitwise equal to {golden_path}")
        return
    for group in sorted(squares):
        relative_l2 = (differences[group] / max(squares[group], 1e-300)) ** 0.5
        print(f"{path}: {group}: relative L2 difference {relative_l2:.1e}")
        if relative_l2 > TOLERANCE:
            fail(f"{path}: {group}: relative L2 difference {relative_l2:.2e} from {golden_path} (tolerance {TOLERANCE})")


def compare_losses(losses, golden, first, tolerance):
    for step in range(first, STEPS + 1):
        if step not in losses:
            fail(f"no loss for step {step}: {losses}")
        if abs(losses[step] - golden[step]) > tolerance * abs(golden[step]):
            fail(f"step {step}: loss {losses[step]!r}, golden {golden[step]!r}")
    print(f"losses of steps {first}..{STEPS} match the golden run")


def sigterm_after(command, step, pick_target, sent=signal.SIGTERM):
    """Starts `command`, sends `sent` (SIGTERM) to pick_target(process) once step
    `step` is printed, returns (exit code, stdout, stderr)."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = []
    deadline = time.monotonic() + 300
    for line in process.stdout:
        out.append(line)
        record = json.loads(line)
        if record["event"] == "step" and record["step"] == step:
            os.kill(pick_target(process), sent)
            break
        if time.monotonic() > deadline:
            process.kill()
            fail("no progress line for step %d in 300 s" % step)
    rest, err = process.communicate(timeout=300)
    return process.returncode, "".join(out) + rest, err


def rank_processes(mpirun_pid):
    """PIDs of the processes mpirun started (its children: the ranks)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if parent == mpirun_pid:
            found.append(int(entry))
    if not found:
        fail(f"no rank processes under mpirun (pid {mpirun_pid})")
    return sorted(found)


def check_stopped(code, stderr, directory, name="SIGTERM"):
    if code != 1:
        fail(f"exit {code} after {name} (expected 1)\n{stderr}")
    found = re.search(rf"^geotrain: stopped by {name} after step (\d+); checkpoint (\S+);", stderr, re.M)
    if not found:
        fail(f"no 'stopped by {name}' line:\n" + stderr)
    step, path = int(found.group(1)), found.group(2)
    if not (0 < step < STEPS) or path != checkpoint(directory, step) or not os.path.exists(path):
        fail(f"stopped after step {step} with checkpoint {path}: not the step's file in {directory}")
    with open(os.path.join(directory, "latest")) as f:
        if os.path.basename(f.read().strip()) != os.path.basename(path):
            fail(f"{directory}/latest does not name {path}")
    print(f"{name}: stopped after step {step}, {path}")
    return step


def check_compressed_resume(r):
    """The 'compressed' case: its own golden run under mpirun."""
    int8 = ["--compression.gradients=int8"]
    golden = r.run(r.command("int8", ranks=4, stages=2, extra=int8))
    half = checkpoint(r.dir("int8"), HALF)
    with h5py.File(half, "r") as f:
        if "error_feedback" not in f:
            fail(f"{half}: no /error_feedback group")
        parts = sorted(f["error_feedback"].keys())
        layout = f["error_feedback"].attrs["layout"]
        layout = layout.decode() if isinstance(layout, bytes) else str(layout)
    # Two replicas swap whole tensors: one residual ("shard_0") per rank.
    if len(parts) != 4 or not all(p.endswith(".shard_0") for p in parts) or not layout.startswith("int8 "):
        fail(f"{half}: /error_feedback holds {parts} (layout {layout!r}); expected one shard_0 per rank of 4")
    done = r.run(r.command("int8-resumed", ranks=4, stages=2, extra=[*int8, f"--checkpoint.resume={half}"]))
    if "restart at zero" in done.stdout + done.stderr:
        fail("the residuals were not restored:\n" + done.stdout)
    compare_losses(losses_of(done.stdout), losses_of(golden.stdout), HALF + 1, 0.0)
    compare_tensors(checkpoint(r.dir("int8-resumed"), STEPS), checkpoint(r.dir("int8"), STEPS), exact=True)
    stripped = os.path.join(r.workdir, "without-residuals.h5")
    shutil.copy(half, stripped)
    with h5py.File(stripped, "r+") as f:
        del f["error_feedback"]
    done = r.run(r.command("int8-stripped", ranks=4, stages=2, extra=[*int8, f"--checkpoint.resume={stripped}"]))
    if "restart at zero" not in done.stdout + done.stderr:
        fail("no note that the residuals restart at zero:\n" + done.stdout + done.stderr)
    if losses_of(done.stdout) == {s: l for s, l in losses_of(golden.stdout).items() if s > HALF}:
        fail("losses without the residuals equal the uninterrupted run's: the test cannot tell")
    print("without the residuals the resumed run differs, as it must")


def main():
    separator = sys.argv.index("--")
    case, geotrain, config, workdir = sys.argv[1:separator]
    mpirun = sys.argv[separator + 1:]
    shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(workdir)
    r = Runner(geotrain, config, workdir, mpirun)
    if case == "interop-untied":
        r.common.append("--model.lm_head=untied")
    if case == "compressed":
        check_compressed_resume(r)
        print("ok: " + case)
        return
    golden_losses, golden_validation = r.golden()
    golden_end = checkpoint(r.dir("golden"), STEPS)

    if case == "bit-exact":
        done = r.run(r.command("resumed", extra=[f"--checkpoint.resume={checkpoint(r.dir('golden'), HALF)}"]))
        compare_losses(losses_of(done.stdout), golden_losses, HALF + 1, 0.0)
        compare_tensors(checkpoint(r.dir("resumed"), STEPS), golden_end, exact=True)
    elif case in ("sigterm", "sigint"):
        sent = signal.SIGINT if case == "sigint" else signal.SIGTERM
        code, _, err = sigterm_after(r.command("stopped"), 5, lambda p: p.pid, sent)
        step = check_stopped(code, err, r.dir("stopped"), sent.name)
        done = r.run(r.command("stopped", extra=["--checkpoint.resume=auto"]))
        compare_losses(losses_of(done.stdout), golden_losses, step + 1, 0.0)
        compare_tensors(checkpoint(r.dir("stopped"), STEPS), golden_end, exact=True)
    elif case == "cross-layout":
        r.run(r.command("pp2dp2", ranks=4, stages=2, extra=["--pipeline.placement=random"]))
        compare_tensors(checkpoint(r.dir("pp2dp2"), HALF), checkpoint(r.dir("golden"), HALF), exact=False)
        done = r.run(r.command("pp4dp2", ranks=8, stages=4,
                               extra=[f"--checkpoint.resume={checkpoint(r.dir('pp2dp2'), HALF)}"]))
        compare_losses(losses_of(done.stdout), golden_losses, HALF + 1, TOLERANCE)
        compare_tensors(checkpoint(r.dir("pp4dp2"), STEPS), golden_end, exact=False)
    elif case == "mpi-sigterm":
        command = r.command("mpi", ranks=4, stages=2)
        code, _, err = sigterm_after(command, 5, lambda p: rank_processes(p.pid)[-1])
        step = check_stopped(code, err, r.dir("mpi"))
        done = r.run(r.command("mpi", ranks=2, stages=2, extra=["--checkpoint.resume=auto"]))
        compare_losses(losses_of(done.stdout), golden_losses, step + 1, TOLERANCE)
        compare_tensors(checkpoint(r.dir("mpi"), STEPS), golden_end, exact=False)
    elif case in ("interop", "interop-untied"):
        model = subprocess.run([sys.executable, LOAD_CHECKPOINT, golden_end,
                                os.path.join(os.path.dirname(config), "data", "corpus_val.bin"),
                                "--batch-size", "2", "--batches", "4", "--json"],
                               capture_output=True, text=True, timeout=600)
        if model.returncode != 0:
            fail(f"load_checkpoint.py exit {model.returncode}\n{model.stdout}\n{model.stderr}")
        pytorch = json.loads(model.stdout)["validation_loss"]
        difference = abs(pytorch - golden_validation) / golden_validation
        print(f"PyTorch validation loss {pytorch:.6f}, geotrain {golden_validation:.6f}: relative {difference:.1e}")
        if difference > TOLERANCE:
            fail("the PyTorch model's validation loss differs from geotrain's")
    else:
        fail("unknown case " + case)
    print("ok: " + case)


if __name__ == "__main__":
    main()
