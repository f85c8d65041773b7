"""Summary of the device check as Markdown: kernel parity, then our engine
against PyTorch on the same machine."""
import json
import os
import sys

out = sys.argv[1]


def load(name):
    try:
        with open(os.path.join(out, name)) as fh:
            return json.load(fh)
    except Exception as e:
        return {"_error": repr(e)}


k = load("kernels.json")
print("## Kernels against the CPU implementation (worst relative error)\n")
if "_error" in k:
    print("no kernels.json:", k["_error"], "\n")
else:
    bad = 0
    print("| kernel | worst | limit |\n|---|---|---|")
    for name, err in sorted(k.items()):
        lim = 2e-2 if name.endswith("/bf16") else 1e-5
        flag = "" if err <= lim else " **FAIL**"
        bad += err > lim
        print(f"| {name} | {err:.2e}{flag} | {lim:.0e} |")
    print(f"\n{len(k) - bad} of {len(k)} within the limit.\n")

b, t = load("bench.json"), load("torch.json")
print("## GRPO step: swetui (bf16, fp32 master) vs PyTorch on the same GPU\n")
if isinstance(b, dict):
    print("no bench.json:", b.get("_error"), "\n")
    b = []
tm = t.get("models", {}) if isinstance(t, dict) else {}
names = {"default": "default-model", "qwen2.5-coder-0.5b-shape": "qwen2.5-coder-0.5b"}
print("| model | G×(P+C) | train tok/s ours | torch | ratio | sample tok/s ours | torch generate | ratio | ours MiB | torch peak MiB (train/sample) |")
print("|---|---|---|---|---|---|---|---|---|---|")
for r in b:
    tr = tm.get(names.get(r["Model"], r["Model"]), {})
    tt, ts = tr.get("train_tokens_per_s"), tr.get("sample_tokens_per_s")
    ratio = lambda a, c: f"{a / c:.2f}" if c else "n/a"
    print(f"| {r['Model']} | {r['G']}×({r['Prompt']}+{r['New']}) | {r['TrainTokensPerS']:.0f} | {tt or float('nan'):.0f} | "
          f"{ratio(r['TrainTokensPerS'], tt)} | {r['SampleTokensPerS']:.0f} | {ts or float('nan'):.0f} | {ratio(r['SampleTokensPerS'], ts)} | "
          f"{r['DeviceUsedBytes'] / 2**20:.0f} | {tr.get('train_peak_bytes', 0) / 2**20:.0f}/{tr.get('sample_peak_bytes', 0) / 2**20:.0f} |")
print("\nTargets: training >= 0.5 of PyTorch's tokens/s, sampling >= PyTorch's generate.")
st = load("stages.json")
print("\n## Each stage: swetui against PyTorch, and the memory plan\n")
if isinstance(st, dict):
    print("no stages.json:", st.get("_error"), "\n")
    st = []
names["qwen2.5-coder-1.5b-shape"] = "qwen2.5-coder-1.5b"
keys = {"warm start step": ("warm_start_tokens_per_s", "warm_start_peak_bytes"),
        "eval sampling": ("sample_tokens_per_s", "sample_peak_bytes"),
        "LoRA GRPO step (sample, reference, train)": ("lora_grpo_tokens_per_s", "lora_grpo_peak_bytes")}
print("| model | stage | tok/s ours | torch | ratio | device MiB held | plan MiB | torch peak MiB |")
print("|---|---|---|---|---|---|---|---|")
for r in st:
    tr = tm.get(names.get(r["Model"], r["Model"]), {})
    tk, pk = keys.get(r["Stage"], ("", ""))
    tt = tr.get(tk)
    ratio = f"{r['TokensPerS'] / tt:.2f}" if tt else "n/a"
    print(f"| {r['Model']} | {r['Stage']} | {r['TokensPerS']:.0f} | {tt or float('nan'):.0f} | {ratio} | "
          f"{r['UsedBytes'] / 2**20:.0f} | {r['PlanBytes'] / 2**20:.0f} | {tr.get(pk, 0) / 2**20:.0f} |")
for name, tr in tm.items():
    for key, v in tr.items():
        if key.endswith("_error"):
            print(f"\ntorch {name} {key}: {v}")
if isinstance(t, dict) and "torch" in t:
    print(f"\ntorch {t['torch']}, transformers {t['transformers']}, {t['device']}")
