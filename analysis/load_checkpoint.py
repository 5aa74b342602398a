#!/usr/bin/env python3
"""Load a geotrain checkpoint (HDF5) into a PyTorch GPT of the same
architecture and compute its validation loss on a token shard, in the order
geotrain evaluates: batch i holds the windows i*B .. i*B+B-1 of the shard
(window k = tokens k*T .. k*T+T), one replica.

Both forms: a single file (step_N.h5), or a sharded checkpoint's folder
(step_N/, or its manifest.h5), whose shards the manifest lists.

usage: load_checkpoint.py CHECKPOINT VALIDATION.bin [--batch-size B] [--batches N] [--json]

As a library: `model = load_gpt(path)` gives a torch.nn.Module whose
parameters carry geotrain's names (h.3.attn.qkv.weight, ...).
"""
import argparse
import json
import math
import os
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from requires import require  # noqa: E402

h5py, np, torch, F = require("h5py", "numpy", "torch", "torch.nn.functional")


class GPT(torch.nn.Module):
    """Pre-LayerNorm decoder, tanh GELU, the head tied to the embedding (or
    its own matrix, lm_head.weight, with tied_head=False): geotrain's model."""

    def __init__(self, layers, hidden, heads, vocabulary, sequence_length, tied_head=True):
        super().__init__()
        self.tied_head = tied_head
        self.layers, self.hidden, self.heads = layers, hidden, heads
        self.vocabulary, self.sequence_length = vocabulary, sequence_length
        shapes = {"wte": (vocabulary, hidden), "wpe": (sequence_length, hidden),
                  "lnf.weight": (hidden,), "lnf.bias": (hidden,)}
        if not tied_head:
            shapes["lm_head.weight"] = (vocabulary, hidden)
        for l in range(layers):
            shapes.update({f"h.{l}.ln1.weight": (hidden,), f"h.{l}.ln1.bias": (hidden,),
                           f"h.{l}.attn.qkv.weight": (3 * hidden, hidden), f"h.{l}.attn.qkv.bias": (3 * hidden,),
                           f"h.{l}.attn.proj.weight": (hidden, hidden), f"h.{l}.attn.proj.bias": (hidden,),
                           f"h.{l}.ln2.weight": (hidden,), f"h.{l}.ln2.bias": (hidden,),
                           f"h.{l}.mlp.fc.weight": (4 * hidden, hidden), f"h.{l}.mlp.fc.bias": (4 * hidden,),
                           f"h.{l}.mlp.proj.weight": (hidden, 4 * hidden), f"h.{l}.mlp.proj.bias": (hidden,)})
        # nn.Module names cannot contain dots: keep geotrain's names in a dict.
        self.params = torch.nn.ParameterDict({name.replace(".", "__"): torch.nn.Parameter(torch.zeros(shape))
                                              for name, shape in shapes.items()})

    def p(self, name):
        return self.params[name.replace(".", "__")]

    def named_geotrain_parameters(self):
        return {name.replace("__", "."): value for name, value in self.params.items()}

    def logits(self, tokens):
        """[B, T, vocabulary] next-token logits of a [B, T] batch of token ids."""
        B, T = tokens.shape
        C, NH = self.hidden, self.heads
        x = self.p("wte")[tokens] + self.p("wpe")[:T]
        causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
        for l in range(self.layers):
            p = lambda name: self.p(f"h.{l}.{name}")
            h = F.layer_norm(x, (C,), p("ln1.weight"), p("ln1.bias"), eps=1e-5)
            q, k, v = ((h @ p("attn.qkv.weight").T + p("attn.qkv.bias")).split(C, dim=-1))
            q, k, v = (t.reshape(B, T, NH, C // NH).transpose(1, 2) for t in (q, k, v))
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(C // NH)
            y = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1) @ v
            x = x + y.transpose(1, 2).reshape(B, T, C) @ p("attn.proj.weight").T + p("attn.proj.bias")
            h = F.layer_norm(x, (C,), p("ln2.weight"), p("ln2.bias"), eps=1e-5)
            h = F.gelu(h @ p("mlp.fc.weight").T + p("mlp.fc.bias"), approximate="tanh")
            x = x + h @ p("mlp.proj.weight").T + p("mlp.proj.bias")
        x = F.layer_norm(x, (C,), self.p("lnf.weight"), self.p("lnf.bias"), eps=1e-5)
        return x @ self.p("wte" if self.tied_head else "lm_head.weight").T

    def forward(self, tokens, targets):
        logits = self.logits(tokens)
        return F.cross_entropy(logits.reshape(-1, self.vocabulary), targets.reshape(-1))


def text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def checkpoint_files(path):
    """(the file with the root attributes, the files with the tensors): a
    single file is both; a sharded checkpoint gives its manifest and the
    shards it lists. A missing manifest or shard: ValueError naming it."""
    if os.path.isdir(path):
        folder = path
    elif os.path.basename(path) == "manifest.h5":
        folder = os.path.dirname(path)
    else:
        return path, [path]
    manifest = os.path.join(folder, "manifest.h5")
    if not os.path.exists(manifest):
        raise ValueError(f"{manifest}: missing (an incomplete sharded checkpoint)")
    with h5py.File(manifest, "r") as f:
        shards = [os.path.join(folder, name) for name in text(f.attrs["shards"]).split("\n") if name]
    for shard in shards:
        if not os.path.exists(shard):
            raise ValueError(f"{shard}: missing (a shard that {manifest} lists)")
    return manifest, shards


def load_gpt(path, dtype=torch.float64):
    root, files = checkpoint_files(path)
    with h5py.File(root, "r") as f:
        if int(f.attrs["format_version"]) not in (1, 2):  # 1: before checksums (read unverified)
            raise ValueError(f"{root}: format_version {f.attrs['format_version']} is not 1 or 2")
        a = f.attrs
        head = a.get("model_lm_head", "tied")
        head = head.decode() if isinstance(head, bytes) else str(head)
        model = GPT(int(a["model_layers"]), int(a["model_hidden"]), int(a["model_heads"]),
                    int(a["model_vocabulary"]), int(a["model_sequence_length"]), head == "tied").to(dtype)
    wanted = model.named_geotrain_parameters()
    with torch.no_grad():
        for file in files:
            with h5py.File(file, "r") as f:
                for name, stored in f["params"].items():
                    if name not in wanted:
                        continue
                    parameter = wanted.pop(name)
                    if tuple(stored.shape) != tuple(parameter.shape):
                        raise ValueError(f"{file}: /params/{name}: shape {stored.shape}, model {tuple(parameter.shape)}")
                    values = np.asarray(stored, dtype="<f4")  # h5py verifies an older file's Fletcher32 filter itself
                    if "crc32" in stored.attrs and zlib.crc32(values.tobytes()) != int(stored.attrs["crc32"]):
                        raise ValueError(f"{file}: /params/{name}: damaged: its bytes fail their crc32 attribute")
                    parameter.copy_(torch.from_numpy(values.astype(np.float32)).to(dtype))
    if wanted:
        raise ValueError(f"{path}: /params/{sorted(wanted)[0]}: missing")
    return model


def read_shard(path):
    header = np.fromfile(path, dtype="<i4", count=256)
    if header[0] != 20240520 or header[1] not in (1, 2):
        raise ValueError(f"{path}: not a version-1 token shard")
    tokens = np.fromfile(path, dtype="<u2", offset=1024)
    if len(tokens) != header[2]:
        raise ValueError(f"{path}: header says {header[2]} tokens, file holds {len(tokens)}")
    return tokens.astype(np.int64)


def validation_loss(model, tokens, batch_size, batches):
    T = model.sequence_length
    windows = (len(tokens) - 1) // T
    count = min(windows // batch_size, batches)
    losses = []
    with torch.no_grad():
        for i in range(count):
            rows = [tokens[(i * batch_size + b) * T:(i * batch_size + b) * T + T + 1] for b in range(batch_size)]
            batch = torch.from_numpy(np.stack(rows))
            losses.append(model(batch[:, :-1], batch[:, 1:]).item())
    return sum(losses) / len(losses)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint")
    parser.add_argument("validation")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    try:
        model = load_gpt(args.checkpoint)
    except ValueError as e:  # bad input: exit 2, one line naming the file
        print(f"load_checkpoint.py: error: {e}", file=sys.stderr)
        sys.exit(2)
    loss = validation_loss(model, read_shard(args.validation), args.batch_size, args.batches)
    with h5py.File(checkpoint_files(args.checkpoint)[0], "r") as f:
        step = int(f.attrs["completed_steps"])
    if args.json:
        print(json.dumps({"validation_loss": loss, "completed_steps": step}))
    else:
        print(f"{args.checkpoint}: step {step}, validation loss {loss:.6f}")


if __name__ == "__main__":
    main()
