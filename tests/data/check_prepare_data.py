"""tools/prepare_data.py end to end: text in, shards and tokenizer out, and
back to the same text.

    check_prepare_data.py CASE --repo ROOT --geotrain BIN --checker BIN --work DIR

CASE:
  byte          files, a folder (--pattern, sorted, hidden files left out) and
                stdin; decoded shards = the input bytes, non-UTF-8 included;
                a stale tokenizer.json is removed; the split point is the first
                line/document boundary at or after 1 - F
  bpe           a tokenizer trained on the input: shards decode (library and
                C++) to <|endoftext|> + each document; C++ encode = the shard;
                text that spells <|endoftext|> stays text; same input, same
                bytes; encoding in chunks = encoding the whole text
  gpt2          GPT-2-format files (vocab.json + merges.txt, and tokenizer.json)
                made here with the tokenizers library: <|endoftext|> is the
                last id, as in GPT-2; both forms give the same shards
  bad-inputs    exit 2, one line naming the file/option (no tokenizers needed)
  bad-tokenizer-files   the same for tokenizer files (needs tokenizers)
  train-bpe     the tiny model trains on BPE data with --model.vocabulary = the
                tokenizer's; its checkpoint carries tokenizer.json's text; a
                vocabulary too small is exit 2 naming model.vocabulary
  unicode-tables  src/io/gpt2_unicode_classes.inc is what the installed
                tokenizers library gives (tools/make_unicode_tables.py)

Cases that need the `tokenizers` package exit 77 (ctest: skipped) with a
line saying so where this python lacks it.
"""
import argparse
import importlib.util
import json
import os
import re
import shutil
import struct
import subprocess
import sys

EOT = "<|endoftext|>"
SKIP = 77

MULTILINGUAL = ("Le café où l'élève naïf mangeait des crêpes était déjà fermé.\r\n"
                "Die Straße führt über die Brücke; Grüße aus München!\r\n"
                "Ο γρήγορος καφέ αλεπού. Съешь же ещё этих булок. 東京は日本の首都です。\n"
                "\ttabs\tand  double  spaces   \n\n\n"
                "numbers 12345 3.14 and emoji 👍🏽 — done.  \n")


class Check:
    def __init__(self, args):
        self.args = args
        self.failures = []
        self.tool = os.path.join(args.repo, "tools", "prepare_data.py")

    def expect(self, condition, what):
        print(("ok: " if condition else "FAIL: ") + what)
        if not condition:
            self.failures.append(what)
        return condition

    def run_tool(self, *arguments, stdin=None):
        return subprocess.run([sys.executable, self.tool, *arguments], input=stdin, capture_output=True, timeout=600)

    def prepare(self, *arguments, stdin=None):
        """Runs the tool; returns its summary line (failing the check if it did not succeed)."""
        done = self.run_tool(*arguments, stdin=stdin)
        out, err = done.stdout.decode(), done.stderr.decode()
        if not self.expect(done.returncode == 0 and len(out.splitlines()) == 1,
                           f"prepare_data.py {' '.join(arguments)}: exit 0 and one summary line"):
            print(out + err)
            sys.exit(1)
        return out.strip()

    def expect_input_error(self, name, arguments, pattern, stdin=None):
        done = self.run_tool(*arguments, stdin=stdin)
        err = done.stderr.decode()
        self.expect(done.returncode == 2 and len(err.splitlines()) == 1 and re.search(pattern, err)
                    and not done.stdout, f"{name}: exit 2, one line matching {pattern!r} (got {done.returncode}: {err!r})")

    def cpp_round_trip(self, shard, text_bytes):
        """geotrain's own tokenizer (C++) decodes the shard to `text_bytes` and encodes them to the shard."""
        text_file = shard + ".expected.txt"
        with open(text_file, "wb") as f:
            f.write(text_bytes)
        done = subprocess.run([self.args.checker, shard, text_file], capture_output=True, text=True, timeout=300)
        self.expect(done.returncode == 0, f"C++ round trip of {os.path.basename(shard)}: {done.stdout.strip()}"
                                          f"{done.stderr.strip()}")

    def work(self, name):
        path = os.path.join(self.args.work, name)
        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path)
        return path


