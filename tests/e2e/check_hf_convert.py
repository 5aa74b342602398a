#!/usr/bin/env python3
"""geotrain convert and checkpoint.init_from, end to end, against an
independent PyTorch GPT-2 (hf_gpt2_reference.py, which never calls geotrain).

  loss         a random GPT-2 folder (2 layers, n_embd 32, 4 heads, vocabulary
               256; names under "transformer.", attention-mask buffers, the
               tied lm_head) -> convert --from-hf -> train --checkpoint.init_from:
               geotrain's validation loss before training equals the reference's
               on the same windows of inputs/data/corpus_val.bin within 1e-5
               relative; with n_positions 96 and --sequence-length 64 the same.
  round-trip   from-hf -> to-hf gives every tensor back bit for bit, and F16 /
               BF16 tensors read as their exact float32 widening.
  fine-tune    5 steps from the converted model (loss falls, step-5 checkpoint
               with moments); --to-hf of that checkpoint loads in the reference
               and gives geotrain's final validation loss within 1e-5.
  mpi          init_from under mpirun, 2 stages x 2 replicas: the validation
               loss before training equals the reference's.
  bad-inputs   missing file, unknown tensor, wrong shape, unsupported dtype,
               unsupported architecture fields, lm_head not tied, truncation,
               resume of a weights-only file, init_from with resume or another
               shape: exit 2, one line on stderr naming the file and field.

usage: check_hf_convert.py CASE GEOTRAIN SOURCE_DIR WORKDIR [-- MPIRUN...]
"""
import json
import os
import re
import shutil
import subprocess
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_gpt2_reference as ref  # noqa: E402

TOLERANCE = 1e-5
LAYERS, HIDDEN, HEADS, VOCABULARY, T, B = 2, 32, 4, 256, 64, 4


def fail(message):
    sys.exit("FAILED: " + message)


class Case:
    def __init__(self, geotrain, source, workdir, mpirun):
        self.geotrain, self.source, self.workdir, self.mpirun = geotrain, source, workdir, mpirun
        shutil.rmtree(workdir, ignore_errors=True)
        os.makedirs(workdir)
        self.validation = os.path.join(source, "inputs", "data", "corpus_val.bin")
        self.config = ref.hf_config(LAYERS, HIDDEN, HEADS, VOCABULARY, T)
        self.tensors = ref.random_gpt2(self.config, seed=20)

    def path(self, name):
        return os.path.join(self.workdir, name)

    def run(self, args, expect=0, mpi_ranks=0):
        command = [*self.mpirun, "-n", str(mpi_ranks), self.geotrain, *args] if mpi_ranks else [self.geotrain, *args]
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        if done.returncode != expect:
            fail(f"exit {done.returncode} (expected {expect}): {' '.join(command)}\n{done.stdout}\n{done.stderr}")
        return done

    def convert_from(self, folder, out, *extra):
        self.run(["convert", "--from-hf", folder, "--out", out, *extra])
        return out

    def train_args(self, steps=1, eval_batches=1, extra=()):
        data = os.path.join(self.source, "inputs", "data")
        return ["train", f"--model.file={os.path.join(self.source, 'inputs', 'models', 'tiny.toml')}",
                f"--model.layers={LAYERS}", f"--model.hidden={HIDDEN}", f"--model.heads={HEADS}",
                f"--model.vocabulary={VOCABULARY}", f"--model.sequence_length={T}",
                f"--data.train={os.path.join(data, 'corpus_train.bin')}", f"--data.validation={self.validation}",
                f"--train.steps={steps}", f"--train.micro_batch_sequences={B}", f"--train.eval_batches={eval_batches}",
                "--train.eval_every_steps=0", "--optimizer.warmup_steps=0", "--device.kind=cpu", "--timing.file=",
                "--train.metrics_file=", "--train.log_json=true", "--checkpoint.dir=", *extra]

    def reference_loss(self, config, tensors, sequences):
        inputs, targets = ref.windows(ref.read_shard(self.validation), 0, sequences, T)
        return ref.gpt2_loss(config, tensors, inputs, targets)


