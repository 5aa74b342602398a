"""PyTorch peer for bench/training.sh: the same GPT (pre-LN, tanh GELU, tied
head), AdamW and batch shape as `geotrain train`, timed the same way.

usage: pytorch_gpt.py LAYERS HIDDEN HEADS SEQ VOCAB BATCH STEPS
Prints one line: "pytorch tokens_per_s=<x> step_ms=<y>" (steps after the
first, which pays for warm-up). Threads come from the environment
(OMP_NUM_THREADS), as for geotrain.
"""
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, c, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.qkv, self.proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
        self.fc, self.out = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2)
                   for z in self.qkv(self.ln1(x)).split(c, -1))
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(c // self.heads)
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool), 1)
        y = (scores.masked_fill(mask, float("-inf")).softmax(-1) @ v).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, layers, c, heads, seq, vocab):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, c), nn.Embedding(seq, c)
        self.blocks = nn.ModuleList(Block(c, heads) for _ in range(layers))
        self.lnf = nn.LayerNorm(c)

    def forward(self, x, y):
        h = self.wte(x) + self.wpe(torch.arange(x.shape[1]))
        for block in self.blocks:
            h = block(h)
        logits = self.lnf(h) @ self.wte.weight.T
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1))


def main():
    layers, c, heads, seq, vocab, batch, steps = (int(a) for a in sys.argv[1:8])
    torch.manual_seed(1)
    model = GPT(layers, c, heads, seq, vocab)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=1e-4, betas=(0.9, 0.95), eps=1e-8)
    x = torch.randint(0, min(vocab, 256), (batch, seq))
    y = torch.randint(0, min(vocab, 256), (batch, seq))
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        times.append(time.perf_counter() - start)
    timed = times[1:] or times
    step_s = sum(timed) / len(timed)
    print(f"pytorch tokens_per_s={batch * seq / step_s:.1f} step_ms={1e3 * step_s:.1f}")


if __name__ == "__main__":
    main()
