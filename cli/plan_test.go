package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestPlanCommand(t *testing.T) {
	hf := filepath.Join(t.TempDir(), "hf")
	tinyPretrained(t, hf)
	for _, tt := range []struct {
		name string
		args []string
		code int
		says []string
	}{
		{"7B LoRA in 80 GiB", []string{"--model", "qwen2.5-coder-7b", "lora.rank=16", "grpo.group_size=8", "model.context=8192", "--gpu-gib", "80"}, ExitOK,
			[]string{"qwen2.5-coder-7b's shape, 7.62 B weights; LoRA rank 16", "total                                                                 80.19 GiB",
				"does not fit in 80 GiB", "model.recompute=auto: a run on this device recomputes its activations, and holds 30.36 GiB", "it fits with model.recompute=on alone: 30.36 GiB", "it fits with model.micro_tokens=8192: 49.41 GiB"}},
		{"1.5B full fine-tuning in 48 GiB", []string{"--model", "qwen2.5-coder-1.5b", "grpo.group_size=16", "model.context=8192", "--gpu-gib", "48"}, ExitOK,
			[]string{"full fine-tuning", "72.86 GiB", "it fits with lora.rank=16 alone: 35.37 GiB",
				"it fits with model.recompute=on model.micro_tokens=8192: 46.83 GiB", "activations (one micro-batch of 8192 tokens, recomputed)"}},
		{"recomputing asked for", []string{"--model", "qwen2.5-coder-7b", "lora.rank=16", "grpo.group_size=8", "model.context=8192", "model.recompute=on"}, ExitOK,
			[]string{"activations (one micro-batch of 16384 tokens, recomputed)", "11.99 GiB", "30.36 GiB"}},
		{"7B full fine-tuning on 8 GPUs", []string{"--model", "qwen2.5-coder-7b", "--gpus", "8", "grpo.group_size=8", "model.context=8192", "--gpu-gib", "80"}, ExitOK,
			[]string{"one GPU of 8, data-parallel", "ZeRO-1: each keeps and updates 1/8 of the AdamW moments", "AdamW moments (fp32, ZeRO-1: this GPU's 1/8)                           7.09 GiB",
				"NCCL buffers (8 GPUs", "model sizes on each of 8 GPUs of 80 GiB", "qwen2.5-coder-3b       3.40 B   full fine-tuning  65.99 GiB fits",
				"qwen2.5-coder-7b       7.62 B   full fine-tuning 139.20 GiB over   LoRA rank 16  30.35 GiB fits"}},
		{"32B LoRA on 8 GPUs", []string{"--model", "qwen2.5-coder-32b", "--gpus", "8", "lora.rank=16", "grpo.group_size=8", "model.context=8192", "model.recompute=on"}, ExitOK,
			[]string{"qwen2.5-coder-32b's shape, 32.76 B weights; LoRA rank 16", "one GPU of 8", "weights (frozen base in bf16, norms and biases fp32)                  61.04 GiB", "ZeRO-1: this GPU's 1/8)   1.38 GiB"}},
		{"8 GPUs unsharded", []string{"--model", "qwen2.5-coder-7b", "--gpus", "8", "model.shard_optimizer=false"}, ExitOK,
			[]string{"each holds the whole AdamW moments", "AdamW moments (fp32)                                                  56.74 GiB"}},
		{"no GPUs", []string{"--gpus", "0"}, ExitUsage, []string{"--gpus must be at least 1, not 0"}},
		{"fits", []string{"--model", "qwen2.5-coder-0.5b", "--gpu-gib", "80"}, ExitOK, []string{"fits in 80 GiB"}},
		{"nothing fits", []string{"--model", "qwen2.5-coder-14b", "model.context=32768", "--gpu-gib", "24"}, ExitFailure, []string{"no combination"}},
		{"eval samples only", []string{"--model", "qwen2.5-coder-7b", "--eval", "8"}, ExitOK, []string{"eval: sampling 8 replies a task"}},
		{"a model folder", []string{"--model", hf}, ExitOK, []string{hf}},
		{"a verifier refreshed beside the run", []string{"--model", "qwen2.5-coder-7b", "lora.rank=16", "reward.verifier=" + hf, "reward.verifier_refresh_steps=200"}, ExitOK,
			[]string{"the verifier's refresh (reward.verifier_refresh_steps)"}},
		{"an unknown model", []string{"--model", "gpt-9"}, ExitUsage, []string{"neither a known shape (llama-3-8b, qwen2.5-coder-0.5b"}},
	} {
		code, stdout, stderr := runCLI(t, append([]string{"plan"}, tt.args...)...)
		if code != tt.code {
			t.Errorf("%s: exit %d, want %d\n%s%s", tt.name, code, tt.code, stdout, stderr)
		}
		for _, s := range tt.says {
			if !strings.Contains(stdout+stderr, s) {
				t.Errorf("%s: no %q in\n%s%s", tt.name, s, stdout, stderr)
			}
		}
	}
	if code, stdout, _ := runCLI(t, "plan", "--model", "qwen2.5-coder-7b", "--eval", "8"); code != ExitOK || strings.Contains(stdout, "AdamW") || strings.Contains(stdout, "gradients") {
		t.Errorf("eval's plan holds training state:\n%s", stdout)
	}
}