def end_record(stdout):
    records = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    ends = [r for r in records if r["event"] == "end"]
    if len(ends) != 1:
        fail("no end record in:\n" + stdout)
    return ends[0], [r["loss"] for r in records if r["event"] == "step"]


def expect_close(what, got, want):
    if not abs(got - want) <= TOLERANCE * abs(want):
        fail(f"{what}: geotrain {got!r}, reference {want!r} (relative {abs(got - want) / abs(want):.2e})")
    print(f"ok: {what}: geotrain {got:.9g}, reference {want:.9g} (relative {abs(got - want) / abs(want):.1e})")


def case_loss(c):
    folder = c.path("hf")
    ref.write_folder(folder, c.config, c.tensors, with_buffers=True, with_head=True)
    checkpoint = c.convert_from(folder, c.path("converted.h5"))
    done = c.run(c.train_args(extra=[f"--checkpoint.init_from={checkpoint}"]))
    if "initialised from" not in done.stderr:
        fail("no 'initialised from' note:\n" + done.stderr)
    expect_close("validation loss of the converted model", end_record(done.stdout)[0]["initial_validation_loss"],
                 c.reference_loss(c.config, c.tensors, B))
    # A longer context cut to the run's: the same model on the same windows.
    longer = dict(c.config, n_positions=96, n_ctx=96)
    tensors = dict(c.tensors)
    tensors["wpe.weight"] = np.concatenate([c.tensors["wpe.weight"], ref.random_gpt2(longer, 21)["wpe.weight"][T:]])
    ref.write_folder(c.path("hf-96"), longer, tensors, prefix="")
    cut = c.convert_from(c.path("hf-96"), c.path("cut.h5"), "--sequence-length", str(T))
    with h5py.File(checkpoint) as a, h5py.File(cut) as b:
        if int(b.attrs["model_sequence_length"]) != T or not all(
                np.array_equal(a["params"][n][()], b["params"][n][()]) for n in a["params"]):
            fail("--sequence-length 64 of n_positions 96 differs from the 64-position model")
    print("ok: --sequence-length keeps the first positions")


def case_round_trip(c):
    folder = c.path("hf")
    ref.write_folder(folder, c.config, c.tensors, with_buffers=True, with_head=True)
    c.convert_from(folder, c.path("converted.h5"))
    with h5py.File(c.path("converted.h5")) as f:
        if int(f.attrs["weights_only"]) != 1 or "optimizer" in f or int(f.attrs["completed_steps"]) != 0:
            fail("the converted file is not marked weights-only without /optimizer")
    c.run(["convert", "--to-hf", c.path("converted.h5"), "--out", c.path("back")])
    config, back, metadata = ref.load_folder(c.path("back"))
    if metadata.get("format") != "pt" or sorted(back) != sorted(c.tensors):
        fail(f"metadata {metadata}; names {sorted(set(back) ^ set(c.tensors))} differ")
    for name, value in c.tensors.items():
        if back[name].shape != value.shape or back[name].tobytes() != value.tobytes():
            fail(f"{name}: not bit-identical after from-hf -> to-hf")
    for key, want in c.config.items():
        if key in ("n_layer", "n_embd", "n_head", "vocab_size", "n_positions", "activation_function",
                   "layer_norm_epsilon", "model_type", "tie_word_embeddings") and config.get(key) != want:
            fail(f"config.json {key}: {config.get(key)!r}, expected {want!r}")
    print(f"ok: {len(back)} tensors bit-identical after from-hf -> to-hf; config.json as GPT2LMHeadModel reads it")
    narrow = {"wte.weight": "F16", "h.0.attn.c_attn.weight": "F16", "h.1.mlp.c_fc.weight": "BF16", "ln_f.bias": "BF16"}
    ref.write_folder(c.path("hf-narrow"), c.config, c.tensors, prefix="", dtypes=narrow)
    c.convert_from(c.path("hf-narrow"), c.path("narrow.h5"))
    c.run(["convert", "--to-hf", c.path("narrow.h5"), "--out", c.path("narrow-back")])
    back = ref.load_folder(c.path("narrow-back"))[1]
    for name, value in c.tensors.items():
        want = ref.widened(value, narrow.get(name, "F32"))
        if back[name].tobytes() != want.tobytes():
            fail(f"{name} stored as {narrow.get(name, 'F32')}: not its exact float32 widening")
    print("ok: F16 and BF16 tensors widen exactly")


