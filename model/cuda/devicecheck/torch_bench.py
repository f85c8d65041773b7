"""PyTorch/transformers side of the device check: the same work as
TestGPUBenchGRPO on the same machine, for each config.json given.

Training: fp32 weights under bf16 autocast (our engine: fp32 master weights,
bf16 compute), the completion tokens' logprobs at temperature 0.9 (only
their logits computed, as our engine does), an advantage-weighted loss,
grad-norm clipping and fused AdamW. Sampling: bf16 weights, generate() with
its KV cache, G copies of a P-token prompt, exactly C new tokens each.
Random weights: nothing is downloaded.
"""
import argparse
import json
import time

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM


def sync():
    torch.cuda.synchronize()


def train_bench(cfg, G, P, C, steps=3):
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.float32).cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.0, fused=True)
    ids = torch.randint(cfg.vocab_size, (G, P + C), device="cuda")
    adv = torch.linspace(-1, 1, G, device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            try:
                out = model(ids, logits_to_keep=C + 1)
            except TypeError:
                out = model(ids, num_logits_to_keep=C + 1)
            logits = out.logits[:, :-1].float() / 0.9
            lp = torch.log_softmax(logits, -1).gather(-1, ids[:, P:, None]).squeeze(-1)
            loss = -(lp * adv[:, None]).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()  # warm-up
    sync()
    torch.cuda.reset_peak_memory_stats()
    t = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    dt = (time.perf_counter() - t) / steps
    mem = torch.cuda.max_memory_allocated()
    params = sum(p.numel() for p in model.parameters())
    del model, opt
    torch.cuda.empty_cache()
    return {"train_step_s": dt, "train_tokens_per_s": G * (P + C) / dt, "train_peak_bytes": mem, "params": params}


def sample_bench(cfg, G, P, C):
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16).cuda().eval()
    prompt = torch.randint(cfg.vocab_size, (1, P), device="cuda").repeat(G, 1)
    mask = torch.ones_like(prompt)
    kw = dict(attention_mask=mask, do_sample=True, temperature=0.9, top_p=1.0, pad_token_id=0, eos_token_id=None)
    with torch.no_grad():
        model.generate(prompt, max_new_tokens=4, min_new_tokens=4, **kw)  # warm-up
        sync()
        torch.cuda.reset_peak_memory_stats()
        t = time.perf_counter()
        out = model.generate(prompt, max_new_tokens=C, min_new_tokens=C, **kw)
        sync()
        dt = time.perf_counter() - t
    new = (out.shape[1] - P) * G
    mem = torch.cuda.max_memory_allocated()
    del model
    torch.cuda.empty_cache()
    return {"sample_s": dt, "sample_tokens_per_s": new / dt, "sample_peak_bytes": mem}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--G", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--new", type=int, default=256)
    ap.add_argument("configs", nargs="+")
    a = ap.parse_args()
    res = {"torch": torch.__version__, "transformers": transformers.__version__,
           "device": torch.cuda.get_device_name(0), "G": a.G, "prompt": a.prompt, "new": a.new, "models": {}}
    for path in a.configs:
        cfg = AutoConfig.from_pretrained(path) if not path.endswith(".json") else AutoConfig.for_model(**json.load(open(path)))
        name = path.rsplit("/", 1)[-1].removesuffix(".json")
        r = {}
        for f in (train_bench, sample_bench):
            try:
                r.update(f(cfg, a.G, a.prompt, a.new))
            except Exception as e:  # one failure must not lose the other figures
                r[f.__name__ + "_error"] = repr(e)
        print(name, r, flush=True)
        res["models"][name] = r
        with open(a.out, "w") as fh:
            json.dump(res, fh, indent=2)


if __name__ == "__main__":
    main()