def read_shard(path):
    """Token ids of an llm.c version-1 shard, header checked here (not with the tool's code)."""
    with open(path, "rb") as f:
        blob = f.read()
    magic, version, count = struct.unpack_from("<3i", blob, 0)
    assert (magic, version) == (20240520, 1), (path, magic, version)
    assert blob[12:1024] == bytes(1012), f"{path}: header past [2] is not zeros"
    assert len(blob) == 1024 + 2 * count, (path, len(blob), count)
    return list(struct.unpack_from(f"<{count}H", blob, 1024))


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode("utf-8"))
    return path


def corpus_text(repo, limit):
    """English text from the shipped corpus (byte tokens: the low byte of each id is the text)."""
    with open(os.path.join(repo, "inputs", "data", "corpus_train.bin"), "rb") as f:
        f.seek(1024)
        return bytes(f.read(2 * limit)[0::2]).decode("utf-8")


def tokenizers_or_skip():
    try:
        import tokenizers
    except ImportError:
        print(f"SKIP: the Python package 'tokenizers' is missing for {sys.executable} "
              "(pip install -r tools/requirements.txt; jobs/install-deps.sh installs it)")
        sys.exit(SKIP)
    return tokenizers


def check_split(check, documents, train_len, fraction, name):
    """The cut is the first line or document boundary at or after (1 - fraction) of the bytes."""
    text = b"".join(documents)
    total = len(text)
    target = max(1, int(total * (1 - fraction)))
    starts, offset = set(), 0
    for d in documents:
        starts.add(offset)
        offset += len(d)
    boundary = train_len in starts or text[train_len - 1:train_len] == b"\n"
    skipped = [p for p in range(target, train_len) if p in starts or text[p - 1:p] == b"\n"]
    check.expect(0 < train_len < total and boundary and train_len >= target and not skipped,
                 f"{name}: validation starts at byte {train_len} of {total}, the first boundary at or after {target}")


def case_byte(check):
    work = check.work("byte")
    docs = {"a.txt": b"First document.\nIt has two lines.\n",
            "b.txt": b"Second \xff\xfe not UTF-8 \x00 bytes\n" * 20,
            "sub/c.txt": "Third, with accents: café\nand no final line break".encode("utf-8")}
    for name, data in docs.items():
        write(os.path.join(work, "in", name), data)
    write(os.path.join(work, "in", "notes.md"), b"not a .txt file\n")
    write(os.path.join(work, "in", ".hidden.txt"), b"hidden\n")
    stdin_doc = b"From standard input.\n" * 30
    out = os.path.join(work, "out")
    write(os.path.join(out, "tokenizer.json"), b"{\"stale\": true}")
    summary = check.prepare(os.path.join(work, "in"), "-", "--out", out, "--validation-fraction", "0.25", stdin=stdin_doc)
    documents = [docs["a.txt"], docs["b.txt"], docs["sub/c.txt"], stdin_doc]
    train, val = read_shard(os.path.join(out, "train.bin")), read_shard(os.path.join(out, "val.bin"))
    check.expect(bytes(train) + bytes(val) == b"".join(documents),
                 "byte: train + val decode to the folder's files (sorted, .md and hidden left out), then stdin")
    check_split(check, documents, len(train), 0.25, "byte")
    check.expect(not os.path.exists(os.path.join(out, "tokenizer.json")), "byte: the stale tokenizer.json is removed")
    check.expect(f"{out}/train.bin {len(train)} tokens" in summary and "--model.vocabulary=256" in summary,
                 f"byte: summary names files, counts and the vocabulary: {summary}")
    check.cpp_round_trip(os.path.join(out, "train.bin"), bytes(train))
    check.cpp_round_trip(os.path.join(out, "val.bin"), bytes(val))