def case_fine_tune(c):
    ref.write_folder(c.path("hf"), c.config, c.tensors)
    checkpoint = c.convert_from(c.path("hf"), c.path("converted.h5"))
    done = c.run(c.train_args(steps=5, eval_batches=2, extra=[
        f"--checkpoint.init_from={checkpoint}", f"--checkpoint.dir={c.path('run')}", "--optimizer.learning_rate=3e-3"]))
    end, losses = end_record(done.stdout)
    if not end["final_validation_loss"] < end["initial_validation_loss"] or len(losses) != 5:
        fail(f"fine-tuning did not lower the validation loss: {end}")
    trained = c.path("run/step_00000005.h5")
    with h5py.File(trained) as f:
        if int(f.attrs["completed_steps"]) != 5 or "weights_only" in f.attrs or "optimizer" not in f:
            fail("the fine-tuned checkpoint is not a full step-5 checkpoint")
    c.run(["convert", "--to-hf", trained, "--out", c.path("exported")])
    config, tensors, _ = ref.load_folder(c.path("exported"))
    expect_close("validation loss of the exported fine-tuned model", end["final_validation_loss"],
                 c.reference_loss(config, tensors, 2 * B))
    # A requeued fine-tuning job (resume = auto) continues its own checkpoint.
    again = c.run(c.train_args(steps=6, eval_batches=2, extra=[
        f"--checkpoint.init_from={checkpoint}", f"--checkpoint.dir={c.path('run')}", "--checkpoint.resume=auto"]))
    if "resumed from" not in again.stderr or "checkpoint.init_from" not in again.stderr:
        fail("resume = auto with init_from did not continue the run's checkpoint:\n" + again.stderr)
    print("ok: resume = auto continues the fine-tuning run's own checkpoint")


def case_mpi(c):
    if not c.mpirun:
        fail("the mpi case needs -- MPIRUN...")
    ref.write_folder(c.path("hf"), c.config, c.tensors)
    checkpoint = c.convert_from(c.path("hf"), c.path("converted.h5"))
    done = c.run(c.train_args(eval_batches=2, extra=[f"--checkpoint.init_from={checkpoint}", "--pipeline.stages=2",
                                                     "--pipeline.placement=rank-order"]), mpi_ranks=4)
    expect_close("validation loss under mpirun (2 stages x 2 replicas)",
                 end_record(done.stdout)[0]["initial_validation_loss"], c.reference_loss(c.config, c.tensors, 2 * B))


def expect_input_error(c, pattern, args):
    done = c.run(args, expect=2)
    lines = done.stderr.strip().splitlines()
    if len(lines) != 1 or not re.search(pattern, lines[0]):
        fail(f"{' '.join(args)}: stderr does not match {pattern!r}:\n{done.stderr}")
    print("ok: exit 2: " + lines[0])


def bad_folder(c, name, config_changes=None, drop=None, add=None, dtypes=None, truncate=0, head=None):
    folder = c.path(name)
    tensors = {k: v for k, v in c.tensors.items() if k != drop}
    tensors.update(add or {})
    ref.write_folder(folder, dict(c.config, **(config_changes or {})), tensors, prefix="")
    stored = {k: ref.narrow(v, (dtypes or {}).get(k, "F32")) for k, v in tensors.items()}
    if head is not None:
        stored["lm_head.weight"] = ("F32", head)
    ref.write_safetensors(os.path.join(folder, "model.safetensors"), stored, {"format": "pt"}, truncate)
    return folder


