"""An independent GPT-2 in the Hugging Face tensor layout, for the
`geotrain convert` tests (check_hf_convert.py); never calls geotrain.

- safetensors by hand (json + struct + numpy): the `safetensors` and
  `transformers` packages are not needed;
- a random GPT-2 folder (config.json + model.safetensors) as
  GPT2LMHeadModel.save_pretrained lays it out: Conv1D weights [in, out],
  names under "transformer.", the head tied to wte;
- its mean next-token cross-entropy, computed in float64 from the stored
  float32 values, written from GPT-2's definition (pre-LN blocks, gelu_new,
  layer norm eps from config.json, causal attention scaled by 1/sqrt(head
  size), logits = ln_f(x) wte^T).
"""
import json
import math
import os
import struct

import numpy as np
import torch

DTYPES = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "F64": np.dtype("<f8"), "I32": np.dtype("<i4"),
          "BF16": np.dtype("<u2")}  # BF16: raw bits (numpy has no bfloat16)

LAYER_TENSORS = ["ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
                 "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
                 "mlp.c_proj.weight", "mlp.c_proj.bias"]


def write_safetensors(path, tensors, metadata=None, truncate_bytes=0):
    """tensors: name -> (dtype name, numpy array already in that dtype's bytes)."""
    header, offset, blobs = {}, 0, []
    for name, (dtype, array) in tensors.items():
        raw = np.ascontiguousarray(array).tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    if metadata is not None:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    body = struct.pack("<Q", len(text)) + text + b"".join(blobs)
    with open(path, "wb") as f:
        f.write(body[:len(body) - truncate_bytes])


def read_safetensors(path):
    """name -> float32 numpy array (F32 only: what geotrain writes), and the metadata."""
    with open(path, "rb") as f:
        data = f.read()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    metadata = header.pop("__metadata__", {})
    tensors = {}
    for name, entry in header.items():
        assert entry["dtype"] == "F32", (name, entry["dtype"])
        begin, end = entry["data_offsets"]
        raw = data[8 + length + begin:8 + length + end]
        tensors[name] = np.frombuffer(raw, dtype="<f4").reshape(entry["shape"]).copy()
    return tensors, metadata


def hf_config(layers, hidden, heads, vocabulary, positions, **changes):
    config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "activation_function": "gelu_new",
              "layer_norm_epsilon": 1e-05, "n_layer": layers, "n_embd": hidden, "n_head": heads,
              "vocab_size": vocabulary, "n_positions": positions, "n_ctx": positions, "n_inner": None,
              "attn_pdrop": 0.1, "embd_pdrop": 0.1, "resid_pdrop": 0.1, "bos_token_id": 50256,
              "eos_token_id": 50256, "scale_attn_weights": True, "tie_word_embeddings": True}
    config.update(changes)
    return config


def random_gpt2(config, seed):
    """Bare HF names -> float32 arrays in HF layout; values large enough that
    every tensor moves the loss."""
    rng = np.random.default_rng(seed)
    C, V, P = config["n_embd"], config["vocab_size"], config["n_positions"]
    shapes = {"wte.weight": (V, C), "wpe.weight": (P, C), "ln_f.weight": (C,), "ln_f.bias": (C,)}
    for l in range(config["n_layer"]):
        inner = {"attn.c_attn.weight": (C, 3 * C), "attn.c_attn.bias": (3 * C,), "attn.c_proj.weight": (C, C),
                 "attn.c_proj.bias": (C,), "mlp.c_fc.weight": (C, 4 * C), "mlp.c_fc.bias": (4 * C,),
                 "mlp.c_proj.weight": (4 * C, C), "mlp.c_proj.bias": (C,), "ln_1.weight": (C,), "ln_1.bias": (C,),
                 "ln_2.weight": (C,), "ln_2.bias": (C,)}
        shapes.update({f"h.{l}.{name}": shape for name, shape in inner.items()})
    tensors = {}
    for name, shape in shapes.items():
        if name.endswith("weight") and len(shape) == 1:
            value = 1.0 + 0.1 * rng.standard_normal(shape)
        elif len(shape) == 1:
            value = 0.05 * rng.standard_normal(shape)
        elif name in ("wte.weight", "wpe.weight"):
            value = 0.3 * rng.standard_normal(shape)
        else:
            value = rng.standard_normal(shape) / math.sqrt(shape[0])
        tensors[name] = value.astype(np.float32)
    return tensors


