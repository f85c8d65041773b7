package model

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/swetui/swetui/config"
)

// TestAdapterRoundTripInPEFTLayout: an adapter folder holds PEFT's names,
// shapes and config, and reads back exactly with its optimiser state.
func TestAdapterRoundTripInPEFTLayout(t *testing.T) {
	m, err := New(Config{Layers: 2, DModel: 8, Heads: 2, KVHeads: 1, DFF: 12, Context: 16, VocabSize: 17, AttnBias: true}, 1)
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewLoRA(m, LoRAConfig{Rank: 3, Alpha: 6, Targets: []string{"q_proj", "down_proj"}}, 4)
	if err != nil {
		t.Fatal(err)
	}
	for i := range l.data {
		l.data[i] = float32(i%7) - 3.25
	}
	opt := NewAdamW(config.Default().Optim, l.NumParams())
	opt.Step = 5
	opt.m[3], opt.v[4] = 0.5, 0.25
	dir := filepath.Join(t.TempDir(), "adapter")
	if err := SaveAdapter(dir, Adapter{LoRA: l, BaseModel: "/models/qwen", Optim: opt, Extra: map[string][]byte{"sampler_rng": {1, 2}}}); err != nil {
		t.Fatal(err)
	}
	if !IsAdapter(dir) {
		t.Fatal("IsAdapter = false")
	}
	var pc map[string]any
	raw, _ := os.ReadFile(filepath.Join(dir, "adapter_config.json"))
	if err := json.Unmarshal(raw, &pc); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": 3.0, "lora_alpha": 6.0,
		"lora_dropout": 0.0, "bias": "none", "base_model_name_or_path": "/models/qwen"} {
		if pc[k] != want {
			t.Errorf("adapter_config.json %s = %v, want %v", k, pc[k], want)
		}
	}
	// The tensors as PEFT names and shapes them: lora_A [r, in], lora_B [out, r].
	ts, _, err := readSafetensors(filepath.Join(dir, "adapter_model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]int{
		"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": {3, 8},
		"base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight": {8, 3},
		"base_model.model.model.layers.1.mlp.down_proj.lora_A.weight":    {3, 12},
		"base_model.model.model.layers.1.mlp.down_proj.lora_B.weight":    {8, 3},
	}
	for name, shape := range want {
		if got, ok := ts[name]; !ok || !slices.Equal(got.shape, shape) {
			t.Errorf("%s: shape %v (present %v), want %v", name, got.shape, ok, shape)
		}
	}
	if len(ts) != 8 {
		t.Errorf("%d tensors, want 8 (A and B of q_proj and down_proj in 2 layers)", len(ts))
	}
	// lora_A[j][i] in the file is A[i][j] here.
	a := l.Params[0]
	fileA := ts["base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"].data
	if fileA[1*8+2] != a.W[2*3+1] {
		t.Errorf("lora_A[1][2] = %g, want A[2][1] = %g", fileA[1*8+2], a.W[2*3+1])
	}
	f, _ := os.Open(filepath.Join(dir, "adapter_model.safetensors"))
	var hlen uint64
	binary.Read(f, binary.LittleEndian, &hlen)
	f.Close()
	if hlen%8 != 0 {
		t.Errorf("header of %d bytes: the data must start 8-byte aligned", hlen)
	}

	got, err := LoadAdapter(dir, m)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.LoRA.Weights(), l.Weights()) || got.BaseModel != "/models/qwen" {
		t.Error("adapters differ after the round trip")
	}
	if got.Optim == nil || got.Optim.Step != 5 || got.Optim.m[3] != 0.5 || got.Optim.v[4] != 0.25 {
		t.Errorf("optimiser state %+v", got.Optim)
	}
	if !slices.Equal(got.Extra["sampler_rng"], []byte{1, 2}) {
		t.Error("extra files lost")
	}

	// Refusals name the file and what is wrong.
	other, _ := New(Config{Layers: 2, DModel: 8, Heads: 2, KVHeads: 1, DFF: 16, Context: 16, VocabSize: 17}, 1)
	if _, err := LoadAdapter(dir, other); err == nil || !strings.Contains(err.Error(), "down_proj.lora_A.weight has shape [3 12], want [3 16]") {
		t.Errorf("adapter for another architecture: %v", err)
	}
	pc["use_dora"] = true
	raw, _ = json.Marshal(pc)
	os.WriteFile(filepath.Join(dir, "adapter_config.json"), raw, 0o644)
	if _, err := LoadAdapter(dir, m); err == nil || !strings.Contains(err.Error(), "DoRA") {
		t.Errorf("DoRA adapter: %v", err)
	}
}
