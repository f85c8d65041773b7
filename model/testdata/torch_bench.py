#!/usr/bin/python3
"""The same training step as BenchmarkTrainStep in PyTorch (CPU, float32):
the default model of config.toml, 4 sequences x 256 tokens (64 prompt),
loss = mean NLL of the completion tokens, backward, clip, AdamW.

    /usr/bin/python3 model/testdata/torch_bench.py [steps [threads]]
"""
import sys
import time

import torch
import torch.nn.functional as F

torch.manual_seed(0)
torch.set_num_threads(int(sys.argv[2]) if len(sys.argv) > 2 else 2)
L, D, H, KVH, FF, V = 4, 128, 4, 2, 384, 2048
HD = D // H
B, T, P = 4, 256, 64


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.n1 = torch.nn.Parameter(torch.ones(D))
        self.n2 = torch.nn.Parameter(torch.ones(D))
        self.q = torch.nn.Linear(D, H * HD, bias=False)
        self.k = torch.nn.Linear(D, KVH * HD, bias=False)
        self.v = torch.nn.Linear(D, KVH * HD, bias=False)
        self.o = torch.nn.Linear(H * HD, D, bias=False)
        self.g = torch.nn.Linear(D, FF, bias=False)
        self.u = torch.nn.Linear(D, FF, bias=False)
        self.d = torch.nn.Linear(FF, D, bias=False)


def rms(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(V, D)
        self.blocks = torch.nn.ModuleList([Block() for _ in range(L)])
        self.norm = torch.nn.Parameter(torch.ones(D))
        self.head = torch.nn.Linear(D, V, bias=False)
        inv = 1.0 / (10000 ** (torch.arange(0, HD, 2).float() / HD))
        f = torch.outer(torch.arange(T).float(), inv)
        e = torch.cat([f, f], -1)
        self.cos, self.sin = e.cos()[None, None], e.sin()[None, None]

    def rope(self, x):
        x1, x2 = x[..., : HD // 2], x[..., HD // 2:]
        return x * self.cos + torch.cat([-x2, x1], -1) * self.sin

    def forward(self, tok):
        x = self.emb(tok)
        for b in self.blocks:
            h = rms(x, b.n1)
            q = b.q(h).view(B, T, H, HD).transpose(1, 2)
            k = b.k(h).view(B, T, KVH, HD).transpose(1, 2)
            v = b.v(h).view(B, T, KVH, HD).transpose(1, 2)
            q, k = self.rope(q), self.rope(k)
            k, v = k.repeat_interleave(H // KVH, 1), v.repeat_interleave(H // KVH, 1)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True) if hasattr(F, "scaled_dot_product_attention") \
                else (torch.softmax((q @ k.transpose(-1, -2)) / HD ** 0.5 + torch.full((T, T), float("-inf")).triu(1), -1) @ v)
            x = x + b.o(a.transpose(1, 2).reshape(B, T, D))
            h = rms(x, b.n2)
            x = x + b.d(F.silu(b.g(h)) * b.u(h))
        return self.head(rms(x, self.norm))


m = Model()
opt = torch.optim.AdamW(m.parameters(), lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0)
tok = torch.randint(0, V, (B, T))
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 5


def step():
    opt.zero_grad()
    logp = m(tok).log_softmax(-1)[:, P - 1:-1]
    lp = logp.gather(-1, tok[:, P:, None])[..., 0]
    loss = -lp.mean()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
    opt.step()


step()  # warm-up
t0 = time.perf_counter()
for _ in range(steps):
    step()
dt = (time.perf_counter() - t0) / steps
with torch.no_grad():
    t1 = time.perf_counter()
    for _ in range(steps):
        m(tok).log_softmax(-1)
    fdt = (time.perf_counter() - t1) / steps
print("torch %s threads=%d: train step %.3f s, %.0f tokens/s; forward %.3f s, %.0f tokens/s"
      % (torch.__version__, torch.get_num_threads(), dt, B * T / dt, fdt, B * T / fdt))