def bpe_documents(repo):
    return [corpus_text(repo, 60000), MULTILINGUAL * 3, "A short last document without a final line break."]


def check_text_shards(check, out, documents, eot_id, name, cpp=True):
    """Library and C++ decode the shards to <|endoftext|> + each document."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
    train, val = read_shard(os.path.join(out, "train.bin")), read_shard(os.path.join(out, "val.bin"))
    train_text = tok.decode(train, skip_special_tokens=False)
    val_text = tok.decode(val, skip_special_tokens=False)
    check.expect(train_text + val_text == "".join(EOT + d for d in documents),
                 f"{name}: train + val decode (tokenizers library) to <|endoftext|> + each document")
    check.expect((train + val).count(eot_id) == len(documents) and train[0] == eot_id,
                 f"{name}: exactly one <|endoftext|> (id {eot_id}) per document, the first token is one")
    separators = train.count(eot_id) * len(EOT.encode())
    check_split(check, [d.encode() for d in documents], len(train_text.encode()) - separators, 0.1, name)
    if cpp:
        check.cpp_round_trip(os.path.join(out, "train.bin"), train_text.encode())
        check.cpp_round_trip(os.path.join(out, "val.bin"), val_text.encode())
    return tok


def load_tool(repo):
    spec = importlib.util.spec_from_file_location("prepare_data", os.path.join(repo, "tools", "prepare_data.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def case_bpe(check):
    tokenizers_or_skip()
    work = check.work("bpe")
    documents = bpe_documents(check.args.repo)
    files = [write(os.path.join(work, "in", f"doc{i}.txt"), d) for i, d in enumerate(documents)]
    write(os.path.join(work, "in", "doc9-empty.txt"), b"")
    runs = []
    for run in ("out1", "out2"):
        out = os.path.join(work, run)
        summary = check.prepare(os.path.join(work, "in"), "--out", out, "--tokenizer", "bpe", "--vocab-size", "600")
        runs.append([open(os.path.join(out, n), "rb").read() for n in ("train.bin", "val.bin", "tokenizer.json")])
    check.expect(runs[0] == runs[1], "bpe: the same input gives byte-identical shards and tokenizer")
    out = os.path.join(work, "out1")
    vocabulary = int(re.search(r"--model\.vocabulary=(\d+)", summary).group(1))
    tok = check_text_shards(check, out, documents, 0, "bpe")
    check.expect(tok.get_vocab_size() == vocabulary and 257 <= vocabulary <= 600,
                 f"bpe: vocabulary {vocabulary} (at most --vocab-size 600) as the summary says: {summary}")

    literal = os.path.join(work, "literal")
    write(os.path.join(literal, "in.txt"), f"The string {EOT} is text here.\nSecond line\n" * 50)
    out = os.path.join(work, "out-literal")
    check.prepare(files[0], os.path.join(literal, "in.txt"), "--out", out, "--tokenizer", "bpe", "--vocab-size", "400")
    ids = read_shard(os.path.join(out, "train.bin")) + read_shard(os.path.join(out, "val.bin"))
    check.expect(ids.count(0) == 2, "bpe: text that spells <|endoftext|> is encoded as text, not as the separator")
    check_text_shards(check, out, [documents[0], open(os.path.join(literal, "in.txt")).read()], 0, "bpe literal",
                      cpp=False)

    tool = load_tool(check.args.repo)
    tricky = "a \nB x\n\nY 'x\n's z\n  \nQ\t\nR.\n" * 40 + MULTILINGUAL * 5
    whole = tok.encode(tricky, add_special_tokens=False).ids
    for size in (1, 7, 64):
        chunks = tool.safe_chunks(tricky, size)
        chunked = [i for c in chunks for i in tok.encode(c, add_special_tokens=False).ids]
        check.expect("".join(chunks) == tricky and len(chunks) > 10 and chunked == whole,
                     f"bpe: encoding {len(chunks)} chunks of ~{size} characters = encoding the whole text")


def make_gpt2_files(repo, folder):
    """GPT-2's file layout with a small vocabulary: vocab.json (token -> id,
    <|endoftext|> the last id as in GPT-2's 50256), merges.txt ("#version"
    line, then one merge a line); and the same as one tokenizer.json."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=700, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator([corpus_text(repo, 100000), MULTILINGUAL], trainer)
    files = os.path.join(folder, "files")
    os.makedirs(files)
    tok.model.save(files)
    vocab_path = os.path.join(files, "vocab.json")
    vocab = json.load(open(vocab_path, encoding="utf-8"))
    eot = len(vocab)
    vocab[EOT] = eot
    json.dump(vocab, open(vocab_path, "w", encoding="utf-8"), ensure_ascii=False)
    full = Tokenizer(models.BPE.from_file(vocab_path, os.path.join(files, "merges.txt")))
    full.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    full.decoder = decoders.ByteLevel()
    full.add_special_tokens([EOT])
    single = os.path.join(folder, "single")
    os.makedirs(single)
    full.save(os.path.join(single, "tokenizer.json"))
    return files, single, eot


