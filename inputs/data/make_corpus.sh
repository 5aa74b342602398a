#!/usr/bin/env bash
# Rebuilds the shipped training corpus (see README.md beside this script):
# two public-domain novels (Pride and Prejudice, Persuasion) from the Debian package
# r-cran-janeaustenr, tokenised one token per byte (the project's byte-level
# tokenizer: token id = byte value, vocabulary 256) and written as llm.c /
# nanoGPT token shards:
#   corpus_train.bin  the text minus its last ~5%
#   corpus_val.bin    the last ~5%, cut at a line break
# Shard layout: 256 little-endian int32 (magic 20240520, version 1, token
# count, zeros), then the tokens as little-endian uint16.
#
# Needs: bash, python3 (standard library only), dpkg-deb and apt-get; the
# package is downloaded with `apt-get download` and unpacked in a temporary
# folder, not installed (installing it would pull in R). Nothing else is
# fetched. Run from anywhere:  bash inputs/data/make_corpus.sh [OUT_DIR]
set -euo pipefail

package=r-cran-janeaustenr
expected_version=1.0.0-1     # the version the shipped files were made from
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out_dir=${1:-$here}
python=${PYTHON:-/usr/bin/python3}  # Debian's

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
  root=/
  version=$(dpkg-query -W -f='${Version}' "$package")
else
  (cd "$work" && apt-get download "$package" >"$work/apt.log" 2>&1) || {
    cat "$work/apt.log" >&2
    echo "make_corpus.sh: cannot download the Debian package $package (run 'apt-get update' first?)" >&2
    exit 1
  }
  deb=$(ls "$work"/${package}_*.deb)
  version=$(dpkg-deb -f "$deb" Version)
  dpkg-deb -x "$deb" "$work/root"
  root=$work/root
fi
if [[ $version != "$expected_version" ]]; then
  echo "make_corpus.sh: warning: $package is version $version, the shipped files came from" \
       "$expected_version; the output may differ from the checked-in files" >&2
fi
data=$root/usr/lib/R/site-library/janeaustenr/data

"$python" - "$data" "$out_dir" <<'PY'
"""Reads character vectors out of an R lazy-load database (Rdata.rdx/.rdb),
joins each novel's lines with newlines and writes the two token shards."""
import gzip
import hashlib
import os
import struct
import sys
import zlib

data_dir, out_dir = sys.argv[1], sys.argv[2]

# Novels to use, in this order (object names in the R package). Two novels
# give about 1.1 million bytes of text: large enough that a small model can
# learn English spelling, small enough to ship (2 bytes a token on disk).
NOVELS = ["prideprejudice", "persuasion"]
VALIDATION_FRACTION = 0.05
MAGIC, VERSION, HEADER_INTS = 20240520, 1, 256


