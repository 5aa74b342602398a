"""Golden tensors for the kernel tests (tests/kernels), computed with PyTorch.

Regenerate (Debian's python with python3-torch, CPU is enough):

    /usr/bin/python3 tests/golden/make_golden.py            # writes tests/golden/data/*.bin
    /usr/bin/python3 tests/golden/make_golden.py --check    # exit 1 if a file would change

Every op of include/geotrain/kernels/backend.hpp, forward and backward, on
small odd shapes (B=2, T=5, C=12, NH=3, V=17, OC=20), so that no size is a
multiple of a vector width or block size. Inputs are drawn in float32 from a
fixed seed per case; the reference is computed in float64 from exactly those
float32 values (autograd for the gradients) and stored rounded to float32.
The tests therefore see a reference whose only error is that final rounding.

File format (one file per case, little-endian):

    8 bytes   magic "GTGOLD01"
    uint32    number of tensors
    per tensor:
      uint32  length of the name, then the name (ASCII, no terminator)
      uint32  dtype: 0 = float32, 1 = int32
      uint32  ndim (0 for a scalar)
      uint32  ndim sizes, outermost first
      data    prod(sizes) elements, row-major

Tensor names follow backend.hpp's parameter names (inp, weight, dout, ...);
scalars hold the hyperparameters (lr, dloss, ...), so the test reads every
number from the file.
"""

import argparse
import io
import math
import pathlib
import struct
import sys

import torch

B, T, C, NH, V, OC = 2, 5, 12, 3, 17, 20
N = B * T
MAGIC = b"GTGOLD01"
DTYPE_CODES = {torch.float32: 0, torch.int32: 1}
DATA_DIR = pathlib.Path(__file__).resolve().parent / "data"


def generator(seed):
    return torch.Generator().manual_seed(seed)


def randn(g, *shape, scale=1.0, shift=0.0):
    """float32 values, promoted to float64 for the reference computation."""
    return (torch.randn(*shape, generator=g, dtype=torch.float32) * scale + shift).double()


def exact32(x):
    """x rounded to float32 (what the file stores), kept in float64: the
    reference must be computed from the very values the test reads."""
    return x.float().double()


def bf16(x):
    """x rounded to bfloat16 (to nearest, ties to even), kept in float64."""
    return x.float().bfloat16().double()


def leaf(x):
    return x.clone().requires_grad_(True)


def tokens_with_repeats(g, vocabulary):
    """Token ids [B, T]; ids occur several times so that gradients collide."""
    ids = torch.randint(0, vocabulary, (B, T), generator=g, dtype=torch.int64)
    ids[0, 3] = ids[0, 1]
    ids[1, 0] = ids[0, 1]
    ids[1, 4] = ids[1, 2]
    return ids


def case_embedding():
    g = generator(101)
    max_t = T + 3  # a table longer than the sequence: rows >= T get no gradient
    tokens = tokens_with_repeats(g, V)
    wte, wpe = leaf(randn(g, V, C)), leaf(randn(g, max_t, C))
    out = wte[tokens] + wpe[:T].unsqueeze(0)
    dout = randn(g, B, T, C)
    out.backward(dout)
    return {"tokens": tokens, "wte": wte, "wpe": wpe, "out": out, "dout": dout,
            "dwte": wte.grad, "dwpe": wpe.grad}


def case_layernorm():
    g = generator(102)
    # A mean far from 0 checks that the variance is not E[x^2] - E[x]^2.
    inp = leaf(randn(g, B, T, C, scale=2.0, shift=3.0))
    weight, bias = leaf(randn(g, C, scale=0.5, shift=1.0)), leaf(randn(g, C, scale=0.5))
    out = torch.nn.functional.layer_norm(inp, (C,), weight, bias, eps=1e-5)
    mean = inp.mean(dim=-1)
    rstd = 1.0 / torch.sqrt(inp.var(dim=-1, unbiased=False) + 1e-5)
    dout = randn(g, B, T, C)
    out.backward(dout)
    return {"inp": inp, "weight": weight, "bias": bias, "out": out, "mean": mean, "rstd": rstd,
            "dout": dout, "dinp": inp.grad, "dweight": weight.grad, "dbias": bias.grad}


