#!/usr/bin/env python3
"""Turns text files into training data for `geotrain train`: token shards in
llm.c's format and the tokenizer that made them, side by side.

    python3 tools/prepare_data.py INPUT... --out DIR [--tokenizer byte|bpe|gpt2]
        [--vocab-size N] [--gpt2-files DIR] [--validation-fraction F] [--pattern GLOB]

INPUT: text files, folders (every file matching --pattern, default *.txt,
found recursively, in sorted order) or - for standard input. Each file is one
document.

Writes DIR/train.bin and DIR/val.bin (256 little-endian int32: magic 20240520,
version 1, token count, zeros; then uint16 token ids) and, for bpe and gpt2,
DIR/tokenizer.json (Hugging Face tokenizers JSON). geotrain takes a shard's
tokenizer from the tokenizer.json in its folder, keeps its text in every
checkpoint, and `geotrain sample` decodes with it. No tokenizer.json means the
byte tokenizer, so --tokenizer byte removes a stale one from DIR.

Tokenizers:
  byte  token = byte value, vocabulary 256; any bytes; documents are joined
        as they are (no id is left for a separator).
  bpe   byte-level BPE like GPT-2's (any text encodes), trained with the
        `tokenizers` package on the training part only, to --vocab-size ids
        at most (pairs seen at least twice); id 0 is <|endoftext|>.
  gpt2  GPT-2's tokenizer from --gpt2-files DIR: DIR/tokenizer.json, or
        DIR/vocab.json + DIR/merges.txt, already on disk (nothing is
        downloaded); <|endoftext|> is id 50256.
For bpe and gpt2 every document starts with <|endoftext|> (as llm.c's data
scripts do), so the model sees where documents begin and end; text that
happens to contain the string "<|endoftext|>" is encoded as plain text.

Validation: the last --validation-fraction (default 0.1) of the text, cut at
the first line or document boundary at or after that point (or, where there is
none, the last one before it); training gets everything before the cut, so
the two never overlap, and the same input always gives the same files.

Prints one summary line; exit 2 with one line naming the file and the field
for bad input (no text, a missing file, a vocabulary over 65536, ...), exit 1
when the output cannot be written.
"""
import argparse
import array
import fnmatch
import json
import os
import sys

MAGIC, VERSION, HEADER_INTS = 20240520, 1, 256
MAX_VOCABULARY = 65536  # uint16 token ids (llm.c's version-1 shards)
EOT = "<|endoftext|>"
CHUNK_CHARS = 1 << 20  # texts are encoded in pieces about this long (see safe_chunks)


class InputError(Exception):
    """Bad input: exit 2 with the message."""


class ArgumentParser(argparse.ArgumentParser):
    def error(self, message):  # one line and exit 2, like every other bad input
        raise InputError(f"command line: {message} (--help)")


def parse_args(argv):
    parser = ArgumentParser(prog="prepare_data.py", description=__doc__.split("\n\n")[0], allow_abbrev=False,
                            formatter_class=argparse.RawDescriptionHelpFormatter,
                            epilog="\n\n".join(__doc__.split("\n\n")[2:]))
    parser.add_argument("inputs", nargs="+", metavar="INPUT", help="text files, folders, or - for stdin")
    parser.add_argument("--out", required=True, metavar="DIR", help="output folder (created if missing)")
    parser.add_argument("--tokenizer", choices=["byte", "bpe", "gpt2"], default="byte")
    parser.add_argument("--vocab-size", type=int, metavar="N", help="bpe: vocabulary size, 257..65536")
    parser.add_argument("--gpt2-files", metavar="DIR", help="gpt2: folder with tokenizer.json or vocab.json + merges.txt")
    parser.add_argument("--validation-fraction", type=float, default=0.1, metavar="F", help="0 < F < 1 (default 0.1)")
    parser.add_argument("--pattern", default="*.txt", help="files taken from folders (default *.txt)")
    args = parser.parse_args(argv)
    if args.tokenizer == "bpe":
        if args.vocab_size is None:
            raise InputError("command line: --vocab-size: required with --tokenizer bpe (e.g. 4096)")
        if not 257 <= args.vocab_size <= MAX_VOCABULARY:
            raise InputError(f"command line: --vocab-size: must be 257..{MAX_VOCABULARY} (256 bytes + <|endoftext|>"
                             f" at least; uint16 shards hold ids below {MAX_VOCABULARY}), got {args.vocab_size}")
    elif args.vocab_size is not None:
        raise InputError("command line: --vocab-size: only with --tokenizer bpe")
    if (args.tokenizer == "gpt2") != (args.gpt2_files is not None):
        raise InputError("command line: --gpt2-files: " + ("required with --tokenizer gpt2" if args.tokenizer == "gpt2"
                                                           else "only with --tokenizer gpt2"))
    if not 0 < args.validation_fraction < 1:
        raise InputError(f"command line: --validation-fraction: must be between 0 and 1, got {args.validation_fraction}")
    return args


