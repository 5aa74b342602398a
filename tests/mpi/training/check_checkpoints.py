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
                10 (checkpoint.form = sharded: one shard per stage, from
                different replicas); resumed on 4 stages x 2 replicas (8 ranks,
                the default form under mpirun: parallel) and alone: losses and
                parameters within 1e-5 of the golden run. A shard removed:
                exit 2, one line naming it.
  cross-layout-single  the same from checkpoint.form = single (one file).
  cross-layout-parallel  the same from checkpoint.form = parallel (one file
                written by every rank through parallel HDF5; the timing file
                shows no rank sent checkpoint bytes, where the single form's
                gather does).
  cross-layout-per-site  the same from checkpoint.form = per_site on the
                two-site scenario (one shard per site plus the manifest); a
                site's shard removed: exit 2 naming it; the PyTorch loader as
                for parallel.
  per-site-separate-folders  two sites that share no folder (each pair of
                ranks in its own working folder, checkpoint.dir relative):
                auto chooses per_site; each site's folder holds the manifest,
                `latest` and only its own shard; the two put together resume
                alone within 1e-5; one alone: exit 2 naming the other's shard;
                both sites from their own folders (each receives the shard
                it lacks from the other's ranks) within 1e-5; sites whose
                `latest` differ: exit 2 naming both steps;
                checkpoint.form = parallel there: exit 2 naming the field.
  cross-tensor-parallel  mpirun 2-way tensor-parallel units x 2 stages (4
                ranks): the step-10 checkpoint holds whole tensors (one shard
                per stage) within 1e-5 of the golden run's, and resumes alone
                (tp = 1); the golden (tp = 1) step-10 checkpoint resumes on
                4-way tensor parallelism; both reach the golden losses within
                1e-5, and the tp = 4 run's step-20 tensors the golden ones.
  mpi-sigterm   mpirun 4 ranks, SIGTERM to one rank only (as a pre-emption
                notice may reach some ranks first): every rank stops with one
                checkpoint; resumed with 2 ranks (fewer) to the end, within 1e-5.
  compressed    mpirun 2 stages x 2 replicas with int8 gradients (error
                feedback): resumed from step 10 on the same layout, bit for bit
                equal to its own uninterrupted run; the same resume with the
                file's /error_feedback removed notes that the residuals restart
                and ends elsewhere (so the residuals are what makes it exact).
                checkpoint.form = parallel (every rank writes its own residuals
                into the one file; sharded without parallel HDF5).
  compressed-single  the same with checkpoint.form = single.
  compressed-tied    the same on 2 stages x 1 replica with only the tied
                embedding's per-step sum at int8 (compression.tied_embedding):
                each end of the pipeline keeps its own residual.
  interop       analysis/load_checkpoint.py (h5py + PyTorch) on the step-20
                checkpoint gives geotrain's final validation loss within 1e-5,
                in both forms; the sharded run's tensors equal the single
                file's bit for bit.
  write-error   a checkpoint that cannot be written (its temporary file's name
                taken by a folder), alone and under mpirun (one rank's shard;
                the parallel form's one file, which every rank opens):
                exit 1 at the next wait, one line naming the file; `latest`
                never names it.

Writes are asynchronous (the default) in every case; bit-exact also runs
with checkpoint.asynchronous = false.
  interop-untied  interop with model.lm_head = untied (lm_head.weight).

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
import zlib

import h5py
import numpy as np

STEPS, HALF = 20, 10
GLOBAL_MICRO_BATCHES = 4
TOLERANCE = 1e-5
HERE = os.path.dirname(os.path.abspath(__file__))
TWO_SITES = os.path.join(HERE, "scenarios", "nodes-2x2.toml")
# parallel where geotrain is built with parallel HDF5 (tests/CMakeLists.txt), else sharded.
COLLECTIVE_FORM = os.environ.get("GEOTRAIN_TEST_FORM", "parallel")
LOAD_CHECKPOINT = os.path.join(HERE, "..", "..", "..", "analysis", "load_checkpoint.py")
sys.path.insert(0, os.path.dirname(LOAD_CHECKPOINT))
from load_checkpoint import checkpoint_files, text  # noqa: E402
sys.path.insert(0, os.path.join(HERE, "..", "..", "support"))
from training_script import fixture_flags  # noqa: E402


def fail(message):
    sys.exit("FAILED: " + message)


class Runner:
    def __init__(self, geotrain, config, workdir, mpirun):
        self.geotrain, self.config, self.workdir, self.mpirun = geotrain, config, workdir, mpirun
        self.common = [config, *fixture_flags(), f"--train.steps={STEPS}", "--train.log_every_steps=1", "--train.log_json=true",
                       "--optimizer.warmup_steps=2", "--train.eval_every_steps=0", "--train.eval_batches=4",
                       f"--checkpoint.every_steps={HALF}", "--checkpoint.keep=5"]

    def command(self, name, ranks=0, stages=1, extra=(), tensor_parallel=1):
        """geotrain train into WORKDIR/name, alone (ranks=0) or under mpirun."""
        replicas = max(ranks, 1) // stages // tensor_parallel
        args = [self.geotrain, "train", *self.common, f"--checkpoint.dir={self.dir(name)}",
                f"--pipeline.stages={stages}", f"--train.gradient_accumulation={GLOBAL_MICRO_BATCHES // replicas}",
                f"--pipeline.tensor_parallel={tensor_parallel}", *extra]
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
    """The step's checkpoint: a sharded one's folder where there is one, else the single file."""
    folder = os.path.join(directory, f"step_{step:08d}")
    return folder if os.path.isdir(folder) else folder + ".h5"


def datasets(path, groups):
    """Every dataset under `groups` of every file of the checkpoint, by name."""
    out = {}
    for file in checkpoint_files(path)[1]:
        with h5py.File(file, "r") as f:
            for group in groups:
                if group in f:
                    f[group].visititems(lambda name, obj: out.__setitem__(f"{group}/{name}", obj[()])
                                        if isinstance(obj, h5py.Dataset) else None)
    return out


def tensors(path):
    """Every dataset under /params and /optimizer, by name."""
    return datasets(path, ("params", "optimizer"))


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


def strip_residuals(path, copy):
    """A copy of checkpoint `path` without /error_feedback (in every file)."""
    if os.path.isdir(path):
        shutil.copytree(path, copy)
    else:
        shutil.copy(path, copy)
    for file in checkpoint_files(copy)[1]:
        with h5py.File(file, "r+") as f:
            if "error_feedback" in f:
                del f["error_feedback"]


def check_compressed_resume(r, form, name="int8", ranks=4, wire=("--compression.gradients=int8",), layout="int8 "):
    """The 'compressed' cases: their own golden run under mpirun, 2 stages of `ranks` ranks, `wire` the
    lossy options, `layout` how /error_feedback's layout attribute begins."""
    int8 = [*wire, f"--checkpoint.form={form}"]
    golden = r.run(r.command(name, ranks=ranks, stages=2, extra=int8))
    half = checkpoint(r.dir(name), HALF)
    if os.path.isdir(half) != (form in ("sharded", "per_site")):
        fail(f"{half}: not of checkpoint.form = {form}")
    parts, layouts = set(), set()
    for file in checkpoint_files(half)[1]:
        with h5py.File(file, "r") as f:
            if "error_feedback" in f:
                parts.update(f["error_feedback"].keys())
                layouts.add(text(f["error_feedback"].attrs["layout"]))
    if not parts:
        fail(f"{half}: no /error_feedback group")
    # Two replicas swap whole tensors, and so do a pipeline's two ends their tied embedding: one residual
    # ("shard_0") per rank.
    if (len(parts) != ranks or not all(p.endswith(".shard_0") for p in parts) or len(layouts) != 1
            or not layouts.pop().startswith(layout)):
        fail(f"{half}: /error_feedback holds {sorted(parts)}; expected one '{layout}' shard_0 per rank of {ranks}")
    done = r.run(r.command(f"{name}-resumed", ranks=ranks, stages=2, extra=[*int8, f"--checkpoint.resume={half}"]))
    if "restart at zero" in done.stdout + done.stderr:
        fail("the residuals were not restored:\n" + done.stdout)
    compare_losses(losses_of(done.stdout), losses_of(golden.stdout), HALF + 1, 0.0)
    compare_tensors(checkpoint(r.dir(f"{name}-resumed"), STEPS), checkpoint(r.dir(name), STEPS), exact=True)
    stripped = os.path.join(r.workdir, "without-residuals" + ("" if os.path.isdir(half) else ".h5"))
    strip_residuals(half, stripped)
    done = r.run(r.command(f"{name}-stripped", ranks=ranks, stages=2, extra=[*int8, f"--checkpoint.resume={stripped}"]))
    if "restart at zero" not in done.stdout + done.stderr:
        fail("no note that the residuals restart at zero:\n" + done.stdout + done.stderr)
    if losses_of(done.stdout) == {s: l for s, l in losses_of(golden.stdout).items() if s > HALF}:
        fail("losses without the residuals equal the uninterrupted run's: the test cannot tell")
    print("without the residuals the resumed run differs, as it must")


def check_tensor_checksums(files, form):
    """Every tensor dataset carries its checksum, in every form: a crc32
    attribute equal to zlib's CRC-32 of its bytes."""
    for file in files:
        with h5py.File(file, "r") as f:
            datasets = []
            f.visititems(lambda name, item: datasets.append(name) if isinstance(item, h5py.Dataset) else None)
            for name in datasets:
                d = f[name]
                want = zlib.crc32(np.asarray(d, dtype="<f4").tobytes())
                if "crc32" not in d.attrs or int(d.attrs["crc32"]) != want:
                    fail(f"{file}: /{name}: crc32 attribute {d.attrs.get('crc32')} is not zlib's {want}")
    print(f"{len(files)} file(s) of the {form} form: every tensor carries its checksum")


def check_flipped_byte_refused(r, path):
    """A copy of the parallel form's file with one byte of /params/wte
    flipped: resuming alone exits 2 naming the file and the tensor."""
    damaged = os.path.join(r.workdir, "flipped.h5")
    shutil.copy(path, damaged)
    with h5py.File(damaged, "r") as f:
        at = f["params/wte"].id.get_offset() + 13
    with open(damaged, "r+b") as out:
        out.seek(at)
        byte = out.read(1)[0]
        out.seek(at)
        out.write(bytes([byte ^ 0x40]))
    done = r.run(r.command("flipped", extra=[f"--checkpoint.resume={damaged}"]), expect=2)
    lines = done.stderr.strip().splitlines()
    if len(lines) != 1 or f"{damaged}: /params/wte: damaged" not in lines[0]:
        fail(f"a flipped byte in the parallel form's /params/wte: expected one line naming it:\n{done.stderr}")
    print(f"flipped byte: {lines[0]}")


def check_form(path, form, shards_expected):
    """A single file (single, parallel), or a folder whose manifest lists
    the expected shards (sharded: one per stage, written by ranks of
    different replicas where there are several, stage s by replica s mod
    replicas; per_site: one per site), which hold each tensor once."""
    if form in ("single", "parallel"):
        if not os.path.isfile(path):
            fail(f"{path}: not a single-file checkpoint")
        check_tensor_checksums([path], form)
        return
    manifest, shards = checkpoint_files(path)
    if len(shards) != shards_expected:
        fail(f"{manifest}: lists {len(shards)} shards, expected {shards_expected}")
    if form == "per_site" and not all(re.fullmatch(r"site_\d\d_\w+\.h5", os.path.basename(x)) for x in shards):
        fail(f"{manifest}: shards {shards} are not named by site")
    with h5py.File(manifest, "r") as f:
        completed = int(f.attrs["completed_steps"])
    held = set()
    for shard in shards:
        with h5py.File(shard, "r") as f:
            if int(f.attrs["shard"]) != 1 or int(f.attrs["completed_steps"]) != completed:
                fail(f"{shard}: not a shard of {manifest}")
            names = set(f["params"].keys())
            if held & names:
                fail(f"{shard}: holds tensors another shard holds: {sorted(held & names)[:3]}")
            held |= names
    check_tensor_checksums(shards, form)
    print(f"{path}: manifest and {len(shards)} shards")


def check_sent_bytes(timing_file, gathered):
    """The timing file's checkpoint events: the single form's ranks but the
    writer send their stage's bytes to it; the others send none."""
    with h5py.File(timing_file, "r") as f:
        kinds = h5py.check_enum_dtype(f["events/kind"].dtype)
        kind, sent, rank = f["events/kind"][:], f["events/bytes"][:], f["events/rank"][:]
    at_checkpoints = kind == kinds["checkpoint"]
    senders = sorted(set(rank[at_checkpoints & (sent > 0)].tolist()))
    if gathered != bool(senders):
        fail(f"{timing_file}: ranks {senders} sent checkpoint bytes ({'a gather' if gathered else 'none'} expected)")
    print(f"{timing_file}: ranks sending checkpoint bytes: {senders}")


def check_separate_folders(r, golden_losses):
    """per_site where the sites share no folder: each pair of ranks (a site
    of the two-site scenario) runs in its own working folder and
    checkpoint.dir is relative."""
    folders = [r.dir("site-a"), r.dir("site-b")]
    for folder in folders:
        os.makedirs(folder)
    args = [r.geotrain, "train", *r.common, "--checkpoint.dir=ck", "--pipeline.stages=2",
            f"--train.gradient_accumulation={GLOBAL_MICRO_BATCHES // 2}", f"--network.matrix={TWO_SITES}",
            "--timing.file="]

    def two_sites(extra=()):
        return [*r.mpirun, "-n", "2", "-wdir", folders[0], *args, *extra, ":",
                "-n", "2", "-wdir", folders[1], *args, *extra]
    done = r.run(two_sites())
    if "checkpoints: per_site" not in done.stdout + done.stderr:
        fail("auto did not choose per_site without a shared folder:\n" + done.stderr)
    halves = [checkpoint(os.path.join(folder, "ck"), HALF) for folder in folders]
    own = []
    for folder, half in zip(folders, halves):
        with open(os.path.join(folder, "ck", "latest")) as f:
            if f.read().strip() != f"step_{STEPS:08d}":
                fail(f"{folder}/ck/latest does not name step {STEPS}")
        manifest = os.path.join(half, "manifest.h5")
        with h5py.File(manifest, "r") as f:
            shards = [os.path.join(half, name) for name in text(f.attrs["shards"]).split("\n")]
        present = [x for x in shards if os.path.exists(x)]
        if len(shards) != 2 or len(present) != 1:
            fail(f"{manifest}: lists {shards}; present {present} (expected both listed, this site's only here)")
        own.append(present[0])
    merged = os.path.join(r.workdir, "merged")
    shutil.copytree(halves[0], merged)
    shutil.copy(own[1], merged)
    done = r.run(r.command("from-merged", extra=[f"--checkpoint.resume={merged}"]))
    compare_losses(losses_of(done.stdout), golden_losses, HALF + 1, TOLERANCE)
    done = r.run(r.command("from-one-site", extra=[f"--checkpoint.resume={halves[0]}"]), expect=2)
    missing = os.path.join(halves[0], os.path.basename(own[1]))
    lines = [line for line in done.stderr.splitlines() if line.startswith("geotrain: ")]
    if len(lines) != 1 or missing not in lines[0]:
        fail(f"expected one error line naming {missing}:\n{done.stderr}")
    print(f"one site's folder alone: {lines[0]}")
    # Both sites, each from its own folder: the shard a site lacks is sent
    # to it by the other site's ranks before anyone reads the checkpoint.
    step = os.path.join("ck", f"step_{HALF:08d}")
    done = r.run(two_sites([f"--checkpoint.resume={step}", "--checkpoint.dir=ck-resumed"]))
    compare_losses(losses_of(done.stdout), golden_losses, HALF + 1, TOLERANCE)
    for half in halves:
        missing = [x for x in checkpoint_files(half)[1] if not os.path.exists(x)]
        if missing:
            fail(f"{half}: still lacks {missing} after the two sites resumed from their own folders")
    print("each site resumed from its own folder; both folders now hold every shard")
    # Sites whose `latest` name different steps: exit 2, one line naming both.
    with open(os.path.join(folders[1], "ck", "latest"), "w") as f:
        f.write(f"step_{HALF:08d}\n")
    done = r.run(two_sites(["--checkpoint.resume=auto"]), expect=2)
    lines = [line for line in done.stderr.splitlines() if line.startswith("geotrain: ")]
    if len(lines) != 1 or f"step_{STEPS:08d}" not in lines[0] or f"step_{HALF:08d}" not in lines[0]:
        fail(f"sites resuming from different steps: expected one line naming both:\n{done.stderr}")
    print(f"sites whose latest differ: {lines[0]}")
    done = r.run(two_sites(["--checkpoint.form=parallel", "--checkpoint.dir=ck-parallel"]), expect=2)
    lines = [line for line in done.stderr.splitlines() if line.startswith("geotrain: ")]
    if len(lines) != 1 or "checkpoint.form = parallel" not in lines[0] or "share" not in lines[0]:
        fail(f"checkpoint.form = parallel without a shared folder: expected one line naming it:\n{done.stderr}")
    print(f"parallel without a shared folder: {lines[0]}")


def check_pytorch_loader(path, config, validation):
    """analysis/load_checkpoint.py (h5py + PyTorch) on checkpoint `path`:
    the validation loss geotrain printed for it, within the tolerance."""
    model = subprocess.run([sys.executable, LOAD_CHECKPOINT, path,
                            os.path.join(os.path.dirname(config), "data", "corpus_val.bin"),
                            "--batch-size", "2", "--batches", "4", "--json"],
                           capture_output=True, text=True, timeout=600)
    if model.returncode != 0:
        fail(f"load_checkpoint.py exit {model.returncode}\n{model.stdout}\n{model.stderr}")
    pytorch = json.loads(model.stdout)["validation_loss"]
    difference = abs(pytorch - validation) / validation
    print(f"{path}: PyTorch validation loss {pytorch:.6f}, geotrain {validation:.6f}: relative {difference:.1e}")
    if difference > TOLERANCE:
        fail("the PyTorch model's validation loss differs from geotrain's")


def check_missing_shard(r, half):
    """A copy of the checkpoint without one shard: exit 2, one line naming it."""
    broken = os.path.join(r.workdir, "missing-shard")
    shutil.copytree(half, broken)
    gone = checkpoint_files(broken)[1][-1]
    os.remove(gone)
    done = r.run(r.command("from-broken", ranks=4, stages=2, extra=[f"--checkpoint.resume={broken}"]), expect=2)
    lines = [line for line in done.stderr.splitlines() if line.startswith("geotrain: ")]
    if len(lines) != 1 or gone not in lines[0] or "missing" not in lines[0]:
        fail(f"expected one error line naming {gone}:\n{done.stderr}")
    print(f"missing shard named: {lines[0]}")


def check_write_errors(r):
    """Alone (single file) and under mpirun (2 stages, one rank each: rank
    1's shard, rank 0's is fine): the step-10 write fails; the run exits 1
    with one line naming the file; `latest` never names step 10."""
    cases = [("alone", 0, f"step_{HALF:08d}.h5.tmp", "auto"),
             ("mpi", 2, os.path.join(f"step_{HALF:08d}", "rank_00001.h5.tmp"), "sharded"),
             ("mpi-parallel", 2, f"step_{HALF:08d}.h5.tmp", "parallel")][:3 if COLLECTIVE_FORM == "parallel" else 2]
    for name, ranks, obstacle, form in cases:
        blocked = os.path.join(r.dir(name), obstacle)
        os.makedirs(blocked)  # a folder where the temporary file must go: H5Fcreate fails
        done = r.run(r.command(name, ranks=ranks, stages=2 if ranks else 1, extra=[f"--checkpoint.form={form}"]),
                     expect=1)
        lines = [line for line in done.stderr.splitlines() if line.startswith("geotrain: ")]
        if len(lines) != 1 or blocked not in lines[0] or "checkpoint not written" not in lines[0]:
            fail(f"{name}: expected one line naming {blocked}:\n{done.stderr}")
        latest = os.path.join(r.dir(name), "latest")
        if os.path.exists(latest):
            with open(latest) as f:
                fail(f"{name}: latest names {f.read().strip()} after the failed write")
        print(f"{name}: {lines[0]}")


def main():
    separator = sys.argv.index("--")
    case, geotrain, config, workdir = sys.argv[1:separator]
    mpirun = sys.argv[separator + 1:]
    shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(workdir)
    r = Runner(geotrain, config, workdir, mpirun)
    if case == "interop-untied":
        r.common.append("--model.lm_head=untied")
    if case in ("compressed", "compressed-single"):
        check_compressed_resume(r, "single" if case.endswith("single") else COLLECTIVE_FORM)
        print("ok: " + case)
        return
    if case == "compressed-tied":  # only the tied embedding's sum encoded: each end keeps its residual
        check_compressed_resume(r, COLLECTIVE_FORM, "tied-int8", 2, ("--compression.tied_embedding=int8",),
                                "fp32 tied_embedding=int8 ")
        print("ok: " + case)
        return
    if case == "write-error":
        check_write_errors(r)
        print("ok: " + case)
        return
    golden_losses, golden_validation = r.golden()
    golden_end = checkpoint(r.dir("golden"), STEPS)

    if case == "bit-exact":
        done = r.run(r.command("resumed", extra=[f"--checkpoint.resume={checkpoint(r.dir('golden'), HALF)}"]))
        compare_losses(losses_of(done.stdout), golden_losses, HALF + 1, 0.0)
        compare_tensors(checkpoint(r.dir("resumed"), STEPS), golden_end, exact=True)
        done = r.run(r.command("synchronous", extra=["--checkpoint.asynchronous=false"]))
        compare_losses(losses_of(done.stdout), golden_losses, 1, 0.0)
        compare_tensors(checkpoint(r.dir("synchronous"), STEPS), golden_end, exact=True)
    elif case in ("sigterm", "sigint"):
        sent = signal.SIGINT if case == "sigint" else signal.SIGTERM
        code, _, err = sigterm_after(r.command("stopped"), 5, lambda p: p.pid, sent)
        step = check_stopped(code, err, r.dir("stopped"), sent.name)
        done = r.run(r.command("stopped", extra=["--checkpoint.resume=auto"]))
        compare_losses(losses_of(done.stdout), golden_losses, step + 1, 0.0)
        compare_tensors(checkpoint(r.dir("stopped"), STEPS), golden_end, exact=True)
    elif case.startswith("cross-layout") and case != "cross-layout-tensor-parallel":
        form = {"cross-layout": "sharded", "cross-layout-single": "single", "cross-layout-parallel": "parallel",
                "cross-layout-per-site": "per_site"}[case]
        extra = ["--pipeline.placement=random", f"--checkpoint.form={form}",
                 f"--timing.file={os.path.join(r.workdir, 'pp2dp2.h5')}"]
        if form == "per_site":
            extra.append(f"--network.matrix={TWO_SITES}")
        written = r.run(r.command("pp2dp2", ranks=4, stages=2, extra=extra))
        half = checkpoint(r.dir("pp2dp2"), HALF)
        if form in ("parallel", "per_site"):  # the PyTorch loader reads what parallel HDF5 wrote
            check_pytorch_loader(checkpoint(r.dir("pp2dp2"), STEPS), config, final_validation(written.stdout))
        check_form(half, form, shards_expected=2)  # 2 stages, or 2 sites
        check_sent_bytes(os.path.join(r.workdir, "pp2dp2.h5"), gathered=form == "single")
        compare_tensors(half, checkpoint(r.dir("golden"), HALF), exact=False)
        done = r.run(r.command("pp4dp2", ranks=8, stages=4, extra=[f"--checkpoint.resume={half}"]))
        compare_losses(losses_of(done.stdout), golden_losses, HALF + 1, TOLERANCE)
        compare_tensors(checkpoint(r.dir("pp4dp2"), STEPS), golden_end, exact=False)
        check_form(checkpoint(r.dir("pp4dp2"), STEPS), "parallel", 1)  # the default under mpirun
        done = r.run(r.command("alone", extra=[f"--checkpoint.resume={half}"]))
        compare_losses(losses_of(done.stdout), golden_losses, HALF + 1, TOLERANCE)
        if form in ("sharded", "per_site"):
            check_missing_shard(r, half)
        if form == "parallel":
            check_flipped_byte_refused(r, half)
    elif case == "per-site-separate-folders":
        check_separate_folders(r, golden_losses)
    elif case == "cross-tensor-parallel":
        r.run(r.command("tp2pp2", ranks=4, stages=2, tensor_parallel=2, extra=["--checkpoint.form=sharded"]))
        half = checkpoint(r.dir("tp2pp2"), HALF)
        check_form(half, "sharded", 2)  # whole tensors: one shard per stage, not per rank
        compare_tensors(half, checkpoint(r.dir("golden"), HALF), exact=False)
        done = r.run(r.command("alone", extra=[f"--checkpoint.resume={half}"]))
        compare_losses(losses_of(done.stdout), golden_losses, HALF + 1, TOLERANCE)
        golden_half = checkpoint(r.dir("golden"), HALF)
        done = r.run(r.command("tp4", ranks=4, tensor_parallel=4, extra=[f"--checkpoint.resume={golden_half}"]))
        compare_losses(losses_of(done.stdout), golden_losses, HALF + 1, TOLERANCE)
        compare_tensors(checkpoint(r.dir("tp4"), STEPS), golden_end, exact=False)
    elif case == "mpi-sigterm":
        command = r.command("mpi", ranks=4, stages=2)
        code, _, err = sigterm_after(command, 5, lambda p: rank_processes(p.pid)[-1])
        step = check_stopped(code, err, r.dir("mpi"))
        done = r.run(r.command("mpi", ranks=2, stages=2, extra=["--checkpoint.resume=auto"]))
        compare_losses(losses_of(done.stdout), golden_losses, step + 1, TOLERANCE)
        compare_tensors(checkpoint(r.dir("mpi"), STEPS), golden_end, exact=False)
    elif case in ("interop", "interop-untied"):
        r.run(r.command("sharded", extra=["--checkpoint.form=sharded"]))
        sharded_end = checkpoint(r.dir("sharded"), STEPS)
        check_form(sharded_end, "sharded", 1)
        compare_tensors(sharded_end, golden_end, exact=True)
        for path in (golden_end, sharded_end):
            check_pytorch_loader(path, config, golden_validation)
    else:
        fail("unknown case " + case)
    print("ok: " + case)


if __name__ == "__main__":
    main()