def case_gpt2(check):
    tokenizers_or_skip()
    work = check.work("gpt2")
    files, single, eot = make_gpt2_files(check.args.repo, work)
    documents = bpe_documents(check.args.repo)
    inputs = [write(os.path.join(work, "in", f"doc{i}.txt"), d) for i, d in enumerate(documents)]
    shards = []
    for source in (files, single):
        out = os.path.join(work, "out-" + os.path.basename(source))
        summary = check.prepare(*inputs, "--out", out, "--tokenizer", "gpt2", "--gpt2-files", source)
        check.expect(f"--model.vocabulary={eot + 1}" in summary and f"{EOT} = {eot}" in summary,
                     f"gpt2 from {os.path.basename(source)}: vocabulary {eot + 1}, <|endoftext|> = {eot}: {summary}")
        # These files hold a small BPE in GPT-2's layout, not GPT-2's vocabulary: said so, not labelled gpt2.
        check.expect(f"not GPT-2's own ({eot + 1} ids, GPT-2 has 50257)" in summary and "(gpt2," not in summary,
                     f"gpt2 from {os.path.basename(source)}: another BPE labelled as GPT-2's: {summary}")
        check_text_shards(check, out, documents, eot, f"gpt2 from {os.path.basename(source)}")
        shards.append([open(os.path.join(out, n), "rb").read() for n in ("train.bin", "val.bin")])
    check.expect(shards[0] == shards[1], "gpt2: vocab.json + merges.txt and tokenizer.json give the same shards")