def input_files(inputs, pattern):
    """(name, path) of every document, in order; path None for stdin."""
    files = []
    for item in inputs:
        if item == "-":
            files.append(("standard input", None))
        elif os.path.isdir(item):
            found = []
            for root, dirs, names in os.walk(item):
                dirs[:] = [d for d in dirs if not d.startswith(".")]
                found += [os.path.join(root, n) for n in names if not n.startswith(".") and fnmatch.fnmatch(n, pattern)]
            if not found:
                raise InputError(f"{item}: no files matching {pattern} in the folder (--pattern)")
            files += [(path, path) for path in sorted(found)]
        elif os.path.exists(item):
            files.append((item, item))
        else:
            raise InputError(f"{item}: no such file or folder")
    return files


def read_documents(inputs, pattern, need_text):
    """[(name, bytes)] of the non-empty documents; checks UTF-8 when `need_text`."""
    documents = []
    for name, path in input_files(inputs, pattern):
        try:
            if path is None:
                data = sys.stdin.buffer.read()
            else:
                with open(path, "rb") as f:
                    data = f.read()
        except OSError as e:
            raise InputError(f"{name}: cannot read: {e.strerror}") from None
        if need_text:
            try:
                data.decode("utf-8")
            except UnicodeDecodeError as e:
                raise InputError(f"{name}: byte {e.start}: not UTF-8 text ({e.reason}); "
                                 "--tokenizer byte takes any bytes") from None
        if data:
            documents.append((name, data))
    if not documents:
        raise InputError(f"{', '.join(inputs)}: no text (the input is empty)")
    return documents


def cut_position(documents, fraction):
    """Where validation starts in the documents' concatenation: a line or
    document boundary, the first at or after (1 - fraction) of the bytes,
    else the last before it."""
    starts, total = [], 0
    for _, data in documents:
        starts.append(total)
        total += len(data)
    text = b"".join(data for _, data in documents)
    target = max(1, int(total * (1 - fraction)))
    after = [p for p in starts if p >= target]
    newline = text.find(b"\n", target - 1)
    if newline != -1 and newline + 1 < total:
        after.append(newline + 1)
    if after:
        return min(after)
    before = [p for p in starts if 0 < p < target]
    newline = text.rfind(b"\n", 0, target - 1)
    if newline != -1:
        before.append(newline + 1)
    if before:
        return max(before)
    raise InputError(f"{documents[0][0]}: one line of text: validation is cut at a line or document boundary "
                     "and there is none; add line breaks or more documents")


def split_documents(documents, fraction):
    """Training and validation parts as lists of (bytes, starts_a_document)."""
    cut = cut_position(documents, fraction)
    train, validation, offset = [], [], 0
    for _, data in documents:
        end = offset + len(data)
        if end <= cut:
            train.append((data, True))
        elif offset >= cut:
            validation.append((data, True))
        else:
            train.append((data[:cut - offset], True))
            validation.append((data[cut - offset:], False))
        offset = end
    return train, validation


def safe_chunks(text, size=CHUNK_CHARS):
    """`text` in pieces of about `size` characters, cut only after a line
    break that has a non-space on both sides: GPT-2's pre-tokenization ends a
    piece there whatever follows, so encoding the pieces one by one gives the
    ids of the whole text (and the library need not hold a long text's
    encoding in memory at once)."""
    chunks, start = [], 0
    while len(text) - start > size:
        cut = text.find("\n", start + size)
        while cut != -1 and (cut + 1 >= len(text) or text[cut - 1].isspace() or text[cut + 1].isspace()):
            cut = text.find("\n", cut + 1)
        if cut == -1:
            break
        chunks.append(text[start:cut + 1])
        start = cut + 1
    chunks.append(text[start:])
    return chunks