def case_matmul():
    g = generator(103)
    inp = leaf(randn(g, B, T, C))
    weight = leaf(randn(g, OC, C, scale=1.0 / math.sqrt(C)))
    bias = leaf(randn(g, OC, scale=0.1))
    out = inp @ weight.T + bias
    dout = randn(g, B, T, OC)
    out.backward(dout)
    # bf16 GEMM operands (backend.hpp's MatmulPrecision::bf16): the exact
    # products of the operands rounded to bf16 (torch rounds to nearest even),
    # summed in float64. Only the bias stays fp32.
    r_inp, r_weight, r_dout = (bf16(z) for z in (inp.detach(), weight.detach(), dout))
    return {"inp": inp, "weight": weight, "bias": bias, "out": out, "dout": dout,
            "dinp": inp.grad, "dweight": weight.grad, "dbias": bias.grad,
            "out_bf16": r_inp @ r_weight.T + bias.detach(), "dinp_bf16": r_dout @ r_weight,
            "dweight_bf16": r_dout.reshape(N, OC).T @ r_inp.reshape(N, C)}


def case_tied_lm_head():
    """GPT-2's weight tying: wte embeds the tokens and is the LM head's weight.

    x = embedding(tokens); logits = x @ wte^T (no bias); loss = mean CE.
    dwte collects both uses: the head's dlogits^T x and the embedding rows.
    """
    g = generator(104)
    tokens = tokens_with_repeats(g, V)
    targets = torch.randint(0, V, (B, T), generator=g, dtype=torch.int64)
    wte, wpe = leaf(randn(g, V, C)), leaf(randn(g, T, C))
    x = wte[tokens] + wpe.unsqueeze(0)
    x.retain_grad()
    logits = x @ wte.T
    logits.retain_grad()
    losses = torch.nn.functional.cross_entropy(logits.reshape(N, V), targets.reshape(N),
                                               reduction="none").reshape(B, T)
    loss = losses.mean()
    loss.backward()
    return {"tokens": tokens, "targets": targets, "wte": wte, "wpe": wpe, "x": x, "logits": logits,
            "losses": losses, "loss": loss, "dloss": torch.tensor(1.0 / N, dtype=torch.float64),
            "dlogits": logits.grad, "dx": x.grad, "dwte": wte.grad, "dwpe": wpe.grad}


def attention(seed, b, t, c, nh):
    """Causal attention as the textbook formula (the full T x T softmax), so
    that the fused, tiled kernels are checked against an independent form.
    lse is each query row's log-sum-exp of the scaled, masked scores."""
    g = generator(seed)
    hs = c // nh
    qkv = leaf(randn(g, b, t, 3 * c))
    q, k, v = qkv.split(c, dim=2)
    q, k, v = (z.reshape(b, t, nh, hs).transpose(1, 2) for z in (q, k, v))  # [b, nh, t, hs]
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
    mask = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
    scores = scores.masked_fill(mask, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)  # [b, nh, t]
    att = torch.softmax(scores, dim=-1)
    out = (att @ v).transpose(1, 2).reshape(b, t, c)
    dout = randn(g, b, t, c)
    out.backward(dout)
    return {"qkv": qkv, "out": out, "lse": lse, "dout": dout, "dqkv": qkv.grad}


def case_attention():
    return attention(105, B, T, C, NH)


# The fused attention works on tiles of 32 (forward) and 16 (backward) rows:
# sequence lengths of one token, less than a tile, exactly two tiles, and
# ragged ends; head sizes from 4 to the kernels' largest, 128.
ATTENTION_SHAPES = {  # name: (seed, B, T, C, NH)
    "attention_t1": (111, 3, 1, 12, 2),
    "attention_t7": (112, 2, 7, 12, 3),
    "attention_t64": (113, 2, 64, 48, 3),
    "attention_t100": (114, 2, 100, 40, 2),
    "attention_t130": (115, 1, 130, 128, 1),
}