def case_bad_inputs(check):
    work = check.work("bad-inputs")
    out = os.path.join(work, "out")
    empty = write(os.path.join(work, "empty.txt"), b"")
    text = write(os.path.join(work, "text.txt"), b"line one\nline two\n" * 10)
    one_line = write(os.path.join(work, "one-line.txt"), b"no line break at all " * 10)
    latin1 = write(os.path.join(work, "latin1.txt"), "caf\xe9\n".encode("latin-1") * 10)
    os.makedirs(os.path.join(work, "no-txt"))
    write(os.path.join(work, "no-txt", "a.md"), b"x\n")
    gpt2_half = os.path.join(work, "gpt2-half")
    write(os.path.join(gpt2_half, "vocab.json"), b"{}")
    cases = [
        ("empty input", [empty, "--out", out], r"empty\.txt: no text"),
        ("empty stdin", ["-", "--out", out], r"-: no text"),
        ("missing file", [os.path.join(work, "nope.txt"), "--out", out], r"nope\.txt: no such file"),
        ("folder without matches", [os.path.join(work, "no-txt"), "--out", out], r"no-txt: no files matching \*\.txt"),
        ("one line", [one_line, "--out", out], r"one-line\.txt: one line of text"),
        ("not UTF-8 for bpe", [latin1, "--out", out, "--tokenizer", "bpe", "--vocab-size", "300"],
         r"latin1\.txt: byte 3: not UTF-8"),
        ("vocabulary too large", [text, "--out", out, "--tokenizer", "bpe", "--vocab-size", "70000"],
         r"--vocab-size: must be 257\.\.65536"),
        ("vocabulary too small", [text, "--out", out, "--tokenizer", "bpe", "--vocab-size", "256"],
         r"--vocab-size: must be 257"),
        ("bpe without size", [text, "--out", out, "--tokenizer", "bpe"], r"--vocab-size: required"),
        ("gpt2 without files", [text, "--out", out, "--tokenizer", "gpt2"], r"--gpt2-files: required"),
        ("gpt2 folder missing", [text, "--out", out, "--tokenizer", "gpt2", "--gpt2-files", os.path.join(work, "nope")],
         r"nope: no such folder"),
        ("gpt2 merges missing", [text, "--out", out, "--tokenizer", "gpt2", "--gpt2-files", gpt2_half],
         r"merges\.txt: no such file"),
        ("fraction", [text, "--out", out, "--validation-fraction", "1.5"], r"--validation-fraction: must be between"),
        ("unknown option", [text, "--out", out, "--bogus", "5"], r"command line: unrecognized arguments: --bogus"),
        ("abbreviated option", [text, "--out", out, "--vocab", "300"], r"command line: unrecognized arguments: --vocab"),
        ("no output", [text], r"command line: the following arguments are required: --out"),
    ]
    for name, arguments, pattern in cases:
        check.expect_input_error(name, arguments, pattern, stdin=b"" if "-" in arguments else None)
    check.expect(not os.path.exists(out), "bad inputs: nothing was written")


def case_bad_tokenizer_files(check):
    tokenizers_or_skip()
    work = check.work("bad-tokenizer-files")
    out = os.path.join(work, "out")
    text = write(os.path.join(work, "text.txt"), b"line one\nline two\n" * 10)
    golden = json.load(open(os.path.join(check.args.repo, "tests", "golden", "data", "tokenizer_bpe.json")))

    def folder(name, edit):
        spec = json.loads(json.dumps(golden))
        edit(spec)
        return os.path.dirname(write(os.path.join(work, name, "tokenizer.json"), json.dumps(spec)))

    big = folder("big", lambda s: s["model"]["vocab"].update({"\u0120zzzz": 70000}))
    meta = folder("meta", lambda s: s.update(pre_tokenizer={"type": "Metaspace", "replacement": "\u2581",
                                                             "prepend_scheme": "always", "split": True}))
    no_eot = folder("no-eot", lambda s: (s["added_tokens"][0].update(content="<|end|>"),
                                         s["model"]["vocab"].update({"<|end|>": s["model"]["vocab"].pop(EOT)})))
    gap = folder("gap", lambda s: s["model"]["vocab"].update({"\u0120zzzz": 2000}))
    prefix = folder("prefix", lambda s: s["pre_tokenizer"].update(add_prefix_space=True))
    broken = os.path.dirname(write(os.path.join(work, "broken", "tokenizer.json"), "{ not json"))
    cases = [
        ("vocabulary over 65536", big, r"big/tokenizer\.json: model\.vocab: 70001 ids, more than the 65536"),
        ("not byte-level", meta, r"meta/tokenizer\.json: pre_tokenizer\.type: is Metaspace"),
        ("no end-of-text", no_eot, r"no-eot/tokenizer\.json: model\.vocab: has no <\|endoftext\|>"),
        ("ids with a gap", gap, r"gap/tokenizer\.json: model\.vocab: no token has id 1024"),
        ("prefix space", prefix, r"prefix/tokenizer\.json: pre_tokenizer\.add_prefix_space: is true"),
        ("not JSON", broken, r"broken/tokenizer\.json: not a tokenizers file"),
    ]
    for name, source, pattern in cases:
        check.expect_input_error(name, [text, "--out", out, "--tokenizer", "gpt2", "--gpt2-files", source], pattern)
    check.expect(not os.path.exists(out), "bad tokenizer files: nothing was written")


