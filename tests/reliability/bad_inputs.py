#!/usr/bin/env python3
"""The bad-input table: every case starts a real MPI job on a damaged input.

usage: bad_inputs.py GEOTRAIN SCRATCH_DIR [--json REPORT] [--only NAME] -- MPIRUN [ARGS...]

Each case must give: exit status 2; exactly one "geotrain: " line on stderr,
naming the file and the field (a regex per case, written here from the
input's defect, not from geotrain's output); every rank gone within 10 s
(mpirun returned and no process of the case is left); and no existing file
changed: each job points its checkpoint folder and timing file at files
written before by a good run, whose bytes and times are compared after.
"""
import argparse
import concurrent.futures
import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import zlib
import time

import h5py
import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QUICK = os.path.join(REPO, "inputs", "quickstart.toml")
SCENARIOS = os.path.join(REPO, "inputs", "scenarios")
SHARD_MAGIC, SHARD_VERSION, HEADER_BYTES = 20240520, 1, 1024
ALL_GONE_S = 10.0
CASES_AT_ONCE = 3


MPIRUN = ["mpirun"]


def mpirun():
    return MPIRUN


def write(path, text_or_bytes):
    mode = "wb" if isinstance(text_or_bytes, bytes) else "w"
    with open(path, mode) as f:
        f.write(text_or_bytes)
    return path


def shard_bytes(tokens, count=None, magic=SHARD_MAGIC, version=SHARD_VERSION):
    header = struct.pack("<3i", magic, version, len(tokens) if count is None else count)
    header += bytes(HEADER_BYTES - len(header))
    return header + np.asarray(tokens, dtype="<u2").tobytes()


def snapshot(folder):
    """path -> (size, mtime, sha256) of every file under folder."""
    state = {}
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            st = os.stat(path)
            state[os.path.relpath(path, folder)] = (st.st_size, st.st_mtime_ns, digest)
    return state


def left_over(marker):
    """Processes whose command line holds this case's marker (ranks not gone)."""
    out = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    return [pid for pid in out if int(pid) != os.getpid()]