def write_folder(folder, config, tensors, prefix="transformer.", with_buffers=False, with_head=False, dtypes=None):
    """config.json + model.safetensors; `dtypes`: bare name -> "F16"/"BF16" to store some tensors narrower."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    stored = {}
    for name, value in tensors.items():
        stored[prefix + name] = narrow(value, (dtypes or {}).get(name, "F32"))
    P = config["n_positions"]
    if with_buffers:
        for l in range(config["n_layer"]):
            mask = np.tril(np.ones((P, P), dtype=np.float32)).reshape(1, 1, P, P)
            stored[f"{prefix}h.{l}.attn.bias"] = ("F32", mask)
    if with_head:
        stored["lm_head.weight"] = narrow(tensors["wte.weight"], "F32")
    write_safetensors(os.path.join(folder, "model.safetensors"), stored, {"format": "pt"})


def narrow(value, dtype):
    if dtype == "F32":
        return "F32", value.astype("<f4")
    if dtype == "F16":
        return "F16", value.astype("<f2")
    if dtype in ("F64", "I32"):  # dtypes geotrain refuses
        return dtype, value.astype(DTYPES[dtype])
    if dtype == "BF16":  # torch's rounding to bfloat16, stored as its 16 bits
        bits = torch.from_numpy(value.astype(np.float32)).to(torch.bfloat16).view(torch.int16).numpy()
        return "BF16", bits.view("<u2")
    raise ValueError(dtype)


def widened(value, dtype):
    """What a reader of `narrow(value, dtype)` must get back as float32."""
    kind, stored = narrow(value, dtype)
    if kind == "BF16":
        return (stored.astype(np.uint32) << 16).view(np.float32)
    return stored.astype(np.float32)


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def layer_norm(x, weight, bias, eps):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


def gpt2_loss(config, tensors, inputs, targets):
    """Mean cross-entropy of GPT-2 (HF layout, bare names) over inputs/targets [B, T]."""
    p = {name: torch.from_numpy(np.asarray(value, dtype=np.float32)).double() for name, value in tensors.items()}
    eps = config.get("layer_norm_epsilon", 1e-5)
    B, T = inputs.shape
    C, NH = config["n_embd"], config["n_head"]
    hs = C // NH
    tokens = torch.from_numpy(inputs).long()
    x = p["wte.weight"][tokens] + p["wpe.weight"][:T]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(config["n_layer"]):
        w = lambda name: p[f"h.{l}.{name}"]
        h = layer_norm(x, w("ln_1.weight"), w("ln_1.bias"), eps)
        qkv = h @ w("attn.c_attn.weight") + w("attn.c_attn.bias")  # Conv1D: x W + b, W [in, out]
        q, k, v = (t.reshape(B, T, NH, hs).transpose(1, 2) for t in qkv.split(C, dim=-1))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        y = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1) @ v
        x = x + y.transpose(1, 2).reshape(B, T, C) @ w("attn.c_proj.weight") + w("attn.c_proj.bias")
        h = layer_norm(x, w("ln_2.weight"), w("ln_2.bias"), eps)
        x = x + gelu_new(h @ w("mlp.c_fc.weight") + w("mlp.c_fc.bias")) @ w("mlp.c_proj.weight") + w("mlp.c_proj.bias")
    x = layer_norm(x, p["ln_f.weight"], p["ln_f.bias"], eps)
    logits = x @ p["wte.weight"].T
    log_probs = torch.log_softmax(logits, dim=-1)
    picked = log_probs.gather(-1, torch.from_numpy(targets).long().unsqueeze(-1))
    return float(-picked.mean())


def read_shard(path):
    """An llm.c token shard (version 1): 256 int32 header, then uint16 tokens."""
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(1024), dtype="<i4")
        assert header[0] == 20240520 and header[1] == 1, header[:3]
        return np.frombuffer(f.read(), dtype="<u2")[:header[2]].astype(np.int64)


def windows(tokens, first, count, T):
    """Windows first..first+count-1 of T+1 tokens, as geotrain's validation batches take them."""
    rows = [tokens[w * T:w * T + T + 1] for w in range(first, first + count)]
    block = np.stack(rows)
    return block[:, :-1], block[:, 1:]


def load_folder(folder):
    """A folder written by geotrain convert --to-hf: its config and bare-named tensors."""
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    tensors, metadata = read_safetensors(os.path.join(folder, "model.safetensors"))
    bare = {name[len("transformer."):] if name.startswith("transformer.") else name: v for name, v in tensors.items()}
    return config, bare, metadata