def case_gelu():
    g = generator(106)
    inp = leaf(randn(g, B, T, OC, scale=2.5))  # reaches both tails, where tanh saturates
    out = torch.nn.functional.gelu(inp, approximate="tanh")
    # The formula itself, as GPT-2 writes it, must agree with torch's.
    x = inp.detach()
    gpt2 = 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    assert torch.allclose(out.detach(), gpt2, rtol=1e-12, atol=1e-12)
    dout = randn(g, B, T, OC)
    out.backward(dout)
    return {"inp": inp, "out": out, "dout": dout, "dinp": inp.grad}


def case_residual():
    g = generator(107)
    a, b = randn(g, B, T, C), randn(g, B, T, C)
    factor = exact32(torch.tensor(0.3, dtype=torch.float64))
    return {"a": a, "b": b, "out": a + b, "factor": factor, "scaled": a * factor,
            "sum_of_squares": (a * a).sum()}


def case_residual_layernorm():
    """residual = a + b; out = layernorm(residual), the fused forward. The
    backward has no fused op of its own: layernorm_backward adds into the
    residual stream's gradient, which already holds dresidual (what flows
    back past the layernorm); a and b both get that sum."""
    g = generator(110)
    a = leaf(randn(g, B, T, C, scale=2.0, shift=3.0))  # a mean far from 0, as in a residual stream
    b = leaf(randn(g, B, T, C))
    weight, bias = leaf(randn(g, C, scale=0.5, shift=1.0)), leaf(randn(g, C, scale=0.5))
    residual = a + b
    residual.retain_grad()
    out = torch.nn.functional.layer_norm(residual, (C,), weight, bias, eps=1e-5)
    r = residual.detach()
    mean = r.mean(dim=-1)
    rstd = 1.0 / torch.sqrt(r.var(dim=-1, unbiased=False) + 1e-5)
    dout, dresidual = randn(g, B, T, C), randn(g, B, T, C)
    (out * dout).sum().add_((residual * dresidual).sum()).backward()
    assert torch.equal(a.grad, b.grad)
    return {"a": a, "b": b, "weight": weight, "bias": bias, "residual": residual, "out": out, "mean": mean,
            "rstd": rstd, "dout": dout, "dresidual": dresidual, "da": a.grad, "dweight": weight.grad,
            "dbias": bias.grad}


def case_matmul_gelu():
    """out = gelu(inp @ weight^T + bias) (tanh approximation), the MLP's
    first projection; pre is the pre-activation the backward reads."""
    g = generator(116)
    inp = leaf(randn(g, B, T, C))
    # Pre-activations of a few units: both GELU tails and the bend between.
    weight = leaf(randn(g, OC, C, scale=2.0 / math.sqrt(C)))
    bias = leaf(randn(g, OC, scale=0.5))
    pre = inp @ weight.T + bias
    pre.retain_grad()
    out = torch.nn.functional.gelu(pre, approximate="tanh")
    dout = randn(g, B, T, OC)
    out.backward(dout)
    return {"inp": inp, "weight": weight, "bias": bias, "pre": pre, "out": out, "dout": dout,
            "dpre": pre.grad, "dinp": inp.grad, "dweight": weight.grad, "dbias": bias.grad}


def case_crossentropy():
    g = generator(108)
    logits = randn(g, B, T, V, scale=2.0)
    # Row 3 is scaled to logits of several hundred: exp() of them overflows
    # float32 unless the row maximum is subtracted first.
    logits[0, 3] *= 150.0
    logits = leaf(exact32(logits))
    targets = torch.randint(0, V, (B, T), generator=g, dtype=torch.int64)
    losses = torch.nn.functional.cross_entropy(logits.reshape(N, V), targets.reshape(N),
                                               reduction="none").reshape(B, T)
    loss = losses.mean()
    loss.backward()
    return {"logits": logits, "targets": targets, "losses": losses, "loss": loss,
            "dloss": torch.tensor(1.0 / N, dtype=torch.float64), "dlogits": logits.grad}