def import_tokenizers():
    try:
        import tokenizers
    except ImportError:
        raise InputError(f"the Python package 'tokenizers' is missing for {sys.executable}: "
                         "pip install -r tools/requirements.txt (jobs/install-deps.sh does it), "
                         "or run this script with the python3 that has it") from None
    return tokenizers


def train_bpe(train_parts, vocab_size):
    tokenizers = import_tokenizers()
    from tokenizers import decoders, models, pre_tokenizers, trainers
    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=[EOT],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator((chunk for data, _ in train_parts for chunk in safe_chunks(data.decode("utf-8"))),
                            trainer)
    return tok


def load_gpt2(folder):
    tokenizer_json = os.path.join(folder, "tokenizer.json")
    vocab, merges = os.path.join(folder, "vocab.json"), os.path.join(folder, "merges.txt")
    if not os.path.isdir(folder):
        raise InputError(f"{folder}: no such folder (--gpt2-files)")
    missing = [p for p in (vocab, merges) if not os.path.isfile(p)]
    if missing and not os.path.isfile(tokenizer_json):
        raise InputError(f"{missing[0]}: no such file (--gpt2-files needs tokenizer.json, "
                         "or vocab.json and merges.txt)")
    tokenizers = import_tokenizers()
    from tokenizers import decoders, models, pre_tokenizers
    if os.path.isfile(tokenizer_json):
        try:
            return tokenizers.Tokenizer.from_file(tokenizer_json), tokenizer_json
        except Exception as e:  # the library's parse errors carry no type of their own
            raise InputError(f"{tokenizer_json}: not a tokenizers file: {str(e).splitlines()[0]}") from None
    try:
        tok = tokenizers.Tokenizer(models.BPE.from_file(vocab, merges))
    except Exception as e:
        raise InputError(f"{vocab}: with {merges}: not GPT-2 vocabulary files: {str(e).splitlines()[0]}") from None
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    if tok.token_to_id(EOT) is not None:
        tok.add_special_tokens([EOT])
    return tok, vocab


# Ids of GPT-2's own vocabulary (its encoder.json), enough to tell it from
# another byte-level BPE stored in the same files.
GPT2_VOCABULARY = 50257
GPT2_MARKS = {"!": 0, "\u0120the": 262, EOT: 50256}


def gpt2_label(tok):
    """"gpt2" for GPT-2's own vocabulary; otherwise what the files hold, so that shards of another BPE are
    not taken for GPT-2's (the released GPT-2 weights would read other text from their ids)."""
    size = tok.get_vocab_size(with_added_tokens=True)
    if size == GPT2_VOCABULARY and all(tok.token_to_id(piece) == i for piece, i in GPT2_MARKS.items()):
        return "gpt2"
    return (f"a byte-level BPE from --gpt2-files that is not GPT-2's own ({size} ids, GPT-2 has {GPT2_VOCABULARY}"
            f"{'' if size != GPT2_VOCABULARY else ' but others at its marker ids'}): GPT-2's weights do not fit it")


def check_tokenizer(tok, origin):
    """What geotrain's reader (src/io/bpe_tokenizer.cpp) and uint16 shards
    accept; returns (vocabulary, end-of-text id)."""
    ids = set(tok.get_vocab(with_added_tokens=True).values())
    vocabulary = max(ids) + 1
    if vocabulary > MAX_VOCABULARY:
        raise InputError(f"{origin}: model.vocab: {vocabulary} ids, more than the {MAX_VOCABULARY} that uint16 token "
                         "shards hold (llm.c format version 1)")
    if len(ids) != vocabulary:  # checked before to_str(), which prints a warning about it on stdout
        missing = min(set(range(vocabulary)) - ids)
        raise InputError(f"{origin}: model.vocab: no token has id {missing} (ids must run from 0 without gaps)")
    spec = json.loads(tok.to_str())
    kinds = {"model.type": (spec.get("model") or {}).get("type"),
             "pre_tokenizer.type": (spec.get("pre_tokenizer") or {}).get("type"),
             "decoder.type": (spec.get("decoder") or {}).get("type")}
    for field, want in (("model.type", "BPE"), ("pre_tokenizer.type", "ByteLevel"), ("decoder.type", "ByteLevel")):
        if kinds[field] != want:
            raise InputError(f"{origin}: {field}: is {kinds[field]}; geotrain reads byte-level BPE tokenizers "
                             f"(GPT-2's kind) only, which need {want}")
    if spec.get("normalizer") is not None:
        raise InputError(f"{origin}: normalizer: is {spec['normalizer'].get('type')}; geotrain reads tokenizers "
                         "without a normalizer only")
    if spec["pre_tokenizer"].get("add_prefix_space"):
        raise InputError(f"{origin}: pre_tokenizer.add_prefix_space: is true: every document would decode with "
                         "an extra leading space; set it to false")
    eot = tok.token_to_id(EOT)
    if eot is None:
        raise InputError(f"{origin}: model.vocab: has no {EOT} token (the document separator)")
    return vocabulary, eot


