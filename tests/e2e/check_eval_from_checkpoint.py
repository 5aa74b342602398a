#!/usr/bin/env python3
"""geotrain eval takes the model (and, without a config file, the data and
batches) from the checkpoint: a model of a non-default shape (2 layers,
hidden 64, 2 heads, 64 positions, an untied head) trains 4 steps with 3
validation batches of 3 sequences; its checkpoint, copied to a folder of
its own, is evaluated from another working folder with no config and no
flag but checkpoint.resume (no inputs/ folder, no model file): the loss
equals the training's final validation loss (relative 1e-6). A model flag
that contradicts the checkpoint exits 2 naming both values. Given an
mpirun command, the same eval as a pipeline of 2 stages (mpirun -n 2, no
model flags either) gives the same loss. checkpoint.init_from does the
same: a run of the quickstart config (whose model file is another shape)
started from the copy with no model flags validates, before its first
step, at the training's final loss; a contradicting flag exits 2.

usage: check_eval_from_checkpoint.py GEOTRAIN CONFIG WORKDIR [-- MPIRUN...]
"""
import json
import os
import re
import shutil
import subprocess
import sys

SHAPE = ["--model.layers=2", "--model.hidden=64", "--model.heads=2", "--model.sequence_length=64",
         "--model.lm_head=untied"]


def fail(message):
    sys.exit("FAILED: " + message)


def run(command, cwd, expect=0):
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=cwd)
    if done.returncode != expect:
        fail(f"exit {done.returncode} (expected {expect}): {' '.join(command)}\n{done.stdout}\n{done.stderr}")
    return done


def main():
    geotrain, config, workdir = sys.argv[1:4]
    mpirun = sys.argv[sys.argv.index("--") + 1:] if "--" in sys.argv else []
    geotrain, config = os.path.abspath(geotrain), os.path.abspath(config)
    shutil.rmtree(workdir, ignore_errors=True)
    trained_in, elsewhere, copy = (os.path.join(workdir, d) for d in ("train", "elsewhere", "copy"))
    for d in (trained_in, elsewhere, copy):
        os.makedirs(d)
    done = run([geotrain, "train", config, *SHAPE, "--pipeline.stages=1", "--train.steps=4",
                "--optimizer.warmup_steps=0", "--train.micro_batch_sequences=3", "--train.eval_batches=3",
                "--train.eval_every_steps=0", "--train.log_json=true", "--timing.file=", "--train.metrics_file=",
                "--device.kind=cpu", "--network.matrix=", "--checkpoint.dir=ckpt"], trained_in)
    end = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    final = [r for r in end if r["event"] == "end"][0]["final_validation_loss"]
    checkpoint = os.path.join(copy, "model.h5")
    shutil.copy(os.path.join(trained_in, "ckpt", "step_00000004.h5"), checkpoint)

    done = run([geotrain, "eval", f"--checkpoint.resume={checkpoint}", "--train.log_json=true",
                "--device.kind=cpu"], elsewhere)
    got = json.loads(done.stdout.strip().splitlines()[-1])
    if not abs(got["validation_loss"] - final) <= 1e-6 * abs(final):
        fail(f"eval of the copied checkpoint: {got['validation_loss']!r}, training's final validation loss {final!r}")
    if got["global_batches"] != 3 or not got["validation"].endswith("corpus_val.bin"):
        fail(f"eval scored other batches than training's: {got}")
    print(f"ok: eval with no model flags from another folder: {got['validation_loss']:.9g} = training's {final:.9g} "
          f"({got['global_batches']} batches of {got['validation']})")
    if mpirun:
        done = run([*mpirun, "-n", "2", geotrain, "eval", f"--checkpoint.resume={checkpoint}", "--train.log_json=true",
                    "--device.kind=cpu", "--pipeline.stages=2"], elsewhere)
        piped = json.loads(done.stdout.strip().splitlines()[-1])
        if not abs(piped["validation_loss"] - final) <= 1e-6 * abs(final) or piped["global_batches"] != 3:
            fail(f"eval of the copied checkpoint on 2 stages under mpirun: {piped}, training's final {final!r}")
        print(f"ok: the same under mpirun on 2 stages: {piped['validation_loss']:.9g}")
    text = run([geotrain, "eval", f"--checkpoint.resume={checkpoint}", "--device.kind=cpu"], elsewhere).stdout
    if "3 batches x 3 sequences x 64 tokens of " not in text:
        fail(f"eval does not say which data and batches it scores:\n{text}")

    done = run([geotrain, "eval", f"--checkpoint.resume={checkpoint}", "--model.hidden=128"], elsewhere, expect=2)
    lines = done.stderr.strip().splitlines()
    pattern = r"command line: model\.hidden: 128 contradicts the checkpoint's 64 \(.*model\.h5: attribute model_hidden\)"
    if len(lines) != 1 or not re.search(pattern, lines[0]):
        fail(f"a contradicting --model.hidden: expected one line naming both values:\n{done.stderr}")
    done = run([geotrain, "eval", f"--checkpoint.resume={checkpoint}", "--model.lm_head=tied"], elsewhere, expect=2)
    if "model.lm_head: tied contradicts the checkpoint's untied head" not in done.stderr:
        fail(f"a contradicting --model.lm_head: expected both named:\n{done.stderr}")
    if os.listdir(elsewhere):
        fail(f"eval wrote files: {os.listdir(elsewhere)}")
    print("ok: contradicting model flags exit 2 naming both values")
    check_init_from(geotrain, config, checkpoint, final, os.path.join(workdir, "init"))


def check_init_from(geotrain, config, checkpoint, final, folder):
    os.makedirs(folder)
    start = [geotrain, "train", config, f"--checkpoint.init_from={checkpoint}", "--pipeline.stages=1",
             "--train.steps=1", "--optimizer.warmup_steps=0", "--train.micro_batch_sequences=3",
             "--train.eval_batches=3", "--train.log_json=true", "--timing.file=", "--train.metrics_file=",
             "--device.kind=cpu", "--network.matrix=", "--checkpoint.dir="]
    done = run(start, folder)
    records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    initial = [r for r in records if r["event"] == "end"][0]["initial_validation_loss"]
    if not abs(initial - final) <= 1e-6 * abs(final):
        fail(f"init_from with no model flags: validation before its first step {initial!r}, training's final {final!r}")
    if "its model: 2 layers, hidden 64, 2 heads, vocabulary 256, 64 positions, untied head" not in done.stderr:
        fail(f"init_from does not say which model it took:\n{done.stderr}")
    print(f"ok: init_from with no model flags takes the checkpoint's model: {initial:.9g} = training's {final:.9g}")
    done = run([*start, "--model.layers=4"], folder, expect=2)
    lines = done.stderr.strip().splitlines()
    pattern = r"command line: model\.layers: 4 contradicts the checkpoint's 2 \(.*model\.h5: attribute model_layers\)"
    if len(lines) != 1 or not re.search(pattern, lines[0]) or "checkpoint.init_from takes the model" not in lines[0]:
        fail(f"init_from with a contradicting --model.layers: expected one line naming both values:\n{done.stderr}")
    print("ok: init_from with a contradicting model flag exits 2 naming both values")


if __name__ == "__main__":
    main()
