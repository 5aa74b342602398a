#!/usr/bin/env python3
"""train.log_json and train.metrics_file on the real binary, one rank.

stdout holds JSON lines only (the text goes to stderr); the printed records
are the steps of log_every_steps and the last, with the interval's mean loss
equal to the mean of the metrics file's per-step losses; the metrics file
has every step, the validations and the end record; the timing file's
/validation matches; plot_metrics.py reads the file and draws it.

usage: check_metrics.py GEOTRAIN CONFIG WORKDIR
"""
import json
import os
import shutil
import subprocess
import sys

import h5py

ANALYSIS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "analysis")


def fail(message):
    sys.exit("FAILED: " + message)


def main():
    geotrain, config, workdir = sys.argv[1:4]
    shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(workdir)
    metrics, timing = os.path.join(workdir, "m.jsonl"), os.path.join(workdir, "t.h5")
    done = subprocess.run([geotrain, "train", config, "--pipeline.stages=1", "--train.steps=5",
                           "--train.log_every_steps=2", "--train.log_json=true", "--train.eval_every_steps=0",
                           "--train.eval_batches=2", "--optimizer.warmup_steps=1", "--checkpoint.dir=",
                           f"--train.metrics_file={metrics}", f"--timing.file={timing}"],
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        fail(f"exit {done.returncode}\n{done.stderr}")
    try:
        printed = [json.loads(line) for line in done.stdout.splitlines()]
    except ValueError:
        fail("stdout holds a line that is not JSON:\n" + done.stdout)
    if "final validation loss" not in done.stderr or "validation before training" not in done.stderr:
        fail("the text summary is not on stderr:\n" + done.stderr)
    steps = [r["step"] for r in printed if r["event"] == "step"]
    if steps != [2, 4, 5]:
        fail(f"printed steps {steps}, expected [2, 4, 5]")
    with open(metrics) as f:
        recorded = [json.loads(line) for line in f]
    loss = {r["step"]: r["loss"] for r in recorded if r["event"] == "step"}
    if sorted(loss) != [1, 2, 3, 4, 5]:
        fail(f"the metrics file has steps {sorted(loss)}")
    four = [r for r in printed if r["event"] == "step" and r["step"] == 4][0]
    expected = (loss[3] + loss[4]) / 2
    if four["interval_steps"] != 2 or abs(four["interval_mean_loss"] - expected) > 1e-8 * expected:
        fail(f"step 4's interval mean {four['interval_mean_loss']} is not the mean of steps 3 and 4, {expected}")
    validations = [(r["step"], r["validation_loss"]) for r in recorded if r["event"] == "validation"]
    end = [r for r in recorded if r["event"] == "end"]
    if len(validations) != 1 or len(end) != 1 or not 0 < end[0]["compute_utilisation_mean"] <= 1:
        fail(f"validations {validations}, end {end}")
    with h5py.File(timing, "r") as f:
        steps, losses = list(f["validation"]["step"][()]), list(f["validation"]["loss"][()])
    if steps != [0, 5] or abs(losses[1] - validations[0][1]) > 1e-8 * losses[1]:
        fail(f"/validation holds {steps} {losses}, the metrics file {validations}")
    png = os.path.join(workdir, "loss.png")
    plotted = subprocess.run([sys.executable, os.path.join(ANALYSIS, "plot_metrics.py"), metrics, "--out", png,
                              "--json"], capture_output=True, text=True, timeout=120)
    if plotted.returncode != 0 or json.loads(plotted.stdout)[0]["steps"] != 5 or not os.path.getsize(png):
        fail(f"plot_metrics.py: exit {plotted.returncode}\n{plotted.stdout}\n{plotted.stderr}")
    print(f"ok: JSON lines only on stdout, interval mean {four['interval_mean_loss']:.6f}, metrics and timing agree")


if __name__ == "__main__":
    main()