def encode_part(parts, tok, eot):
    """The token ids of one part (training or validation)."""
    ids = array.array("H")
    if tok is None:
        for data, _ in parts:
            ids.extend(data)  # the byte tokenizer: id = byte value
        return ids
    tok.encode_special_tokens = True  # text that spells <|endoftext|> is text, not a separator
    for data, starts_document in parts:
        if starts_document:
            ids.append(eot)
        chunks = safe_chunks(data.decode("utf-8"))
        for first in range(0, len(chunks), 16):
            for encoding in tok.encode_batch(chunks[first:first + 16], add_special_tokens=False):
                ids.extend(encoding.ids)
    return ids


def shard_bytes(ids):
    header = array.array("i", [0] * HEADER_INTS)
    header[0], header[1], header[2] = MAGIC, VERSION, len(ids)
    if sys.byteorder != "little":
        header.byteswap()
        ids = array.array("H", ids)
        ids.byteswap()
    return header.tobytes() + ids.tobytes()


def write_atomically(path, data):
    try:
        with open(path + ".tmp", "wb") as f:
            f.write(data)
        os.replace(path + ".tmp", path)
    except OSError as e:
        raise RuntimeError(f"{path}: cannot write: {e.strerror}") from None


def prepare(args):
    documents = read_documents(args.inputs, args.pattern, need_text=args.tokenizer != "byte")
    train_parts, validation_parts = split_documents(documents, args.validation_fraction)
    tok, origin, vocabulary, eot = None, "byte", 256, None
    if args.tokenizer == "bpe":
        tok, origin = train_bpe(train_parts, args.vocab_size), "trained"
    elif args.tokenizer == "gpt2":
        tok, origin = load_gpt2(args.gpt2_files)
    if tok is not None:
        vocabulary, eot = check_tokenizer(tok, origin)
    parts = {"train.bin": encode_part(train_parts, tok, eot), "val.bin": encode_part(validation_parts, tok, eot)}
    for name, ids in parts.items():
        if len(ids) >= 2**31:
            raise InputError(f"{name}: {len(ids)} tokens, more than a shard's int32 count holds; split the input")
    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as e:
        raise RuntimeError(f"{args.out}: cannot create the folder: {e.strerror}") from None
    for name, ids in parts.items():
        write_atomically(os.path.join(args.out, name), shard_bytes(ids))
    tokenizer_path = os.path.join(args.out, "tokenizer.json")
    if tok is not None:
        write_atomically(tokenizer_path, tok.to_str(pretty=True).encode("utf-8"))
        label = gpt2_label(tok) if args.tokenizer == "gpt2" else args.tokenizer
        tokenizer_note = f"{tokenizer_path} ({label}, vocabulary {vocabulary}, {EOT} = {eot})"
    else:
        try:
            if os.path.exists(tokenizer_path):
                os.remove(tokenizer_path)  # a stale one would make geotrain read byte shards as BPE
        except OSError as e:
            raise RuntimeError(f"{tokenizer_path}: cannot remove the stale tokenizer file: {e.strerror}") from None
        tokenizer_note = "byte tokenizer (vocabulary 256, no tokenizer.json)"
    train, val = (os.path.join(args.out, n) for n in parts)
    print(f"prepare_data.py: {len(documents)} document{'s' if len(documents) > 1 else ''}, {sum(len(d) for _, d in documents)} bytes -> "
          f"{train} {len(parts['train.bin'])} tokens, {val} {len(parts['val.bin'])} tokens; {tokenizer_note}; "
          f"train with --data.train={train} --data.validation={val} --model.vocabulary={vocabulary}")


def main(argv=None):
    try:
        prepare(parse_args(argv))
    except InputError as e:
        print(f"prepare_data.py: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:
        print(f"prepare_data.py: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
