#!/usr/bin/python3
"""Reference values for model/torch_test.go from an independent PyTorch
implementation of the Llama/Qwen2 forward pass (Hugging Face conventions:
[out, in] linear weights, rotate_half RoPE, repeat_interleave for GQA).

Weights come from the same integer hash as lcgWeight in checkpoint_test.go,
so no weight file is checked in: the Go test writes them as a Hugging Face
checkpoint, loads it through model.Load and compares.

Run with Debian's PyTorch:  /usr/bin/python3 model/testdata/torch_reference.py
It rewrites model/testdata/torch_reference.json.
"""
import json
import os

import numpy as np
import torch

M = 0xFFFFFFFF
torch.set_default_dtype(torch.float64)


def lcg_weight(name, i):
    h = 2166136261
    for c in name.encode():
        h = ((h ^ c) * 16777619) & M
    x = (h ^ ((i * 2654435761) & M)) & M
    x = (x * 1664525 + 1013904223) & M
    x = (x * 1664525 + 1013904223) & M
    v = np.float32((x >> 8) / float(1 << 24) - 0.5) * np.float32(0.5)
    if name.endswith("norm.weight"):
        v = np.float32(v + np.float32(1))
    return float(v)


BF16 = False  # round every weight to bfloat16 (a case's "bf16")


def tensor(name, shape):
    n = int(np.prod(shape))
    t = torch.tensor([lcg_weight(name, i) for i in range(n)]).reshape(shape)
    if BF16:  # as a bf16 checkpoint holds it: round to nearest even
        t = t.to(torch.float32).to(torch.bfloat16).to(torch.float64)
    return t


def forward(cfg, tokens):
    d, H, KVH, F, V = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["intermediate_size"], cfg["vocab_size"]
    hd, eps, theta = d // H, cfg["rms_norm_eps"], cfg["rope_theta"]
    bias = cfg["model_type"] == "qwen2"
    T = len(tokens)

    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv)
    emb = torch.cat([freqs, freqs], dim=-1)
    cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]

    def rotate_half(x):
        x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
        return torch.cat([-x2, x1], dim=-1)

    def rope(x):
        return x * cos + rotate_half(x) * sin

    E = tensor("model.embed_tokens.weight", (V, d))
    x = E[torch.tensor(tokens)]
    mask = torch.full((T, T), float("-inf")).triu(1)
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        h = rms(x, tensor(p + "input_layernorm.weight", (d,)))
        q = torch.nn.functional.linear(h, tensor(p + "self_attn.q_proj.weight", (H * hd, d)),
                                       tensor(p + "self_attn.q_proj.bias", (H * hd,)) if bias else None)
        k = torch.nn.functional.linear(h, tensor(p + "self_attn.k_proj.weight", (KVH * hd, d)),
                                       tensor(p + "self_attn.k_proj.bias", (KVH * hd,)) if bias else None)
        v = torch.nn.functional.linear(h, tensor(p + "self_attn.v_proj.weight", (KVH * hd, d)),
                                       tensor(p + "self_attn.v_proj.bias", (KVH * hd,)) if bias else None)
        q, k, v = q.view(T, H, hd), k.view(T, KVH, hd), v.view(T, KVH, hd)
        q, k = rope(q), rope(k)
        k = k.repeat_interleave(H // KVH, dim=1)
        v = v.repeat_interleave(H // KVH, dim=1)
        s = torch.einsum("thd,shd->hts", q, k) / hd ** 0.5 + mask
        a = torch.einsum("hts,shd->thd", s.softmax(-1), v).reshape(T, H * hd)
        x = x + torch.nn.functional.linear(a, tensor(p + "self_attn.o_proj.weight", (d, H * hd)))
        h = rms(x, tensor(p + "post_attention_layernorm.weight", (d,)))
        g = torch.nn.functional.linear(h, tensor(p + "mlp.gate_proj.weight", (F, d)))
        u = torch.nn.functional.linear(h, tensor(p + "mlp.up_proj.weight", (F, d)))
        x = x + torch.nn.functional.linear(torch.nn.functional.silu(g) * u, tensor(p + "mlp.down_proj.weight", (d, F)))
    x = rms(x, tensor("model.norm.weight", (d,)))
    head = E if cfg["tie_word_embeddings"] else tensor("lm_head.weight", (V, d))
    return torch.nn.functional.linear(x, head)


CASES = [
    {"name": "llama-gqa-tied", "config": {"model_type": "llama", "hidden_size": 16, "intermediate_size": 24,
                                          "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
                                          "vocab_size": 37, "max_position_embeddings": 64, "rms_norm_eps": 1e-5,
                                          "rope_theta": 1000000.0, "tie_word_embeddings": True, "hidden_act": "silu"},
     "temperature": 1.0},
    {"name": "qwen2-bias-untied-temp", "config": {"model_type": "qwen2", "hidden_size": 16, "intermediate_size": 24,
                                                  "num_attention_heads": 4, "num_key_value_heads": 1, "num_hidden_layers": 2,
                                                  "vocab_size": 37, "max_position_embeddings": 64, "rms_norm_eps": 1e-6,
                                                  "rope_theta": 10000.0, "tie_word_embeddings": False, "hidden_act": "silu"},
     "temperature": 0.7},
    # A pretrained model's files: bf16 weights in two shards (the Go side
    # writes them through model.Save), Qwen2's RoPE base and norm epsilon.
    {"name": "qwen2-bf16-two-shards", "bf16": True,
     "config": {"model_type": "qwen2", "hidden_size": 16, "intermediate_size": 24,
                "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
                "vocab_size": 37, "max_position_embeddings": 64, "rms_norm_eps": 1e-6,
                "rope_theta": 1000000.0, "tie_word_embeddings": False, "hidden_act": "silu"},
     "temperature": 1.0},
]
TOKENS = [1, 7, 3, 30, 2, 2, 11, 36, 0, 5, 19, 4, 4, 28, 13, 7]

out = {"torch_version": torch.__version__, "tokens": TOKENS, "cases": []}
for case in CASES:
    BF16 = case.get("bf16", False)
    logits = forward(case["config"], TOKENS) / case["temperature"]
    logp = logits.log_softmax(-1)
    nxt = torch.tensor(TOKENS[1:])
    lp = logp[:-1].gather(1, nxt[:, None])[:, 0]
    ent = -(logp.exp() * logp).sum(-1)[:-1]
    out["cases"].append(dict(case, logprobs=lp.tolist(), entropy=ent.tolist()))

path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_reference.json")
with open(path, "w") as f:
    json.dump(out, f, indent=1)
print("wrote", path)
