#!/usr/bin/python3
"""KV-cache decoding of the default model in PyTorch (CPU, float32, eager),
as BenchmarkSample does it: prefill the prompt once, share its cache across
G=4 completions, then decode them together one batched step per token
(128 new tokens, temperature 1, full-vocabulary sampling). tokens/s counts
sampled tokens, prefill included.

    /usr/bin/python3 model/testdata/torch_decode.py [rounds [threads]]
"""
import sys
import time

import torch

torch.manual_seed(0)
torch.set_num_threads(int(sys.argv[2]) if len(sys.argv) > 2 else 2)
L, D, H, KVH, FF, V, CTX = 4, 128, 4, 2, 384, 2048, 1024
HD, GRP = D // H, H // KVH
G, NEW = 4, 128


def lin(i, o):
    return torch.randn(i, o) * 0.02


W = [dict(n1=torch.ones(D), n2=torch.ones(D), q=lin(D, H * HD), k=lin(D, KVH * HD), v=lin(D, KVH * HD),
          o=lin(H * HD, D), g=lin(D, FF), u=lin(D, FF), d=lin(FF, D)) for _ in range(L)]
EMB, NORM, HEAD = torch.randn(V, D) * 0.02, torch.ones(D), lin(D, V)
inv = 1.0 / (10000 ** (torch.arange(0, HD, 2).float() / HD))
f = torch.outer(torch.arange(CTX).float(), inv)
COS, SIN = torch.cat([f, f], -1).cos(), torch.cat([f, f], -1).sin()


def rms(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def rope(x, pos):  # x [B, heads, T, HD], pos [T]
    x1, x2 = x[..., : HD // 2], x[..., HD // 2:]
    return x * COS[pos] + torch.cat([-x2, x1], -1) * SIN[pos]


def forward(tok, pos, kc, vc, n):
    """tok [B, T] at positions pos; caches [L][B, KVH, CTX, HD] hold n positions."""
    B, T = tok.shape
    x = EMB[tok]
    for l, w in enumerate(W):
        h = rms(x, w["n1"])
        q = (h @ w["q"]).view(B, T, H, HD).transpose(1, 2)
        k = (h @ w["k"]).view(B, T, KVH, HD).transpose(1, 2)
        v = (h @ w["v"]).view(B, T, KVH, HD).transpose(1, 2)
        q, k = rope(q, pos), rope(k, pos)
        kc[l][:, :, n:n + T], vc[l][:, :, n:n + T] = k, v
        # Grouped-query attention without copying the cache: the GRP query
        # heads of a kv head are one [GRP*T, HD] block against its keys.
        K, Vv = kc[l][:, :, : n + T], vc[l][:, :, : n + T]
        s = (q.reshape(B, KVH, GRP * T, HD) @ K.transpose(-1, -2)) / HD ** 0.5
        if T > 1:
            s = s + torch.full((T, n + T), float("-inf")).triu(n + 1).repeat(GRP, 1)
        a = (torch.softmax(s, -1) @ Vv).view(B, H, T, HD)
        x = x + a.transpose(1, 2).reshape(B, T, D) @ w["o"]
        h = rms(x, w["n2"])
        x = x + (torch.nn.functional.silu(h @ w["g"]) * (h @ w["u"])) @ w["d"]
    return rms(x[:, -1], NORM) @ HEAD


def sample(prompt):
    P = prompt.shape[0]
    kc = [torch.zeros(1, KVH, CTX, HD) for _ in range(L)]
    vc = [torch.zeros(1, KVH, CTX, HD) for _ in range(L)]
    logits = forward(prompt[None], torch.arange(P), kc, vc, 0).expand(G, V)
    kc = [c.expand(G, -1, -1, -1).clone() for c in kc]
    vc = [c.expand(G, -1, -1, -1).clone() for c in vc]
    n = 0
    for t in range(NEW):
        lp = torch.log_softmax(logits, -1)
        tok = torch.multinomial(lp.exp(), 1)
        n += G
        if t == NEW - 1:
            break
        logits = forward(tok, torch.tensor([P + t]), kc, vc, P + t)
    return n


rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
with torch.no_grad():
    for P in (256, 768):
        prompt = torch.randint(0, V, (P,))
        sample(prompt)  # warm-up
        best = 0.0
        for _ in range(rounds):
            t0 = time.perf_counter()
            n = sample(prompt)
            best = max(best, n / (time.perf_counter() - t0))
        print("torch %s threads=%d: sample G=%d prompt=%d new=%d: %.0f tokens/s"
              % (torch.__version__, torch.get_num_threads(), G, P, NEW, best))