def case_train_bpe(check):
    tokenizers_or_skip()
    import h5py
    work = check.work("train-bpe")
    source = write(os.path.join(work, "austen.txt"), corpus_text(check.args.repo, 300000))
    data = os.path.join(work, "data")
    summary = check.prepare(source, "--out", data, "--tokenizer", "bpe", "--vocab-size", "512")
    vocabulary = int(re.search(r"--model\.vocabulary=(\d+)", summary).group(1))
    tokenizer_file = os.path.join(data, "tokenizer.json")
    common = [check.args.geotrain, "train", f"--model.file={check.args.repo}/inputs/models/tiny.toml",
              f"--data.train={data}/train.bin", f"--data.validation={data}/val.bin", "--train.steps=3",
              "--train.eval_batches=2", "--optimizer.warmup_steps=1", "--device.kind=cpu", "--timing.file="]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run(common + ["--checkpoint.dir="], capture_output=True, text=True, env=env, timeout=300)
    pattern = (rf"tiny\.toml: model\.vocabulary: is 256 but the training data's tokenizer {re.escape(tokenizer_file)} "
               rf"has {vocabulary} ids: .*--model\.vocabulary={vocabulary}")
    check.expect(done.returncode == 2 and len(done.stderr.splitlines()) == 1 and re.search(pattern, done.stderr),
                 f"train-bpe: the tiny model's vocabulary 256 is refused, naming model.vocabulary and the "
                 f"tokenizer file: {done.stderr.strip()}")
    checkpoints = os.path.join(work, "checkpoints")
    done = subprocess.run(common + [f"--model.vocabulary={vocabulary}", f"--checkpoint.dir={checkpoints}"],
                          capture_output=True, text=True, env=env, timeout=600)
    check.expect(done.returncode == 0 and "final validation loss" in done.stdout,
                 f"train-bpe: 3 steps with --model.vocabulary={vocabulary}: {done.stdout.strip().splitlines()[-1:]}"
                 f"{done.stderr.strip()}")
    latest = os.path.join(checkpoints, open(os.path.join(checkpoints, "latest")).read().strip())
    with h5py.File(latest, "r") as f:
        carried = f.attrs.get("tokenizer")
    carried = carried.decode() if isinstance(carried, bytes) else carried
    check.expect(carried == open(tokenizer_file, encoding="utf-8").read(),
                 f"train-bpe: {os.path.basename(latest)} carries tokenizer.json's text ({len(carried or '')} characters)")


def case_unicode_tables(check):
    tokenizers_or_skip()
    work = check.work("unicode-tables")
    generated = os.path.join(work, "classes.inc")
    subprocess.run([sys.executable, os.path.join(check.args.repo, "tools", "make_unicode_tables.py"), generated],
                   check=True, capture_output=True, timeout=300)

    def tables(path):
        return [line for line in open(path, encoding="utf-8") if not line.startswith("//")]

    check.expect(tables(generated) == tables(os.path.join(check.args.repo, "src", "io", "gpt2_unicode_classes.inc")),
                 "unicode-tables: the committed letter/number/space tables are the installed library's")


CASES = {"byte": case_byte, "bpe": case_bpe, "gpt2": case_gpt2, "bad-inputs": case_bad_inputs,
         "bad-tokenizer-files": case_bad_tokenizer_files, "train-bpe": case_train_bpe,
         "unicode-tables": case_unicode_tables}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("case", choices=sorted(CASES))
    parser.add_argument("--repo", required=True)
    parser.add_argument("--geotrain", required=True)
    parser.add_argument("--checker", required=True)
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    check = Check(args)
    CASES[args.case](check)
    if check.failures:
        print(f"{len(check.failures)} check(s) failed")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
