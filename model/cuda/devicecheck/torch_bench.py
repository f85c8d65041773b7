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
import math
import time

import torch

try:
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM
except ImportError:  # --selftest runs without it
    transformers = None

LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class LoRALinear(torch.nn.Module):
    """A plain LoRA layer (what PEFT's LoraLayer computes with dropout 0):
    y = base(x) + (alpha/r)·(x Aᵀ) Bᵀ, A Kaiming-uniform(a=√5), B zero, fp32
    adapters beside a frozen base; enabled=False gives the base (the KL
    reference, as PEFT's disable_adapter())."""

    def __init__(self, base, r, alpha):
        super().__init__()
        self.base, self.scale, self.enabled = base, alpha / r, True
        dev = base.weight.device
        self.A = torch.nn.Parameter(torch.empty(r, base.in_features, device=dev, dtype=torch.float32))
        self.B = torch.nn.Parameter(torch.zeros(base.out_features, r, device=dev, dtype=torch.float32))
        torch.nn.init.kaiming_uniform_(self.A, a=math.sqrt(5))

    def forward(self, x):
        y = self.base(x)
        if not self.enabled:
            return y
        return y + ((x.to(self.A.dtype) @ self.A.t()) @ self.B.t() * self.scale).to(y.dtype)


def lora_wrap(model, r, alpha, targets=LORA_TARGETS):
    """Freezes model and puts a LoRALinear on every targeted projection;
    returns the LoRA layers."""
    for p in model.parameters():
        p.requires_grad_(False)
    layers = []
    for name, mod in list(model.named_modules()):
        for child, sub in list(mod.named_children()):
            if child in targets and isinstance(sub, torch.nn.Linear):
                lora = LoRALinear(sub, r, alpha)
                setattr(mod, child, lora)
                layers.append(lora)
    return layers


def set_adapters(layers, on):
    for lora in layers:
        lora.enabled = on


def sync():
    torch.cuda.synchronize()


def timed(step, steps):
    """One warm-up call of step, then the mean seconds of steps calls and
    the peak device memory over them."""
    step()
    sync()
    torch.cuda.reset_peak_memory_stats()
    t = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    return (time.perf_counter() - t) / steps, torch.cuda.max_memory_allocated()


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

    dt, mem = timed(step, steps)
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


def completion_logprobs(model, ids, P, C, temp):
    try:
        out = model(ids, logits_to_keep=C + 1)
    except TypeError:
        out = model(ids, num_logits_to_keep=C + 1)
    logits = out.logits[:, :-1].float() / temp
    return torch.log_softmax(logits, -1).gather(-1, ids[:, P:, None]).squeeze(-1)


def warm_start_bench(cfg, G, P, C, steps=3):
    """TestGPUBenchStages' warm start step: every weight trains (fp32 under
    bf16 autocast, fused AdamW), the mean NLL of 4 sequences' C reply
    tokens."""
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.float32).cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.0, fused=True)
    ids = torch.randint(cfg.vocab_size, (4, P + C), device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = -completion_logprobs(model, ids, P, C, 1.0).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    dt, mem = timed(step, steps)
    del model, opt
    torch.cuda.empty_cache()
    return {"warm_start_step_s": dt, "warm_start_tokens_per_s": 4 * (P + C) / dt, "warm_start_peak_bytes": mem}


def lora_grpo_bench(cfg, G, P, C, r=16, alpha=32, steps=2):
    """TestGPUBenchStages' LoRA GRPO step: a bf16 frozen base with fp32
    rank-16 adapters on every projection; G completions generated with the
    adapters, the base's logprobs as the reference (adapters off), the
    advantage-weighted loss, AdamW on the adapters."""
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16).cuda()
    layers = lora_wrap(model, r, alpha)
    params = [p for lora in layers for p in (lora.A, lora.B)]
    opt = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.0, fused=True)
    prompt = torch.randint(cfg.vocab_size, (1, P), device="cuda").repeat(G, 1)
    kw = dict(attention_mask=torch.ones_like(prompt), do_sample=True, temperature=0.9, top_p=1.0, pad_token_id=0, eos_token_id=None)
    adv = torch.linspace(-1, 1, G, device="cuda")

    def step():
        model.eval()
        with torch.no_grad():
            ids = model.generate(prompt, max_new_tokens=C, min_new_tokens=C, **kw)
            set_adapters(layers, False)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                completion_logprobs(model, ids, P, C, 0.9)
            set_adapters(layers, True)
        model.train()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = -(completion_logprobs(model, ids, P, C, 0.9) * adv[:, None]).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    dt, mem = timed(step, steps)
    n = sum(p.numel() for p in params)
    del model, opt, layers, params
    torch.cuda.empty_cache()
    return {"lora_grpo_step_s": dt, "lora_grpo_tokens_per_s": G * (P + C) / dt, "lora_grpo_peak_bytes": mem, "lora_params": n}


def selftest():
    """The LoRA layer on the CPU: starts as the base, the base stays frozen,
    only A and B get gradients, disabled it is the base."""
    torch.manual_seed(1)

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj, self.lm_head = torch.nn.Linear(8, 6), torch.nn.Linear(6, 5)

        def forward(self, x):
            return self.lm_head(self.q_proj(x))

    m = Block()
    x = torch.randn(3, 8)
    want = m(x).detach()
    layers = lora_wrap(m, 2, 4)
    assert len(layers) == 1 and isinstance(m.q_proj, LoRALinear), "q_proj not wrapped"
    assert torch.allclose(m(x), want), "B = 0 must give the base"
    with torch.no_grad():
        layers[0].B.normal_()
    y = m(x)
    assert not torch.allclose(y, want), "the adapter changes nothing"
    y.sum().backward()
    assert layers[0].A.grad is not None and layers[0].B.grad is not None, "adapters got no gradient"
    assert all(p.grad is None for n, p in m.named_parameters() if n.startswith(("q_proj.base", "lm_head"))), "the base trained"
    h = x @ m.q_proj.base.weight.t() + m.q_proj.base.bias
    manual = h + (x @ layers[0].A.t()) @ layers[0].B.t() * 2.0
    assert torch.allclose(m.q_proj(x), manual, atol=1e-6), "not W x + (alpha/r) B A x"
    set_adapters(layers, False)
    assert torch.allclose(m(x), want), "disabled adapters must give the base"
    print("lora selftest ok")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--G", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--new", type=int, default=256)
    ap.add_argument("--stages", action="store_true", help="also the warm start step and the LoRA GRPO step")
    ap.add_argument("--selftest", action="store_true", help="check the LoRA layer on the CPU and exit")
    ap.add_argument("configs", nargs="*")
    a = ap.parse_args()
    if a.selftest:
        selftest()
        return
    if not a.out or not a.configs:
        ap.error("--out and at least one config are needed")
    res = {"torch": torch.__version__, "transformers": transformers.__version__,
           "device": torch.cuda.get_device_name(0), "G": a.G, "prompt": a.prompt, "new": a.new, "models": {}}
    for path in a.configs:
        cfg = AutoConfig.from_pretrained(path) if not path.endswith(".json") else AutoConfig.for_model(**json.load(open(path)))
        name = path.rsplit("/", 1)[-1].removesuffix(".json")
        r = {}
        benches = (train_bench, sample_bench) + ((warm_start_bench, lora_grpo_bench) if a.stages else ())
        for f in benches:
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