def case_adamw():
    """Two steps of torch.optim.AdamW, checked against backend.hpp's formula."""
    g = generator(109)
    n = 37
    hyper = {"lr": 1e-2, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1}
    hyper32 = {key: float(torch.tensor(value, dtype=torch.float32)) for key, value in hyper.items()}
    params0 = randn(g, n)
    grads = [randn(g, n, scale=0.5), randn(g, n, scale=0.5)]
    p = params0.clone().requires_grad_(True)
    opt = torch.optim.AdamW([p], lr=hyper32["lr"], betas=(hyper32["beta1"], hyper32["beta2"]),
                            eps=hyper32["eps"], weight_decay=hyper32["weight_decay"])
    result = {"params0": params0, "grads1": grads[0], "grads2": grads[1]}
    result.update({key: torch.tensor(value, dtype=torch.float64) for key, value in hyper32.items()})
    m, v, expected = torch.zeros(n, dtype=torch.float64), torch.zeros(n, dtype=torch.float64), params0
    for step, grad in enumerate(grads, start=1):
        p.grad = grad.clone()
        opt.step()
        state = opt.state[p]
        # backend.hpp's formula, independently of torch's implementation.
        b1, b2 = hyper32["beta1"], hyper32["beta2"]
        m = b1 * m + (1 - b1) * grad
        v = b2 * v + (1 - b2) * grad * grad
        m_hat, v_hat = m / (1 - b1 ** step), v / (1 - b2 ** step)
        expected = expected - hyper32["lr"] * (m_hat / (v_hat.sqrt() + hyper32["eps"])
                                                + hyper32["weight_decay"] * expected)
        assert torch.allclose(p.detach(), expected, rtol=1e-12, atol=1e-14)
        assert torch.allclose(state["exp_avg"], m) and torch.allclose(state["exp_avg_sq"], v)
        result[f"m{step}"] = state["exp_avg"].clone()
        result[f"v{step}"] = state["exp_avg_sq"].clone()
        result[f"params{step}"] = p.detach().clone()
    return result


CASES = {
    "embedding": case_embedding,
    "layernorm": case_layernorm,
    "matmul": case_matmul,
    "tied_lm_head": case_tied_lm_head,
    "attention": case_attention,
    **{name: (lambda shape=shape: attention(*shape)) for name, shape in ATTENTION_SHAPES.items()},
    "gelu": case_gelu,
    "residual": case_residual,
    "residual_layernorm": case_residual_layernorm,
    "matmul_gelu": case_matmul_gelu,
    "crossentropy": case_crossentropy,
    "adamw": case_adamw,
}


def stored(tensor):
    tensor = tensor.detach()
    if tensor.dtype in (torch.int64, torch.int32):
        return tensor.to(torch.int32).contiguous()
    return tensor.to(torch.float32).contiguous()


def encode(tensors):
    out = io.BytesIO()
    out.write(MAGIC)
    out.write(struct.pack("<I", len(tensors)))
    for name, tensor in tensors.items():
        tensor = stored(tensor)
        encoded = name.encode("ascii")
        out.write(struct.pack("<I", len(encoded)))
        out.write(encoded)
        out.write(struct.pack("<II", DTYPE_CODES[tensor.dtype], tensor.dim()))
        out.write(struct.pack(f"<{tensor.dim()}I", *tensor.shape))
        fmt = "<%d%s" % (tensor.numel(), "f" if tensor.dtype == torch.float32 else "i")
        out.write(struct.pack(fmt, *tensor.reshape(-1).tolist()))
    return out.getvalue()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="compare with the stored files instead of writing them")
    args = parser.parse_args()
    torch.use_deterministic_algorithms(True)
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    stale = []
    for name, make in CASES.items():
        path = DATA_DIR / f"{name}.bin"
        data = encode(make())
        if args.check:
            if not path.exists() or path.read_bytes() != data:
                stale.append(path.name)
        else:
            path.write_bytes(data)
            print(f"{path.relative_to(DATA_DIR.parent.parent.parent)}: {len(data)} bytes")
    if stale:
        print("make_golden.py: out of date: " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
