#!/usr/bin/env python3
"""geotrain sample and geotrain eval, end to end on the real binary.

Alone (the tiny model on the shipped corpus, byte tokenizer):
  train           fixture: 30 steps alone, a checkpoint and a validation
                  every 15 steps (WORKDIR/single); 2 steps of a model with a
                  128-id vocabulary (WORKDIR/vocab128, for the bad-input tests).
  sample-seeds    one seed gives one text every time, another seed another;
                  top-k 1 is greedy at any temperature; the text starts with
                  the prompt.
  sample-pytorch  greedy text = an independent PyTorch greedy decode
                  (analysis/load_checkpoint.py, float64) of the same weights,
                  past the context length (the window slides); the same for a
                  seeded draw at temperature 1 with the documented rule
                  reimplemented here (greedy text of a briefly trained
                  model repeats itself; draws cover the vocabulary).
  sample-bpe      a model trained on BPE data (tools/prepare_data.py): its
                  training sample = geotrain sample = the tokenizers library's
                  decode of the ids, which start with the library's prompt ids.
  eval-single     eval of each checkpoint = the validation loss the run
                  printed at that step (the last: its final one), eval
                  without a checkpoint = the loss before training; eval writes
                  nothing.
Under mpirun (pipeline 2 stages x 2 replicas):
  mpi-train       fixture: 20 steps, a sample (temperature 0.8) and a
                  checkpoint every 10 steps (WORKDIR/pipeline).
  mpi-sample      each sample the pipeline printed = geotrain sample of that
                  step's checkpoint on one process, same prompt, seed and
                  temperature.
  mpi-sample-tensor-parallel  the same sample from 2-way tensor-parallel
                  units x 2 stages (10 steps, its own run).
  mpi-eval        eval under mpirun on the training layout, on 2-way tensor
                  parallelism x 2 replicas, and alone, of each
                  checkpoint = the run's validation loss at that step.

usage: check_sample_eval.py CASE GEOTRAIN CONFIG WORKDIR [-- MPIRUN...]
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "analysis"))

TOLERANCE = 1e-6  # relative, eval against the training run's validation loss
PROMPT = "It is a truth"
COMMON = ["--train.log_json=true", "--train.log_every_steps=5", "--optimizer.warmup_steps=2", "--train.eval_batches=4",
          "--timing.file=", "--train.metrics_file=", "--device.kind=cpu"]
PIPELINE = ["--pipeline.stages=2", "--pipeline.placement=rank-order", "--train.gradient_accumulation=2"]
PIPELINE_SAMPLE = ["--train.sample_every_steps=10", "--train.sample_tokens=40", "--train.sample_temperature=0.8",
                   "--train.sample_prompt=Elizabeth"]


def fail(message):
    sys.exit("FAILED: " + message)


def run(command, cwd=None):
    done = subprocess.run(command, capture_output=True, timeout=600, cwd=cwd)
    if done.returncode != 0:
        fail(f"exit {done.returncode}: {' '.join(command)}\n{done.stdout.decode(errors='replace')}\n"
             f"{done.stderr.decode(errors='replace')}")
    return done.stdout


def records(stdout, event):
    found = [json.loads(line) for line in stdout.decode().splitlines() if line.strip()]
    return [r for r in found if r["event"] == event]


def checkpoint(directory, step):
    """The step's checkpoint: a sharded one's folder (under mpirun) or the single file (alone)."""
    folder = os.path.join(directory, "ckpt", f"step_{step:08d}")
    return folder if os.path.isdir(folder) else folder + ".h5"


def sample(geotrain, path, *options):
    """The text geotrain sample prints (without the final line break), as bytes."""
    out = run([geotrain, "sample", "--checkpoint", path, "--device", "cpu", *options])
    if not out.endswith(b"\n"):
        fail(f"sample output does not end with a line break: {out!r}")
    return out[:-1]


def relative(a, b):
    return abs(a - b) / abs(b)


def train_alone(geotrain, config, workdir):
    for name in ("single", "vocab128"):
        shutil.rmtree(os.path.join(workdir, name), ignore_errors=True)
        os.makedirs(os.path.join(workdir, name))
    single = os.path.join(workdir, "single")
    out = run([geotrain, "train", config, *COMMON, "--pipeline.stages=1", "--train.steps=30",
               "--train.eval_every_steps=15", "--checkpoint.every_steps=15", f"--checkpoint.dir={single}/ckpt"])
    with open(os.path.join(single, "train.jsonl"), "wb") as f:
        f.write(out)
    vocab = os.path.join(workdir, "vocab128")
    run([geotrain, "train", config, *COMMON, "--pipeline.stages=1", "--train.steps=2", "--model.vocabulary=128",
         f"--checkpoint.dir={vocab}/ckpt"])
    print(f"trained: {checkpoint(single, 30)}, {checkpoint(vocab, 2)}")


def check_seeds(geotrain, workdir):
    path = checkpoint(os.path.join(workdir, "single"), 30)
    options = ["--prompt", PROMPT, "--tokens", "80", "--temperature", "1"]
    first, again = sample(geotrain, path, *options, "--seed", "1"), sample(geotrain, path, *options, "--seed", "1")
    other = sample(geotrain, path, *options, "--seed", "2")
    if first != again:
        fail(f"seed 1 gave two texts:\n{first!r}\n{again!r}")
    if first == other:
        fail(f"seeds 1 and 2 gave the same text: {first!r}")
    for text in (first, other):
        if not text.startswith(PROMPT.encode()) or len(text) != len(PROMPT) + 80:
            fail(f"not the prompt and 80 byte tokens: {text!r}")
    greedy = sample(geotrain, path, "--prompt", PROMPT, "--tokens", "40", "--temperature", "0")
    top1 = sample(geotrain, path, "--prompt", PROMPT, "--tokens", "40", "--temperature", "3", "--top-k", "1",
                  "--seed", "5")
    if greedy != top1:
        fail(f"top-k 1 at temperature 3 is not greedy:\n{top1!r}\n{greedy!r}")
    print(f"seed 1 twice: {first!r}\nseed 2: {other!r}\ngreedy = top-k 1: {greedy!r}")


class MT19937_64:
    """The 64-bit Mersenne Twister (C++ std::mt19937_64), written from its definition."""
    MASK = (1 << 64) - 1

    def __init__(self, seed):
        self.state = [seed & self.MASK]
        for i in range(1, 312):
            previous = self.state[-1]
            self.state.append((6364136223846793005 * (previous ^ (previous >> 62)) + i) & self.MASK)
        self.index = 312

    def __call__(self):
        if self.index == 312:
            for i in range(312):
                x = (self.state[i] & 0xFFFFFFFF80000000) | (self.state[(i + 1) % 312] & 0x7FFFFFFF)
                self.state[i] = self.state[(i + 156) % 312] ^ (x >> 1) ^ (0xB5026F5AA96619E9 if x & 1 else 0)
            self.index = 0
        y = self.state[self.index]
        self.index += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        return (y ^ (y >> 43)) & self.MASK


def reference_decode(path, prompt, count, temperature, seed):
    """PyTorch (float64) decode, each token from the last sequence_length tokens:
    greedy at temperature 0, else geotrain's documented draw (softmax at the
    temperature, u = 53 bits of mt19937_64 / 2^53, the first id, in id order,
    whose cumulative weight exceeds u * total). Returns the tokens and, per new
    token, the margin of the choice (greedy: the top-2 logit gap; a draw: the
    distance of u from the nearest cumulative boundary, as a probability), so
    that a float32/float64 near tie can be told from a real difference."""
    import torch
    from load_checkpoint import load_gpt
    model = load_gpt(path)
    generator = MT19937_64(seed)
    tokens, margins = list(prompt), []
    with torch.no_grad():
        for _ in range(count):
            logits = model.logits(torch.tensor([tokens[-model.sequence_length:]]))[0, -1]
            if temperature == 0:
                top = torch.topk(logits, 2)
                margins.append(float(top.values[0] - top.values[1]))
                tokens.append(int(torch.argmax(logits)))
                continue
            weights = torch.exp((logits - logits.max()) / temperature)
            cumulative = torch.cumsum(weights, 0) / weights.sum()
            u = (generator() >> 11) * 2.0 ** -53
            chosen = int(torch.searchsorted(cumulative, torch.tensor(u, dtype=cumulative.dtype), right=True))
            margins.append(float(torch.min(torch.abs(cumulative - u))))
            tokens.append(min(chosen, model.vocabulary - 1))
    return tokens, margins


def compare_decodes(label, ours, reference, margins, prompt_length, near):
    if len(ours) != len(reference):
        fail(f"{label}: {len(ours)} tokens, PyTorch {len(reference)}")
    for i, (a, b) in enumerate(zip(ours, reference)):
        if a == b:
            continue
        margin = margins[i - prompt_length]
        # float32 against float64: only a near tie may go either way.
        if margin > near:
            fail(f"{label}: token {i}: geotrain {a}, PyTorch {b} (margin {margin:.3g}):\n{bytes(ours)!r}\n"
                 f"{bytes(reference)!r}")
        print(f"{label}: token {i}: a near tie (margin {margin:.2g}) went the other way; compared up to it")
        return
    print(f"{label}: {len(ours) - prompt_length} tokens equal PyTorch's (smallest margin {min(margins):.3g}): "
          f"{bytes(ours)!r}")


def check_pytorch(geotrain, workdir):
    generator = MT19937_64(5489)  # the C++ standard's check: the 10000th output of the default seed
    for _ in range(9999):
        generator()
    if generator() != 9981545732273789042:
        fail("the reference mt19937_64 is wrong")
    path = checkpoint(os.path.join(workdir, "single"), 30)
    count = 150  # 13 + 150 > 128 positions: the last 35 tokens come from a sliding window
    prompt = list(PROMPT.encode())
    for temperature, seed, near in ((0, 1, 1e-4), (1, 11, 1e-5)):
        ours = list(sample(geotrain, path, "--prompt", PROMPT, "--tokens", str(count), "--temperature",
                           str(temperature), "--seed", str(seed)))
        reference, margins = reference_decode(path, prompt, count, temperature, seed)
        compare_decodes(f"temperature {temperature}", ours, reference, margins, len(prompt), near)


def check_bpe(geotrain, config, workdir):
    """A BPE checkpoint: the training sample and geotrain sample agree, and the
    tokenizers library (independent of geotrain's reader) encodes the prompt
    to the sample's first ids and decodes the ids to the printed text."""
    try:
        import h5py
        import tokenizers
    except ImportError:
        print(f"SKIP: the Python package 'tokenizers' is missing for {sys.executable} (tools/requirements.txt)")
        sys.exit(77)
    work = os.path.join(workdir, "bpe")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    repo = os.path.join(HERE, "..", "..")
    with open(os.path.join(repo, "inputs", "data", "corpus_train.bin"), "rb") as f:
        f.seek(1024)
        text = bytes(f.read(400000)[0::2])  # byte tokens: the low byte of each id is the text
    with open(os.path.join(work, "austen.txt"), "wb") as f:
        f.write(text)
    summary = run([sys.executable, os.path.join(repo, "tools", "prepare_data.py"), os.path.join(work, "austen.txt"),
                   "--out", os.path.join(work, "data"), "--tokenizer", "bpe", "--vocab-size", "512"]).decode()
    vocabulary = summary.split("--model.vocabulary=")[1].split()[0]
    prompt = "It is a truth"
    out = run([geotrain, "train", config, *COMMON, "--pipeline.stages=1", "--train.steps=20",
               f"--data.train={work}/data/train.bin", f"--data.validation={work}/data/val.bin",
               f"--model.vocabulary={vocabulary}", "--train.sample_every_steps=20", "--train.sample_tokens=30",
               f"--train.sample_prompt={prompt}", f"--checkpoint.dir={work}/ckpt"])
    record = records(out, "sample")[0]
    path = os.path.join(work, "ckpt", "step_00000020.h5")
    printed = sample(geotrain, path, "--prompt", prompt, "--tokens", "30", "--seed", "1")
    with h5py.File(path, "r") as f:
        library = tokenizers.Tokenizer.from_str(f.attrs["tokenizer"])
    prompt_ids = library.encode(prompt, add_special_tokens=False).ids
    if record["tokens"][:len(prompt_ids)] != prompt_ids or len(record["tokens"]) != len(prompt_ids) + 30:
        fail(f"the sample's ids {record['tokens']} do not start with the library's prompt ids {prompt_ids}")
    # The library's decode() replaces bytes that are not UTF-8 (a briefly
    # trained model's pieces often split characters): the bytes come from
    # its token strings through GPT-2's byte <-> character table instead.
    added = {token.content for token in library.get_added_tokens_decoder().values()}
    decoder = {character: byte for byte, character in gpt2_byte_characters().items()}
    expected = b"".join(token.encode() if token in added else bytes(decoder[c] for c in token)
                        for token in map(library.id_to_token, record["tokens"]))
    if printed != expected or record["text"] != expected.decode(errors="replace"):
        fail(f"geotrain sample printed {printed!r}, training {record['text']!r}; the library's tokens are "
             f"{expected!r}")
    print(f"BPE ({vocabulary} ids): training sample = geotrain sample = the library's tokens: {expected!r}")
    # Starting the byte-level corpus from the BPE checkpoint: other text for the same ids, refused naming both.
    refused = subprocess.run([geotrain, "train", config, *COMMON, "--pipeline.stages=1", "--train.steps=2",
                              f"--model.vocabulary={vocabulary}", f"--checkpoint.init_from={path}"],
                             capture_output=True, text=True, timeout=300)
    lines = refused.stderr.strip().splitlines()
    if refused.returncode != 2 or len(lines) != 1 or not re.search(
            r"checkpoint\.init_from: .*step_00000020\.h5 was trained with a BPE tokenizer .*but data\.train .* with "
            r"the byte tokenizer", lines[0]):
        fail(f"init_from of a BPE checkpoint on byte-level data: exit {refused.returncode}, {refused.stderr!r}")
    print(f"init_from across tokenizers refused: {lines[0]}")
    check_exported_tokenizer(geotrain, path, os.path.join(work, "hf"), prompt, prompt_ids)


def check_exported_tokenizer(geotrain, checkpoint, folder, prompt, prompt_ids):
    """convert --to-hf of a BPE checkpoint writes the tokenizer beside the weights: the tokenizers library
    reads tokenizer.json back to the same ids, and transformers' AutoTokenizer loads the folder (where the
    package is installed)."""
    import tokenizers
    run([geotrain, "convert", "--to-hf", checkpoint, "--out", folder])
    exported = tokenizers.Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json")) as f:
        settings = json.load(f)
    if exported.encode(prompt, add_special_tokens=False).ids != prompt_ids or settings.get("eos_token") != "<|endoftext|>":
        fail(f"{folder}: the exported tokenizer encodes {prompt!r} otherwise, or its config lacks eos: {settings}")
    try:
        import transformers
    except ImportError:
        print(f"SKIP: transformers is not installed for {sys.executable}: AutoTokenizer not tried on {folder}")
        return
    loaded = transformers.AutoTokenizer.from_pretrained(folder)
    if loaded(prompt)["input_ids"] != prompt_ids:
        fail(f"AutoTokenizer of {folder}: {loaded(prompt)['input_ids']} for {prompt!r}, expected {prompt_ids}")
    print(f"AutoTokenizer loads {folder}: {prompt!r} -> {prompt_ids}")


def gpt2_byte_characters():
    """GPT-2's table (its encoder.py bytes_to_unicode): printable bytes stand for
    themselves, the others for the characters from U+0100 on, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("\u00a1"), ord("\u00ac") + 1),
                 *range(ord("\u00ae"), ord("\u00ff") + 1)]
    table, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            table[byte] = chr(byte)
        else:
            table[byte] = chr(256 + extra)
            extra += 1
    return table


def eval_loss(command, cwd=None):
    out = records(run(command, cwd=cwd), "eval")
    if len(out) != 1:
        fail(f"not one eval record: {out}")
    return out[0]


def compare(label, got, expected):
    if relative(got, expected) > TOLERANCE:
        fail(f"{label}: eval {got!r}, training {expected!r} (relative {relative(got, expected):.2e})")
    print(f"{label}: eval {got:.9g}, training {expected:.9g} (relative {relative(got, expected):.1e})")


def snapshot(directory):
    return sorted((e.name, e.stat().st_size, e.stat().st_mtime_ns) for e in os.scandir(directory))


def check_eval_single(geotrain, config, workdir):
    single = os.path.join(workdir, "single")
    with open(os.path.join(single, "train.jsonl"), "rb") as f:
        trained = f.read()
    validations = {r["step"]: r["validation_loss"] for r in records(trained, "validation")}
    end = records(trained, "end")[0]
    before = snapshot(os.path.join(single, "ckpt"))
    cwd = tempfile.mkdtemp(dir=workdir)  # config defaults (metrics, timing) would write here
    base = [geotrain, "eval", config, "--pipeline.stages=1", "--train.eval_batches=4", "--train.log_json=true"]
    for step in (15, 30):
        got = eval_loss([*base, f"--checkpoint.resume={checkpoint(single, step)}"], cwd=cwd)
        if got["completed_steps"] != step:
            fail(f"eval says step {got['completed_steps']}, not {step}")
        compare(f"step {step}", got["validation_loss"], validations[step])
    compare("final", eval_loss([*base, f"--checkpoint.resume={checkpoint(single, 30)}"])["validation_loss"],
            end["final_validation_loss"])
    compare("no checkpoint", eval_loss(base, cwd=cwd)["validation_loss"], end["initial_validation_loss"])
    # auto: the directory's latest.
    got = eval_loss([*base, f"--checkpoint.dir={single}/ckpt", "--checkpoint.resume=auto"], cwd=cwd)
    compare("resume=auto", got["validation_loss"], validations[30])
    if os.listdir(cwd) or snapshot(os.path.join(single, "ckpt")) != before:
        fail(f"eval wrote files: {os.listdir(cwd)}, checkpoints {snapshot(os.path.join(single, 'ckpt'))}")
    text = run(base[:-1] + [f"--checkpoint.resume={checkpoint(single, 30)}"]).decode()
    if f"validation loss {end['final_validation_loss']:.6f} (perplexity " not in text:
        fail(f"text output does not show the final loss {end['final_validation_loss']:.6f}:\n{text}")
    print(text, end="")


def train_pipeline(geotrain, config, workdir, mpirun):
    directory = os.path.join(workdir, "pipeline")
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory)
    out = run([*mpirun, "-n", "4", geotrain, "train", config, *COMMON, *PIPELINE, *PIPELINE_SAMPLE,
               "--train.steps=20", "--train.eval_every_steps=10", "--checkpoint.every_steps=10",
               f"--checkpoint.dir={directory}/ckpt"])
    with open(os.path.join(directory, "train.jsonl"), "wb") as f:
        f.write(out)
    print(f"trained: {len(records(out, 'sample'))} samples, {checkpoint(directory, 20)}")


def check_pipeline_samples(geotrain, workdir):
    directory = os.path.join(workdir, "pipeline")
    with open(os.path.join(directory, "train.jsonl"), "rb") as f:
        samples = records(f.read(), "sample")
    if [r["step"] for r in samples] != [10, 20]:
        fail(f"samples at steps {[r['step'] for r in samples]}, expected 10 and 20")
    for r in samples:
        text = sample(geotrain, checkpoint(directory, r["step"]), "--prompt", "Elizabeth", "--tokens", "40",
                      "--temperature", "0.8", "--seed", "1")
        # Byte tokenizer: the ids are the bytes.
        if list(text) != r["tokens"] or text.decode(errors="replace") != r["text"]:
            fail(f"step {r['step']}: the pipeline sampled {bytes(r['tokens'])!r}, "
                 f"geotrain sample of the checkpoint {text!r}")
        print(f"step {r['step']}: pipeline = one process: {text!r}")


def check_pipeline_eval(geotrain, config, workdir, mpirun):
    directory = os.path.join(workdir, "pipeline")
    with open(os.path.join(directory, "train.jsonl"), "rb") as f:
        trained = f.read()
    validations = {r["step"]: r["validation_loss"] for r in records(trained, "validation")}
    final = records(trained, "end")[0]["final_validation_loss"]
    base = [geotrain, "eval", config, "--train.eval_batches=4", "--train.log_json=true", "--device.kind=cpu"]
    cwd = tempfile.mkdtemp(dir=workdir)  # the config's timing and metrics files would land here
    for step in (10, 20):
        resume = f"--checkpoint.resume={checkpoint(directory, step)}"
        under_mpirun = eval_loss([*mpirun, "-n", "4", *base, *PIPELINE, resume], cwd=cwd)["validation_loss"]
        compare(f"mpirun -n 4, step {step}", under_mpirun, validations[step])
        compare(f"alone, step {step}", eval_loss([*base, "--pipeline.stages=1", resume], cwd=cwd)["validation_loss"],
                validations[step])
        tensor_parallel = eval_loss([*mpirun, "-n", "4", *base, "--pipeline.stages=1", "--pipeline.tensor_parallel=2",
                                     resume], cwd=cwd)["validation_loss"]
        compare(f"mpirun -n 4, 2-way tensor parallel x 2 replicas, step {step}", tensor_parallel, validations[step])
    compare("final, mpirun -n 4", under_mpirun, final)
    if os.listdir(cwd):
        fail(f"eval wrote files: {os.listdir(cwd)}")


def check_tensor_parallel_samples(geotrain, config, workdir, mpirun):
    """Training on 2-way tensor-parallel units x 2 stages samples what one
    process samples from its checkpoint (each rank holds half the LM head)."""
    directory = os.path.join(workdir, "tensor-parallel")
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory)
    out = run([*mpirun, "-n", "4", geotrain, "train", config, *COMMON, "--pipeline.stages=2",
               "--pipeline.tensor_parallel=2", "--train.gradient_accumulation=4", *PIPELINE_SAMPLE,
               "--train.steps=10", "--checkpoint.every_steps=10", f"--checkpoint.dir={directory}/ckpt"])
    samples = records(out, "sample")
    if [r["step"] for r in samples] != [10]:
        fail(f"samples at steps {[r['step'] for r in samples]}, expected 10")
    text = sample(geotrain, checkpoint(directory, 10), "--prompt", "Elizabeth", "--tokens", "40", "--temperature",
                  "0.8", "--seed", "1")
    if list(text) != samples[0]["tokens"]:
        fail(f"the tensor-parallel run sampled {bytes(samples[0]['tokens'])!r}, geotrain sample {text!r}")
    print(f"step 10: tensor-parallel pipeline = one process: {text!r}")


def main():
    separator = sys.argv.index("--") if "--" in sys.argv else len(sys.argv)
    case, geotrain, config, workdir = sys.argv[1:separator]
    mpirun = sys.argv[separator + 1:]
    os.makedirs(workdir, exist_ok=True)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    cases = {
        "train": lambda: train_alone(geotrain, config, workdir),
        "sample-seeds": lambda: check_seeds(geotrain, workdir),
        "sample-pytorch": lambda: check_pytorch(geotrain, workdir),
        "eval-single": lambda: check_eval_single(geotrain, config, workdir),
        "sample-bpe": lambda: check_bpe(geotrain, config, workdir),
        "mpi-train": lambda: train_pipeline(geotrain, config, workdir, mpirun),
        "mpi-sample": lambda: check_pipeline_samples(geotrain, workdir),
        "mpi-sample-tensor-parallel": lambda: check_tensor_parallel_samples(geotrain, config, workdir, mpirun),
        "mpi-eval": lambda: check_pipeline_eval(geotrain, config, workdir, mpirun),
    }
    if case not in cases:
        fail(f"unknown case {case}; known: {', '.join(cases)}")
    cases[case]()


if __name__ == "__main__":
    main()