def case_bad_inputs(c):
    convert = lambda folder: ["convert", "--from-hf", folder, "--out", c.path("out.h5")]
    wte = c.tensors["wte.weight"]
    cases = [
        (r"no-such-folder/config\.json: cannot open", convert(c.path("no-such-folder"))),
        (r"model\.safetensors: tensor 'h\.0\.attn\.c_extra\.weight': not a parameter",
         convert(bad_folder(c, "unknown", add={"h.0.attn.c_extra.weight": np.zeros((4, 4), np.float32)}))),
        (r"model\.safetensors: tensor 'ln_f\.bias': missing", convert(bad_folder(c, "missing", drop="ln_f.bias"))),
        (r"model\.safetensors: tensor 'h\.1\.mlp\.c_fc\.weight': shape \[128, 32\], but config\.json's model needs \[32, 128\]",
         convert(bad_folder(c, "shape", add={"h.1.mlp.c_fc.weight": np.zeros((128, 32), np.float32)}))),
        (r"model\.safetensors: tensor 'wpe\.weight': dtype F64 is not supported",
         convert(bad_folder(c, "dtype-f64", dtypes={"wpe.weight": "F64"}))),
        (r"model\.safetensors: tensor 'wte\.weight': dtype I32 is not supported",
         convert(bad_folder(c, "dtype-i32", dtypes={"wte.weight": "I32"}))),
        (r"config\.json: activation_function: 'relu' is not implemented",
         convert(bad_folder(c, "relu", {"activation_function": "relu"}))),
        (r"config\.json: layer_norm_epsilon: 1e-06 differs", convert(bad_folder(c, "eps", {"layer_norm_epsilon": 1e-6}))),
        (r"config\.json: n_inner: 64 is not supported", convert(bad_folder(c, "inner", {"n_inner": 64}))),
        (r"config\.json: model_type: \"llama\" is not supported", convert(bad_folder(c, "llama", {"model_type": "llama"}))),
        (r"config\.json: n_head: missing", convert(no_key_folder(c, "no-heads", "n_head"))),
        # A BERT folder has none of GPT-2's shape keys: the model type is named, not a missing n_layer.
        (r"config\.json: model_type: \"bert\" is not supported \(not a GPT-2 model",
         convert(bert_like_folder(c))),
        (r"model\.safetensors: missing: the folder holds pytorch_model\.bin .*safe_serialization=True",
         convert(pickle_only_folder(c))),
        (r"model\.safetensors: tensor 'lm_head\.weight': differs from wte\.weight",
         convert(bad_folder(c, "untied", head=(wte + 1).astype(np.float32)))),
        (r"model\.safetensors: tensor '[^']+': data_offsets .* outside", convert(bad_folder(c, "truncated", truncate=100))),
        (r"no-such\.h5: cannot open file", ["convert", "--to-hf", c.path("no-such.h5"), "--out", c.path("x")]),
        (r"command line: convert: needs --from-hf", ["convert", "--out", c.path("x")]),
    ]
    for pattern, args in cases:
        expect_input_error(c, pattern, args)
    ref.write_folder(c.path("hf"), c.config, c.tensors)
    weights = c.convert_from(c.path("hf"), c.path("converted.h5"))
    # --from-hf onto an existing checkpoint: refused (and kept) unless --overwrite.
    before = os.path.getmtime(weights), os.path.getsize(weights)
    expect_input_error(c, r"command line: --out: .*converted\.h5 exists; name a new file, or add --overwrite",
                       ["convert", "--from-hf", c.path("hf"), "--out", weights])
    if (os.path.getmtime(weights), os.path.getsize(weights)) != before:
        fail(f"{weights} changed although the conversion onto it was refused")
    c.convert_from(c.path("hf"), weights, "--overwrite")
    expect_input_error(c, r"converted\.h5: attribute weights_only: .*start from it with checkpoint\.init_from, not checkpoint\.resume",
                       c.train_args(extra=[f"--checkpoint.resume={weights}"]))
    expect_input_error(c, r"command line: checkpoint\.init_from: cannot be combined with checkpoint\.resume",
                       c.train_args(extra=[f"--checkpoint.init_from={weights}", f"--checkpoint.resume={weights}"]))
    expect_input_error(c, r"model\.hidden: 64 contradicts the checkpoint's 32 \(.*converted\.h5: attribute model_hidden\)",
                       c.train_args(extra=[f"--checkpoint.init_from={weights}", "--model.hidden=64"]))
    expect_input_error(c, r"absent\.h5: cannot open file \(no such checkpoint\)",
                       c.train_args(extra=[f"--checkpoint.init_from={c.path('absent.h5')}"]))
    check_to_hf_refuses_a_full_folder(c, weights)


