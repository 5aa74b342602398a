#!/usr/bin/env python3
"""A flipped byte in any tensor of a checkpoint, in either form, stops every
command that reads it: eval, sample, resume (train --checkpoint.resume),
init_from and convert --to-hf, each with exit 2 and one line on stderr
naming the damaged file and tensor.

The tiny model trains 2 steps alone, once as a single file and once as a
sharded folder. For each form and each of three tensors (a weight, a first
moment, a second moment) a copy of the checkpoint gets one byte flipped in
the middle of one of the tensor's chunks, found with h5py (not geotrain);
the intact copy passes every command first, so each refusal is the flip's.

usage: check_checksums.py GEOTRAIN CONFIG WORKDIR
"""
import os
import re
import shutil
import subprocess
import sys

import h5py

COMMON = ["--pipeline.stages=1", "--train.steps=2", "--optimizer.warmup_steps=0", "--train.eval_batches=1",
          "--train.eval_every_steps=0", "--train.log_every_steps=1", "--timing.file=", "--train.metrics_file=",
          "--device.kind=cpu", "--checkpoint.every_steps=2", "--network.matrix="]
TENSORS = ["params/wte", "optimizer/m/h.0.attn.qkv.weight", "optimizer/v/lnf.bias"]


def fail(message):
    sys.exit("FAILED: " + message)


def run(command, expect):
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if done.returncode != expect:
        fail(f"exit {done.returncode} (expected {expect}): {' '.join(command)}\n{done.stdout}\n{done.stderr}")
    return done


def commands(geotrain, config, checkpoint, workdir):
    """name -> the command line of each reader of `checkpoint`."""
    out = os.path.join(workdir, "hf-out")
    shutil.rmtree(out, ignore_errors=True)
    return {
        "eval": [geotrain, "eval", config, *COMMON, f"--checkpoint.resume={checkpoint}", "--checkpoint.dir="],
        "sample": [geotrain, "sample", "--checkpoint", checkpoint, "--tokens", "2", "--device", "cpu"],
        "resume": [geotrain, "train", config, *COMMON, "--train.steps=3", f"--checkpoint.resume={checkpoint}",
                   f"--checkpoint.dir={os.path.join(workdir, 'resumed')}"],
        "init_from": [geotrain, "train", config, *COMMON, "--train.steps=1", f"--checkpoint.init_from={checkpoint}",
                      "--checkpoint.dir="],
        "convert": [geotrain, "convert", "--to-hf", checkpoint, "--out", out],
    }


def stored_file(checkpoint, dataset):
    """The file of `checkpoint` (a file, or a sharded folder) that holds `dataset`."""
    if not os.path.isdir(checkpoint):
        return checkpoint
    for name in sorted(os.listdir(checkpoint)):
        if name.startswith("rank_"):
            with h5py.File(os.path.join(checkpoint, name), "r") as f:
                if dataset in f:
                    return os.path.join(checkpoint, name)
    fail(f"{checkpoint}: no shard holds {dataset}")


def flip(path, dataset):
    with h5py.File(path, "r") as f:
        d = f[dataset]
        if "crc32" not in d.attrs or d.chunks is not None:
            fail(f"{path}: /{dataset}: not a contiguous dataset with a crc32 attribute")
        at = d.id.get_offset() + d.id.get_storage_size() // 2
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ 0x04]))


def main():
    geotrain, config, workdir = sys.argv[1:4]
    shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(workdir)
    checked = 0
    for form in ("single", "sharded"):
        folder = os.path.join(workdir, form)
        run([geotrain, "train", config, *COMMON, f"--checkpoint.dir={folder}", f"--checkpoint.form={form}"], 0)
        good = os.path.join(folder, "step_00000002" + (".h5" if form == "single" else ""))
        for name, command in commands(geotrain, config, good, workdir).items():
            run(command, 0)  # the intact checkpoint passes every reader
        for dataset in TENSORS:
            damaged = os.path.join(workdir, f"{form}-{dataset.replace('/', '_')}" + (".h5" if form == "single" else ""))
            (shutil.copy if form == "single" else shutil.copytree)(good, damaged)
            file = stored_file(damaged, dataset)
            flip(file, dataset)
            for name, command in commands(geotrain, config, damaged, workdir).items():
                done = run(command, 2)
                lines = done.stderr.strip().splitlines()
                pattern = re.escape(f"{file}: /{dataset}: damaged")
                if len(lines) != 1 or not re.search(pattern, lines[0]):
                    fail(f"{name}: stderr does not name {file}: /{dataset}:\n{done.stderr}")
                checked += 1
            print(f"ok: {form}: /{dataset} flipped: eval, sample, resume, init_from, convert exit 2 naming it")
    print(f"ok: {checked} damaged reads refused")


if __name__ == "__main__":
    main()