class RReader:
    """The subset of R's XDR serialization format that these files use:
    pairlists with tags and attributes, symbols, strings, integer, logical,
    real and generic vectors, references to earlier symbols."""

    NILVALUE, REFSXP = 254, 255
    SYMSXP, LISTSXP, CHARSXP, LGLSXP, INTSXP, REALSXP, STRSXP, VECSXP = 1, 2, 9, 10, 13, 14, 16, 19

    def __init__(self, raw):
        self.raw, self.pos, self.refs = raw, 0, []
        if raw[:2] != b"X\n":
            sys.exit("make_corpus.sh: not an R XDR serialization")
        self.pos = 2
        version = self.int()
        self.int()  # R version that wrote it
        self.int()  # oldest R version that can read it
        if version == 3:
            name_length = self.int()  # then the native encoding's name
            self.pos += name_length
        elif version != 2:
            sys.exit(f"make_corpus.sh: R serialization version {version} is not handled")

    def int(self):
        (value,) = struct.unpack_from(">i", self.raw, self.pos)
        self.pos += 4
        return value

    def length(self):
        n = self.int()
        if n == -1:
            upper, lower = self.int(), self.int()
            n = (upper << 32) + lower
        return n

    def item(self):
        flags = self.int()
        kind = flags & 0xFF
        has_attr, has_tag = flags & (1 << 9), flags & (1 << 10)
        if kind == self.NILVALUE:
            return None
        if kind == self.REFSXP:
            index = flags >> 8
            return self.refs[(index if index else self.int()) - 1]
        if kind == self.SYMSXP:
            name = self.item()
            self.refs.append(name)
            return name
        if kind == self.LISTSXP:
            if has_attr:
                self.item()  # a pairlist's own attributes: not needed here
            tag = self.item() if has_tag else None
            head = self.item()
            tail = self.item()
            return [(tag, head)] + (tail or [])
        if kind == self.CHARSXP:
            n = self.int()
            if n == -1:
                return None  # NA_character_
            text = self.raw[self.pos:self.pos + n]
            self.pos += n
            return text
        if kind in (self.LGLSXP, self.INTSXP):
            n = self.length()
            values = list(struct.unpack_from(f">{n}i", self.raw, self.pos))
            self.pos += 4 * n
        elif kind == self.REALSXP:
            n = self.length()
            values = list(struct.unpack_from(f">{n}d", self.raw, self.pos))
            self.pos += 8 * n
        elif kind in (self.STRSXP, self.VECSXP):
            values = [self.item() for _ in range(self.length())]
        else:
            sys.exit(f"make_corpus.sh: R object type {kind} is not handled")
        if has_attr:
            attributes = dict(self.item())
            names = attributes.get(b"names")
            if names is not None:
                return dict(zip(names, values))
        return values


index = RReader(gzip.decompress(open(os.path.join(data_dir, "Rdata.rdx"), "rb").read())).item()
variables = index[b"variables"]
with open(os.path.join(data_dir, "Rdata.rdb"), "rb") as f:
    database = f.read()


def load(name):
    offset, size = variables[name.encode()]
    record = database[offset:offset + size]
    (expanded,) = struct.unpack_from(">I", record, 0)
    raw = zlib.decompress(record[4:])
    if len(raw) != expanded:
        sys.exit(f"make_corpus.sh: {name}: record has {len(raw)} bytes, expected {expanded}")
    lines = RReader(raw).item()
    if not isinstance(lines, list) or not all(isinstance(line, bytes) for line in lines):
        sys.exit(f"make_corpus.sh: {name}: not a character vector")
    return lines


# The R package stores one text line per element ("" for blank lines); the
# texts are UTF-8 and go through as bytes, unchanged. Novels are separated by
# two blank lines.
lines = []
for name in NOVELS:
    novel = load(name)
    while novel and novel[-1] == b"":
        novel.pop()
    if lines:
        lines += [b"", b""]
    lines += novel
text = b"\n".join(lines) + b"\n"

# Validation = the tail, starting at the first line break after 95%.
cut = text.index(b"\n", int(len(text) * (1 - VALIDATION_FRACTION))) + 1
parts = {"corpus_train.bin": text[:cut], "corpus_val.bin": text[cut:]}


def shard(tokens):
    header = [0] * HEADER_INTS
    header[0], header[1], header[2] = MAGIC, VERSION, len(tokens)
    return struct.pack(f"<{HEADER_INTS}i", *header) + struct.pack(f"<{len(tokens)}H", *tokens)


os.makedirs(out_dir, exist_ok=True)
for file_name, part in parts.items():
    tokens = list(part)  # the byte tokenizer: one token per byte, id = byte value
    blob = shard(tokens)
    path = os.path.join(out_dir, file_name)
    with open(path + ".tmp", "wb") as f:
        f.write(blob)
    os.replace(path + ".tmp", path)
    print(f"{file_name}: {len(tokens)} tokens, {len(blob)} bytes, "
          f"sha256 {hashlib.sha256(blob).hexdigest()}")
PY