def check_to_hf_refuses_a_full_folder(c, weights):
    """--to-hf into a folder that holds files: exit 2 and nothing changed,
    unless --overwrite, which replaces the model's files and removes the
    stale ones (pytorch_model.bin) a loader could pick up instead."""
    folder = c.path("full")
    ref.write_folder(folder, dict(c.config, n_layer=7), c.tensors)
    with open(os.path.join(folder, "pytorch_model.bin"), "wb") as f:
        f.write(b"stale")
    before = {name: open(os.path.join(folder, name), "rb").read() for name in sorted(os.listdir(folder))}
    expect_input_error(c, r"command line: --out: .*full is not empty \(it holds .*\); name a new or empty folder, or add "
                          r"--overwrite", ["convert", "--to-hf", weights, "--out", folder])
    after = {name: open(os.path.join(folder, name), "rb").read() for name in sorted(os.listdir(folder))}
    if after != before:
        fail("a refused --to-hf changed the folder")
    c.run(["convert", "--to-hf", weights, "--out", folder, "--overwrite"])
    if os.path.exists(os.path.join(folder, "pytorch_model.bin")):
        fail("--overwrite left the stale pytorch_model.bin beside the new weights")
    with open(os.path.join(folder, "config.json")) as f:
        if json.load(f)["n_layer"] != LAYERS:
            fail("--overwrite did not replace config.json")
    os.makedirs(c.path("empty"))
    c.run(["convert", "--to-hf", weights, "--out", c.path("empty")])
    print("ok: --to-hf refuses a folder with files (exit 2, unchanged); --overwrite replaces them; an empty folder is fine")


def bert_like_folder(c):
    folder = no_key_folder(c, "bert", "n_layer")
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(dict(config, model_type="bert", architectures=["BertForMaskedLM"]), f)
    return folder


def pickle_only_folder(c):
    """A folder saved without safetensors: config.json and pytorch_model.bin only."""
    folder = bad_folder(c, "pickle-only")
    os.replace(os.path.join(folder, "model.safetensors"), os.path.join(folder, "pytorch_model.bin"))
    return folder


def no_key_folder(c, name, key):
    folder = bad_folder(c, name)
    config = dict(c.config)
    del config[key]
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    return folder


CASES = {"loss": case_loss, "round-trip": case_round_trip, "fine-tune": case_fine_tune, "mpi": case_mpi,
         "bad-inputs": case_bad_inputs}


def main():
    args = sys.argv[1:]
    mpirun = args[args.index("--") + 1:] if "--" in args else []
    args = args[:args.index("--")] if "--" in args else args
    if len(args) != 4 or args[0] not in CASES:
        sys.exit(__doc__)
    case, geotrain, source, workdir = args
    CASES[case](Case(geotrain, source, workdir, mpirun))
    print(f"ok: {case}")


if __name__ == "__main__":
    main()