class Table:
    def __init__(self, geotrain, scratch):
        self.geotrain, self.scratch = geotrain, scratch
        self.bad = os.path.join(scratch, "bad")
        self.protected = os.path.join(scratch, "protected")
        self.checkpoints = os.path.join(self.protected, "checkpoints")
        self.timing = os.path.join(self.protected, "timing.h5")
        self.cases = []

    def prepare(self):
        """A good run writes the files the bad ones must leave alone."""
        shutil.rmtree(self.scratch, ignore_errors=True)
        os.makedirs(self.bad)
        os.makedirs(self.protected)
        good = mpirun() + ["-n", "2", self.geotrain, "train", QUICK, "--train.steps=2",
                           "--optimizer.warmup_steps=1", "--train.eval_batches=1",
                           "--checkpoint.dir=" + self.checkpoints, "--checkpoint.every_steps=1",
                           "--checkpoint.form=single",  # the damaged copies below are of one file
                           "--timing.file=" + self.timing]
        run = subprocess.run(good, capture_output=True, text=True, timeout=120)
        if run.returncode != 0:
            sys.exit("bad_inputs.py: the good run failed:\n" + run.stderr)
        self.good_checkpoint = os.path.join(self.checkpoints, "step_00000002.h5")
        # A checkpoint of another model (6 layers instead of 4), written alone.
        other_model = write(os.path.join(self.bad, "six-layers.toml"),
                            open(os.path.join(REPO, "inputs/models/tiny.toml")).read().replace("layers = 4", "layers = 6"))
        other = subprocess.run([self.geotrain, "train", QUICK, "--pipeline.stages=1", "--train.steps=1",
                                "--optimizer.warmup_steps=0", "--train.eval_batches=1", "--timing.file=",
                                "--model.file=" + other_model,
                                "--checkpoint.dir=" + os.path.join(self.bad, "other-model")],
                               capture_output=True, text=True, timeout=120)
        if other.returncode != 0:
            sys.exit("bad_inputs.py: the other-model run failed:\n" + other.stderr)
        self.other_model_checkpoint = os.path.join(self.bad, "other-model", "step_00000001.h5")

    # --- the table ---------------------------------------------------------
    def add(self, category, name, pattern, ranks=2, args=(), config=QUICK):
        self.cases.append(dict(category=category, name=name, pattern=pattern, ranks=ranks,
                               args=list(args), config=config))

    def bad_file(self, name, content):
        return write(os.path.join(self.bad, name), content)

    def damaged_checkpoint(self, name, edit):
        path = os.path.join(self.bad, name)
        shutil.copy(self.good_checkpoint, path)
        with h5py.File(path, "r+") as f:
            edit(f)
        return path

    def flipped_byte_checkpoint(self, name, dataset):
        """A copy of the good checkpoint with one byte of `dataset` flipped."""
        path = os.path.join(self.bad, name)
        shutil.copy(self.good_checkpoint, path)
        with h5py.File(path, "r") as f:
            at = f[dataset].id.get_offset() + f[dataset].id.get_storage_size() // 3
        with open(path, "r+b") as out:
            out.seek(at)
            byte = out.read(1)[0]
            out.seek(at)
            out.write(bytes([byte ^ 0x01]))
        return path

    def build(self):
        quick_text = open(QUICK).read().replace('"models/', '"' + os.path.join(REPO, "inputs/models/")) \
                                        .replace('"data/', '"' + os.path.join(REPO, "inputs/data/"))

        def config_with(name, old, new):
            assert old in quick_text, old
            return self.bad_file(name, quick_text.replace(old, new, 1))

        # Configuration
        self.add("config", "missing-file", r"no-such-config\.toml: cannot open",
                 config=os.path.join(self.bad, "no-such-config.toml"))
        self.add("config", "toml-syntax", r"syntax\.toml: line 2[0-9]",
                 config=config_with("syntax.toml", "[pipeline]", "[pipeline\nstages = = 2"))
        self.add("config", "unknown-key-in-file", r"typo\.toml: train\.stepz: unknown key",
                 config=config_with("typo.toml", "steps = 300", "stepz = 300"))
        self.add("config", "wrong-type", r"wrong-type\.toml: train\.steps: must be an integer",
                 config=config_with("wrong-type.toml", "steps = 300", 'steps = "many"'))
        # Overrides that the checks refuse on 2 ranks: the case, its message, the overrides.
        for name, pattern, *args in [
            ("unknown-key-override", r"command line: checkpoint\.evry_steps: unknown key", "--checkpoint.evry_steps=3"),
            ("unreadable-override", r"command line: train\.steps: must be an integer", "--train.steps=ten"),
            ("zero-micro-batch", r"train\.micro_batch_sequences: must be > 0", "--train.micro_batch_sequences=0"),
            ("zero-accumulation", r"train\.gradient_accumulation: must be > 0", "--train.gradient_accumulation=0"),
            ("layers-per-stage-sum", r"pipeline\.layers_per_stage: the stages hold 3 layers but the model has 4",
             "--pipeline.layers_per_stage=[1,2]"),
            ("layers-per-stage-count", r"pipeline\.layers_per_stage: has 3 entries", "--pipeline.layers_per_stage=[1,1,2]"),
            ("negative-deadline", r"network\.deadline_s: must be in \[0\.01", "--network.deadline_s=-1"),
            ("resume-auto-without-dir", r"checkpoint\.resume: auto needs checkpoint\.dir",
             "--checkpoint.dir=", "--checkpoint.resume=auto"),
            ("nccl-on-cpu", r"network\.transport: nccl needs device\.kind = cuda",
             "--network.transport=nccl", "--device.kind=cpu"),
            ("warmup-longer-than-run", r"optimizer\.warmup_steps: is 5, larger than train\.steps \(2\)", "--optimizer.warmup_steps=5"),
            ("bad-schedule", r"pipeline\.schedule: must be one of gpipe, 1f1b", "--pipeline.schedule=zb"),
            ("bad-placement", r"pipeline\.placement: must be one of planned", "--pipeline.placement=best"),
        ]:
            self.add("config", name, pattern, args=args)
        self.add("config", "stages-do-not-divide-ranks", r"quickstart\.toml: pipeline\.stages: 2 does not divide the 3 ranks",
                 ranks=3)
        self.add("config", "tensor-parallel-does-not-divide-ranks",
                 r"command line: pipeline\.tensor_parallel: 2 does not divide the 3 ranks", ranks=3,
                 args=["--pipeline.tensor_parallel=2"])
        self.add("config", "tensor-parallel-does-not-divide-heads",
                 r"command line: pipeline\.tensor_parallel: 3 does not divide the model's 4 heads", ranks=3,
                 args=["--pipeline.tensor_parallel=3", "--pipeline.stages=1"])
        self.add("config", "tensor-parallel-searched-without-search",
                 r"command line: pipeline\.tensor_parallel: must be >= 1 \(0: chosen by the layout search", ranks=2,
                 args=["--pipeline.tensor_parallel=0"])
        self.add("config", "more-stages-than-layers", r"command line: pipeline\.stages: 8 stages but the model has only 4 layers",
                 ranks=8, args=["--pipeline.stages=8"])
        self.add("config", "missing-model-file", r"no-such-model\.toml: cannot open",
                 args=["--model.file=" + os.path.join(self.bad, "no-such-model.toml")])
        self.add("config", "model-heads-do-not-divide", r"odd-heads\.toml: model\.heads",
                 args=["--model.file=" + self.bad_file("odd-heads.toml", "[model]\nname = \"odd\"\nlayers = 4\n"
                       "hidden = 128\nheads = 3\nsequence_length = 128\nvocabulary = 256\n")])

        # Scenario / matrix given as network.matrix
        def matrix(name, latency, bandwidth, extra=""):
            rows = lambda m: "[\n" + "".join("  [" + ", ".join(v for v in row) + "],\n" for row in m) + "]"
            return self.bad_file(name, "[network]\nlatency_ms = " + rows(latency) + "\nbandwidth_gbps = " +
                                 rows(bandwidth) + "\n" + extra)
        lat = [["0", "1"], ["1", "0"]]
        bw = [["0", "10"], ["10", "0"]]
        self.add("scenario", "non-square", r"non-square\.toml: network\.latency_ms",
                 args=["--network.matrix=" + matrix("non-square.toml", [["0", "1", "2"], ["1", "0", "2"]], bw)])
        self.add("scenario", "nan-latency", r"nan-latency\.toml: network\.latency_ms\[0\]\[1\]",
                 args=["--network.matrix=" + matrix("nan-latency.toml", [["0", "nan"], ["1", "0"]], bw)])
        self.add("scenario", "zero-bandwidth", r"zero-bandwidth\.toml: network\.bandwidth_gbps\[1\]\[0\]",
                 args=["--network.matrix=" + matrix("zero-bandwidth.toml", lat, [["0", "10"], ["0", "0"]])])
        self.add("scenario", "negative-bandwidth", r"negative-bandwidth\.toml: network\.bandwidth_gbps\[0\]\[1\]",
                 args=["--network.matrix=" + matrix("negative-bandwidth.toml", lat, [["0", "-5"], ["10", "0"]])])
        self.add("scenario", "infinite-latency", r"inf-latency\.toml: network\.latency_ms\[1\]\[0\]",
                 args=["--network.matrix=" + matrix("inf-latency.toml", [["0", "1"], ["inf", "0"]], bw)])
        self.add("scenario", "sites-count", r"site-count\.toml: network\.sites: has 3 names but the network has 2",
                 args=["--network.matrix=" + matrix("site-count.toml", lat, bw, 'sites = ["a", "b", "c"]\n')])
        self.add("scenario", "link-to-missing-site", r"missing-site\.toml: sites\.link\[0\]\.between\[1\]: site \"west\" is not in sites\.names",
                 args=["--network.matrix=" + self.bad_file("missing-site.toml",
                       '[sites]\nnames = ["north", "south"]\ndevices = [1, 1]\nintra_latency_ms = 1\n'
                       'intra_bandwidth_gbps = 10\ninter_latency_ms = 20\ninter_bandwidth_gbps = 1\n'
                       '[[sites.link]]\nbetween = ["north", "west"]\nlatency_ms = 30\n')])
        self.add("scenario", "wrong-device-count", r"two-sites-8\.toml: devices: the matrix has 8 devices but the job has 2 ranks",
                 args=["--network.matrix=" + os.path.join(SCENARIOS, "two-sites-8.toml")])
        self.add("scenario", "missing-matrix-file", r"no-such-matrix\.toml: cannot open",
                 args=["--network.matrix=" + os.path.join(self.bad, "no-such-matrix.toml")])
        self.add("scenario", "matrix-syntax", r"matrix-syntax\.toml: line 2",
                 args=["--network.matrix=" + self.bad_file("matrix-syntax.toml", "[network]\nlatency_ms = [[0, 1], [1, 0]\n")])

        # Checkpoints given as checkpoint.resume
        def resume(path):
            return ["--checkpoint.resume=" + path]
        truncated = os.path.join(self.bad, "truncated.h5")
        shutil.copy(self.good_checkpoint, truncated)
        os.truncate(truncated, os.path.getsize(truncated) // 2)
        self.add("checkpoint", "truncated", r"truncated\.h5", args=resume(truncated))
        self.add("checkpoint", "random-bytes", r"random-bytes\.h5",
                 args=resume(self.bad_file("random-bytes.h5", np.random.default_rng(8).bytes(65536))))
        self.add("checkpoint", "empty-file", r"empty\.h5", args=resume(self.bad_file("empty.h5", b"")))
        self.add("checkpoint", "missing-file", r"no-such-checkpoint\.h5",
                 args=resume(os.path.join(self.bad, "no-such-checkpoint.h5")))

        def reshape(f):
            name = "params/h.0.mlp.fc.weight"
            data = f[name][()]
            del f[name]
            half = data[:, : data.shape[1] // 2].astype("<f4")
            f.create_dataset(name, data=half).attrs["crc32"] = np.int64(zlib.crc32(half.tobytes()))  # with its checksum
        self.add("checkpoint", "wrong-shape", r"wrong-shape\.h5: /(params|optimizer/m)/h\.0\.mlp\.fc\.weight: shape",
                 args=resume(self.damaged_checkpoint("wrong-shape.h5", reshape)))

        self.add("checkpoint", "flipped-byte", r"flipped-byte\.h5: /params/h\.1\.mlp\.proj\.weight: damaged: .*checksum",
                 args=resume(self.flipped_byte_checkpoint("flipped-byte.h5", "params/h.1.mlp.proj.weight")))

        def version(f):
            f.attrs["format_version"] = np.int64(99)
        self.add("checkpoint", "format-version", r"format-version\.h5: .*format_version.*99",
                 args=resume(self.damaged_checkpoint("format-version.h5", version)))

        def drop(f):
            del f["optimizer/v/h.1.ln2.weight"]
        self.add("checkpoint", "missing-dataset", r"missing-dataset\.h5: /optimizer/v/h\.1\.ln2\.weight",
                 args=resume(self.damaged_checkpoint("missing-dataset.h5", drop)))

        def drop_attribute(f):
            del f.attrs["completed_steps"]
        self.add("checkpoint", "missing-attribute", r"missing-attribute\.h5: attribute completed_steps",
                 args=resume(self.damaged_checkpoint("missing-attribute.h5", drop_attribute)))
        def drop_tensor(f):
            for group in ("params", "optimizer/m", "optimizer/v"):
                del f[group + "/h.3.attn.proj.bias"]
        self.add("checkpoint", "tensor-missing-everywhere", r"tensor-gone\.h5: /params/h\.3\.attn\.proj\.bias: missing",
                 ranks=4, args=resume(self.damaged_checkpoint("tensor-gone.h5", drop_tensor)))
        self.add("checkpoint", "other-model", r"step_00000001\.h5: attribute model_layers: the checkpoint has 6 but the model being trained has 4",
                 args=resume(self.other_model_checkpoint))

        # Token shards given as data.train / data.validation
        good = list(np.frombuffer(open(os.path.join(REPO, "inputs/data/corpus_val.bin"), "rb").read()[HEADER_BYTES:],
                                  dtype="<u2")[:5000])
        self.add("data", "bad-magic", r"bad-magic\.bin: header\[0\] \(magic\)",
                 args=["--data.train=" + self.bad_file("bad-magic.bin", shard_bytes(good, magic=12345))])
        self.add("data", "truncated-shard", r"truncated\.bin: tokens: .*truncated",
                 args=["--data.train=" + self.bad_file("truncated.bin", shard_bytes(good)[:-100])])
        self.add("data", "token-out-of-vocabulary", r"big-token\.bin: .*300.*256",
                 args=["--data.train=" + self.bad_file("big-token.bin", shard_bytes(good[:100] + [300] + good[100:]))])
        self.add("data", "empty-shard", r"empty\.bin", args=["--data.train=" + self.bad_file("empty.bin", b"")])
        self.add("data", "version-2-shard", r"v2\.bin: header\[1\] \(version\)",
                 args=["--data.train=" + self.bad_file("v2.bin", shard_bytes(good, version=2))])
        self.add("data", "bad-validation-shard", r"val-magic\.bin: header\[0\] \(magic\)",
                 args=["--data.validation=" + self.bad_file("val-magic.bin", shard_bytes(good, magic=7))])
        self.add("data", "missing-shard", r"no-such-shard\.bin",
                 args=["--data.train=" + os.path.join(self.bad, "no-such-shard.bin")])

    # --- running -------------------------------------------------------------
    def run_case(self, case):
        # In every rank's command line, this case's alone: the cases run side by side.
        marker = os.path.join(self.scratch, "cases", case["category"], case["name"])
        os.makedirs(marker, exist_ok=True)
        cmd = (mpirun() + ["-n", str(case["ranks"]), self.geotrain, "train", case["config"],
                           "--train.steps=2", "--optimizer.warmup_steps=1", "--train.eval_batches=1",
                           "--checkpoint.dir=" + self.checkpoints, "--timing.file=" + self.timing,
                           "--train.metrics_file=" + os.path.join(marker, "metrics.jsonl")]
               + case["args"])
        before = snapshot(self.protected)
        start = time.monotonic()
        try:
            run = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
            code, stderr = run.returncode, run.stderr
        except subprocess.TimeoutExpired as e:
            code, stderr = None, (e.stderr or b"").decode(errors="replace")
        elapsed = time.monotonic() - start
        problems = []
        ours = [line for line in stderr.splitlines() if line.startswith("geotrain: ")]
        if code != 2:
            problems.append(f"exit status {code}, expected 2")
        if len(ours) != 1:
            problems.append(f"{len(ours)} geotrain lines on stderr, expected 1")
        elif not re.search(case["pattern"], ours[0]):
            problems.append("the line does not match " + case["pattern"])
        if elapsed > ALL_GONE_S:
            problems.append(f"the job took {elapsed:.1f} s to end, more than {ALL_GONE_S:.0f} s")
        leftover = left_over(marker)
        if leftover:
            problems.append("processes left: " + " ".join(leftover))
            subprocess.run(["pkill", "-9", "-f", marker])
        after = snapshot(self.protected)
        if after != before:
            changed = sorted(set(before.items()) ^ set(after.items()))
            problems.append("files changed: " + ", ".join(sorted({c[0] for c in changed})))
        return dict(category=case["category"], name=case["name"], ranks=case["ranks"], exit=code,
                    seconds=round(elapsed, 2), line=ours[0] if len(ours) == 1 else stderr.strip()[-400:],
                    problems=problems)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("geotrain")
    parser.add_argument("scratch")
    parser.add_argument("--json")
    parser.add_argument("--only")
    argv = sys.argv[1:]
    if "--" in argv:
        MPIRUN[:] = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    a = parser.parse_args(argv)
    table = Table(os.path.abspath(a.geotrain), os.path.abspath(a.scratch))
    table.prepare()
    table.build()
    # Most of a case is mpirun waiting for a failed job to end (about 1 s):
    # a few at a time, each with its own marker, its results printed in order.
    cases = [case for case in table.cases if not a.only or case["name"] == a.only]
    with concurrent.futures.ThreadPoolExecutor(max_workers=CASES_AT_ONCE) as pool:
        results = list(pool.map(table.run_case, cases))
    for r in results:
        status = "ok  " if not r["problems"] else "FAIL"
        print(f"{status} {r['category']:10s} {r['name']:28s} {r['seconds']:5.2f} s  {r['line']}")
        for p in r["problems"]:
            print("       " + p)
    failed = [r for r in results if r["problems"]]
    print(f"{len(results)} bad inputs, {len(results) - len(failed)} rejected as required, "
          f"slowest {max(r['seconds'] for r in results):.2f} s")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
