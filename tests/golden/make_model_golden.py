"""Golden values for the whole GPT model (tests/model/test_pytorch_parity.cpp).

Regenerate (Debian's python with python3-torch):

    /usr/bin/python3 tests/golden/make_model_golden.py          # writes tests/golden/data/gpt_small.bin
    /usr/bin/python3 tests/golden/make_model_golden.py --check  # exit 1 if it would change

An independent PyTorch implementation of geotrain's architecture (pre-LN
GPT-2 block, tanh GELU, LM head tied to the token embedding, mean token
cross-entropy), computed in float64 from float32 weights: the loss, the
gradient of every parameter, and the parameters after one and two AdamW steps
with global-norm clipping (the rule of include/geotrain/model/optimizer.hpp).
Parameter names and shapes are geotrain's ("h.0.attn.qkv.weight" is [3C, C],
rows q | k | v, heads contiguous inside each). Same file format as
make_golden.py.
"""

import argparse
import math
import sys

import torch
import torch.nn.functional as F

from make_golden import DATA_DIR, encode

LAYERS, C, NH, V, T, B = 2, 16, 2, 11, 6, 2
LR, BETA1, BETA2, EPS, WEIGHT_DECAY, CLIP = 1e-3, 0.9, 0.95, 1e-8, 0.1, 1.0


def parameter_shapes():
    shapes = {"wte": (V, C), "wpe": (T, C)}
    for l in range(LAYERS):
        p = f"h.{l}."
        shapes.update({p + "ln1.weight": (C,), p + "ln1.bias": (C,),
                       p + "attn.qkv.weight": (3 * C, C), p + "attn.qkv.bias": (3 * C,),
                       p + "attn.proj.weight": (C, C), p + "attn.proj.bias": (C,),
                       p + "ln2.weight": (C,), p + "ln2.bias": (C,),
                       p + "mlp.fc.weight": (4 * C, C), p + "mlp.fc.bias": (4 * C,),
                       p + "mlp.proj.weight": (C, 4 * C), p + "mlp.proj.bias": (C,)})
    shapes.update({"lnf.weight": (C,), "lnf.bias": (C,)})
    return shapes


def initial_parameters(g):
    """float32 values (biases and norms perturbed so their gradients matter)."""
    params = {}
    for name, shape in parameter_shapes().items():
        if name.endswith("weight") and len(shape) == 1:      # layernorm gains
            value = 1.0 + 0.1 * torch.randn(*shape, generator=g)
        elif len(shape) == 1:                                  # biases
            value = 0.05 * torch.randn(*shape, generator=g)
        else:
            value = 0.2 * torch.randn(*shape, generator=g)
        params[name] = value.float().double().requires_grad_(True)
    return params


def loss_of(params, tokens, targets):
    x = params["wte"][tokens] + params["wpe"][:T]
    hs = C // NH
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(LAYERS):
        p = lambda name: params[f"h.{l}.{name}"]
        h = F.layer_norm(x, (C,), p("ln1.weight"), p("ln1.bias"), eps=1e-5)
        qkv = h @ p("attn.qkv.weight").T + p("attn.qkv.bias")
        q, k, v = (part.reshape(B, T, NH, hs).transpose(1, 2) for part in qkv.split(C, dim=-1))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        attention = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
        y = (attention @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ p("attn.proj.weight").T + p("attn.proj.bias")
        h = F.layer_norm(x, (C,), p("ln2.weight"), p("ln2.bias"), eps=1e-5)
        h = F.gelu(h @ p("mlp.fc.weight").T + p("mlp.fc.bias"), approximate="tanh")
        x = x + h @ p("mlp.proj.weight").T + p("mlp.proj.bias")
    x = F.layer_norm(x, (C,), params["lnf.weight"], params["lnf.bias"], eps=1e-5)
    logits = x @ params["wte"].T
    return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))


def adamw_step(params, moments, t):
    """Step t (from 1) after clipping to CLIP; moments: name -> (m, v), updated."""
    norm = math.sqrt(sum(float((p.grad ** 2).sum()) for p in params.values()))
    factor = CLIP / norm if norm > CLIP else 1.0
    updated = {}
    for name, p in params.items():
        grad = p.grad * factor
        m, v = moments.get(name, (torch.zeros_like(grad), torch.zeros_like(grad)))
        m = BETA1 * m + (1 - BETA1) * grad
        v = BETA2 * v + (1 - BETA2) * grad * grad
        moments[name] = (m, v)
        m_hat, v_hat = m / (1 - BETA1 ** t), v / (1 - BETA2 ** t)
        decay = WEIGHT_DECAY if p.dim() >= 2 else 0.0
        updated[name] = p.detach() - LR * (m_hat / (v_hat.sqrt() + EPS) + decay * p.detach())
    return updated, norm


def make_case():
    g = torch.Generator().manual_seed(20240)
    params = initial_parameters(g)
    tokens = torch.randint(0, V, (B, T), generator=g)
    targets = torch.randint(0, V, (B, T), generator=g)
    loss = loss_of(params, tokens, targets)
    loss.backward()
    moments = {}
    updated, norm = adamw_step(params, moments, 1)
    # A second step on a second batch, from the first step's moments, with
    # the first step's result rounded to float32 as the C++ side holds it.
    second = {name: value.float().double().requires_grad_(True) for name, value in updated.items()}
    tokens2 = torch.randint(0, V, (B, T), generator=g)
    targets2 = torch.randint(0, V, (B, T), generator=g)
    loss2 = loss_of(second, tokens2, targets2)
    loss2.backward()
    updated2, _ = adamw_step(second, moments, 2)
    tensors = {"tokens": tokens, "targets": targets, "loss": loss.detach(),
               "grad_norm": torch.tensor(norm, dtype=torch.float64),
               "tokens2": tokens2, "targets2": targets2, "loss2": loss2.detach()}
    for name, p in params.items():
        tensors["param." + name] = p.detach()
        tensors["grad." + name] = p.grad
        tensors["after_step." + name] = updated[name]
        tensors["after_step2." + name] = updated2[name]
        tensors["grad2." + name] = second[name].grad
    for name, value in {"lr": LR, "beta1": BETA1, "beta2": BETA2, "epsilon": EPS,
                        "weight_decay": WEIGHT_DECAY, "clip": CLIP}.items():
        tensors[name] = torch.tensor(value, dtype=torch.float64)
    return tensors


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    torch.use_deterministic_algorithms(True)
    path = DATA_DIR / "gpt_small.bin"
    data = encode(make_case())
    if args.check:
        if not path.exists() or path.read_bytes() != data:
            print("make_model_golden.py: gpt_small.bin is out of date", file=sys.stderr)
            return 1
        return 0
    path.write_bytes(data)
    print(f"tests/golden/data/{path.name}: {len(data)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
