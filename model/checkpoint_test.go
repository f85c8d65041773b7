package model

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/swetui/swetui/config"
)

func TestCheckpointRoundTrip(t *testing.T) {
	cfg := tinyConfig()
	cfg.AttnBias = true
	m := tinyModel(t, cfg, 8)
	o := NewAdamW(config.Optim{Beta1: 0.9, Beta2: 0.95, Eps: 1e-7, WeightDecay: 0.1}, m.NumParams())
	for i := range m.Grads() {
		m.Grads()[i] = float32(i%7) - 3
	}
	if err := o.Update(m, 1e-3); err != nil {
		t.Fatal(err)
	}
	tok, err := TrainBPE(context.Background(), slices.Values(corpus(4, 20)), 300, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "ckpt")
	extra := map[string][]byte{"rng": {1, 2, 3}, "curriculum.json": []byte(`{"phase":"syntax"}`)}
	for round := 0; round < 2; round++ { // the second save replaces the first
		if err := Save(dir, Checkpoint{Model: m, Optim: o, Tokenizer: tok, Extra: extra}); err != nil {
			t.Fatal(err)
		}
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(dir), ".ckpt*"))
	if len(left) > 0 {
		t.Errorf("temporary directories left behind: %v", left)
	}
	ck, err := Load(dir, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ck.Model.Weights(), m.Weights()) {
		t.Error("weights differ after load")
	}
	om, ov := o.State()
	lm, lv := ck.Optim.State()
	if !slices.Equal(om, lm) || !slices.Equal(ov, lv) || ck.Optim.Step != 1 || ck.Optim.Beta2 != 0.95 || ck.Optim.WeightDecay != 0.1 {
		t.Errorf("optimiser state differs after load: step %d beta2 %v", ck.Optim.Step, ck.Optim.Beta2)
	}
	if got := ck.Tokenizer.Encode("def f(x):\n"); !slices.Equal(got, tok.Encode("def f(x):\n")) {
		t.Error("tokenizer differs after load")
	}
	for k, v := range extra {
		if string(ck.Extra[k]) != string(v) {
			t.Errorf("extra %s = %q, want %q", k, ck.Extra[k], v)
		}
	}
	b := Batch{Tokens: [][]int{{1, 2, 3, 4, 5, 6}}, PromptLen: []int{2}}
	r1, _ := m.Logprobs(context.Background(), b)
	r2, err := ck.Model.Logprobs(context.Background(), b)
	if err != nil || !slices.Equal(r1.Logprobs[0], r2.Logprobs[0]) {
		t.Errorf("logprobs differ after load: %v vs %v (%v)", r1.Logprobs, r2.Logprobs, err)
	}
}

func TestLoadRefusesMismatchedArchitecture(t *testing.T) {
	m := tinyModel(t, tinyConfig(), 1)
	dir := filepath.Join(t.TempDir(), "c")
	if err := Save(dir, Checkpoint{Model: m}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		field string
		edit  func(*Config)
	}{
		{"d_model", func(c *Config) { c.DModel = 32 }},
		{"layers", func(c *Config) { c.Layers = 3 }},
		{"kv_heads", func(c *Config) { c.KVHeads = 4 }},
		{"vocab_size", func(c *Config) { c.VocabSize = 40 }},
		{"attention_bias", func(c *Config) { c.AttnBias = true }},
	}
	for _, tc := range cases {
		want := tinyConfig()
		tc.edit(&want)
		_, err := Load(dir, &want)
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: Load error %v; want one naming %s", tc.field, err, tc.field)
		}
	}
	if _, err := Load(filepath.Join(t.TempDir(), "none"), nil); err == nil {
		t.Error("loading a missing checkpoint succeeded")
	}
	if err := Save(dir, Checkpoint{Model: m, Extra: map[string][]byte{"../x": nil}}); err == nil {
		t.Error("an extra file name with a path was accepted")
	}
}

// writeHF writes a Hugging Face-style checkpoint the way transformers lays it
// out ([out, in] linear weights) in the given dtype, from a float function.
func writeHF(t *testing.T, dir string, cfg map[string]any, tensors map[string][]int, dtype string, val func(name string, i int) float32) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cj, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cj, 0o644); err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(tensors))
	for n := range tensors {
		names = append(names, n)
	}
	slices.Sort(names)
	header := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	var data []byte
	for _, n := range names {
		count := prod(tensors[n])
		start := len(data)
		for i := 0; i < count; i++ {
			v := val(n, i)
			switch dtype {
			case "BF16":
				data = binary.LittleEndian.AppendUint16(data, uint16(math.Float32bits(v)>>16))
			case "F16":
				data = binary.LittleEndian.AppendUint16(data, toF16(v))
			default:
				data = binary.LittleEndian.AppendUint32(data, math.Float32bits(v))
			}
		}
		header[n] = map[string]any{"dtype": dtype, "shape": tensors[n], "data_offsets": []int{start, len(data)}}
	}
	h, _ := json.Marshal(header)
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
	out = append(append(out, h...), data...)
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// toF16 converts a float32 below half's max to IEEE half (truncating).
func toF16(v float32) uint16 {
	b := math.Float32bits(v)
	sign := uint16(b>>16) & 0x8000
	if v == 0 {
		return sign
	}
	exp := int(b>>23&0xff) - 127 + 15
	if exp <= 0 {
		return sign // flush tiny values to zero
	}
	return sign | uint16(exp)<<10 | uint16(b>>13&0x3ff)
}

// hfTensors lists a Llama/Qwen2 checkpoint's tensors in HF layout.
func hfTensors(c Config, bias, tied bool) map[string][]int {
	hd := c.DModel / c.Heads
	ts := map[string][]int{"model.embed_tokens.weight": {c.VocabSize, c.DModel}, "model.norm.weight": {c.DModel}}
	if !tied {
		ts["lm_head.weight"] = []int{c.VocabSize, c.DModel}
	}
	for i := 0; i < c.Layers; i++ {
		p := "model.layers." + itoa(i) + "."
		ts[p+"input_layernorm.weight"] = []int{c.DModel}
		ts[p+"post_attention_layernorm.weight"] = []int{c.DModel}
		ts[p+"self_attn.q_proj.weight"] = []int{c.Heads * hd, c.DModel}
		ts[p+"self_attn.k_proj.weight"] = []int{c.KVHeads * hd, c.DModel}
		ts[p+"self_attn.v_proj.weight"] = []int{c.KVHeads * hd, c.DModel}
		ts[p+"self_attn.o_proj.weight"] = []int{c.DModel, c.Heads * hd}
		ts[p+"mlp.gate_proj.weight"] = []int{c.DFF, c.DModel}
		ts[p+"mlp.up_proj.weight"] = []int{c.DFF, c.DModel}
		ts[p+"mlp.down_proj.weight"] = []int{c.DModel, c.DFF}
		if bias {
			ts[p+"self_attn.q_proj.bias"] = []int{c.Heads * hd}
			ts[p+"self_attn.k_proj.bias"] = []int{c.KVHeads * hd}
			ts[p+"self_attn.v_proj.bias"] = []int{c.KVHeads * hd}
		}
	}
	return ts
}

// lcgWeight is a deterministic pseudo-random weight that Python reproduces
// bit for bit (see testdata/torch_reference.py).
func lcgWeight(name string, i int) float32 {
	var h uint32 = 2166136261
	for _, c := range []byte(name) {
		h = (h ^ uint32(c)) * 16777619
	}
	x := h ^ uint32(i)*2654435761
	x = x*1664525 + 1013904223
	x = x*1664525 + 1013904223
	v := (float32(x>>8)/float32(1<<24) - 0.5) * 0.5 // in [-0.25, 0.25)
	if strings.HasSuffix(name, "norm.weight") {
		v += 1
	}
	return v
}

func TestLoadHuggingFaceCheckpoints(t *testing.T) {
	base := Config{Layers: 2, DModel: 16, Heads: 4, KVHeads: 2, DFF: 24, Context: 64, VocabSize: 37}
	cases := []struct {
		name, modelType, dtype string
		bias, tied             bool
	}{
		{"llama-tied-bf16", "llama", "BF16", false, true},
		{"qwen2-untied-f16", "qwen2", "F16", true, false},
		{"llama-untied-f32", "llama", "F32", false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), tc.name)
			cfg := hfConfigMap(base, tc.modelType, tc.tied)
			cfg["architectures"], cfg["rope_theta"], cfg["hidden_act"], cfg["rope_scaling"] = []string{"X"}, 1000000.0, "silu", nil
			ts := hfTensors(base, tc.bias, tc.tied)
			writeHF(t, dir, cfg, ts, tc.dtype, lcgWeight)
			ck, err := Load(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			m := ck.Model
			if m.Cfg.AttnBias != tc.bias || m.Cfg.NormEps != 1e-5 || m.Cfg.RopeTheta != 1e6 {
				t.Fatalf("config read as %+v", m.Cfg)
			}
			// Spot-check the layout: HF q_proj[o][i] is our wq[i][o].
			q, _ := m.Param("model.layers.1.self_attn.q_proj.weight")
			tol := map[string]float64{"BF16": 1e-2, "F16": 1e-3, "F32": 0}[tc.dtype]
			for _, oi := range [][2]int{{0, 0}, {3, 7}, {15, 2}} {
				want := lcgWeight("model.layers.1.self_attn.q_proj.weight", oi[0]*base.DModel+oi[1])
				if got := q.W[oi[1]*q.Shape[1]+oi[0]]; math.Abs(float64(got-want)) > tol*math.Abs(float64(want))+1e-7 {
					t.Errorf("q_proj[%d][%d] = %v, want %v", oi[0], oi[1], got, want)
				}
			}
			lm, _ := m.Param("lm_head.weight")
			emb, _ := m.Param("model.embed_tokens.weight")
			// lm_head is [d, V] here; row v of HF's [V, d] is column v.
			srcName := "lm_head.weight"
			if tc.tied {
				srcName = "model.embed_tokens.weight"
			}
			if got, want := lm.W[5*base.VocabSize+9], lcgWeight(srcName, 9*base.DModel+5); math.Abs(float64(got-want)) > tol*math.Abs(float64(want))+1e-7 {
				t.Errorf("lm_head[9][5] = %v, want %v", got, want)
			}
			_ = emb
			// The loaded model runs, and a save/load cycle keeps it exactly.
			b := Batch{Tokens: [][]int{{1, 7, 3, 30, 2}}, PromptLen: []int{1}}
			r1, err := m.Logprobs(context.Background(), b)
			if err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(t.TempDir(), "resaved")
			if err := Save(out, Checkpoint{Model: m}); err != nil {
				t.Fatal(err)
			}
			ck2, err := Load(out, &m.Cfg)
			if err != nil {
				t.Fatal(err)
			}
			r2, _ := ck2.Model.Logprobs(context.Background(), b)
			if !slices.Equal(r1.Logprobs[0], r2.Logprobs[0]) {
				t.Errorf("resaved model differs: %v vs %v", r1.Logprobs[0], r2.Logprobs[0])
			}
		})
	}
	t.Run("sharded", func(t *testing.T) {
		// Two shards and an index, as transformers writes large models.
		dir := filepath.Join(t.TempDir(), "sharded")
		cfg := hfConfigMap(base, "llama", false)
		all := hfTensors(base, false, false)
		parts := [2]map[string][]int{{}, {}}
		weightMap := map[string]string{}
		for name, shape := range all {
			i := 0
			if strings.Contains(name, "layers.1") || strings.HasPrefix(name, "lm_head") {
				i = 1
			}
			parts[i][name] = shape
			weightMap[name] = fmt.Sprintf("model-%05d-of-00002.safetensors", i+1)
		}
		for i, p := range parts {
			sub := filepath.Join(t.TempDir(), "s")
			writeHF(t, sub, cfg, p, "F32", lcgWeight)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(filepath.Join(sub, "model.safetensors"), filepath.Join(dir, fmt.Sprintf("model-%05d-of-00002.safetensors", i+1))); err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				if err := os.Rename(filepath.Join(sub, "config.json"), filepath.Join(dir, "config.json")); err != nil {
					t.Fatal(err)
				}
			}
		}
		idx, _ := json.Marshal(map[string]any{"metadata": map[string]any{}, "weight_map": weightMap})
		if err := os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), idx, 0o644); err != nil {
			t.Fatal(err)
		}
		ck, err := Load(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		d, _ := ck.Model.Param("model.layers.1.mlp.down_proj.weight") // [F, D] here, [D, F] in HF
		if got, want := d.W[3*base.DModel+2], lcgWeight("model.layers.1.mlp.down_proj.weight", 2*base.DFF+3); got != want {
			t.Errorf("down_proj[2][3] = %v, want %v", got, want)
		}
	})
	t.Run("refusals", func(t *testing.T) {
		for _, bad := range []struct {
			name string
			edit func(map[string]any, map[string][]int)
		}{
			{"rope_scaling", func(c map[string]any, _ map[string][]int) { c["rope_scaling"] = map[string]any{"type": "llama3"} }},
			{"hidden_act", func(c map[string]any, _ map[string][]int) { c["hidden_act"] = "gelu" }},
			{"mlp_bias", func(c map[string]any, _ map[string][]int) { c["mlp_bias"] = true }},
			{"use_sliding_window", func(c map[string]any, _ map[string][]int) { c["use_sliding_window"] = true }},
			{"lm_head.weight missing", func(c map[string]any, ts map[string][]int) { c["tie_word_embeddings"] = false }},
			{"q_proj.weight has shape", func(_ map[string]any, ts map[string][]int) {
				ts["model.layers.0.self_attn.q_proj.weight"] = []int{16, 15}
			}},
		} {
			dir := filepath.Join(t.TempDir(), "bad")
			cfg := hfConfigMap(base, "llama", true)
			ts := hfTensors(base, false, true)
			bad.edit(cfg, ts)
			writeHF(t, dir, cfg, ts, "F32", lcgWeight)
			if _, err := Load(dir, nil); err == nil || !strings.Contains(err.Error(), bad.name) {
				t.Errorf("%s: Load error %v", bad.name, err)
			}
		}
	})
}

func TestF16(t *testing.T) {
	cases := []struct {
		h    uint16
		want float64
	}{
		{0x3c00, 1}, {0xc000, -2}, {0x0001, math.Pow(2, -24)}, {0x8001, -math.Pow(2, -24)},
		{0x7bff, 65504}, {0x7c00, math.Inf(1)}, {0x0000, 0}, {0x3555, 0.333251953125},
	}
	for _, tc := range cases {
		if got := float64(f16(tc.h)); got != tc.want {
			t.Errorf("f16(%#04x) = %v, want %v", tc.h, got, tc.want)
		}
	}
}

// hfConfigMap is the config.json transformers writes for a model of base's
// architecture.
func hfConfigMap(base Config, modelType string, tied bool) map[string]any {
	return map[string]any{"model_type": modelType, "hidden_size": base.DModel, "intermediate_size": base.DFF,
		"num_attention_heads": base.Heads, "num_hidden_layers": base.Layers, "num_key_value_heads": base.KVHeads,
		"vocab_size": base.VocabSize, "max_position_embeddings": base.Context, "rms_norm_eps": 1e-5,
		"tie_word_embeddings": tied}
}

// TestNonFiniteWeightsRefused: a model with a NaN weight is not saved over
// a good checkpoint, and a checkpoint file holding one is refused at load,
// the tensor named.
func TestNonFiniteWeightsRefused(t *testing.T) {
	cfg := tinyConfig()
	m := tinyModel(t, cfg, 8)
	dir := filepath.Join(t.TempDir(), "ckpt")
	if err := Save(dir, Checkpoint{Model: m}); err != nil {
		t.Fatal(err)
	}
	good := slices.Clone(m.Params[1].W)
	m.Params[1].W[3] = float32(math.NaN())
	if err := Save(dir, Checkpoint{Model: m}); err == nil || !strings.Contains(err.Error(), m.Params[1].Name) {
		t.Fatalf("save of NaN weights: %v, want an error naming %s", err, m.Params[1].Name)
	}
	ck, err := Load(dir, &cfg)
	if err != nil || !slices.Equal(ck.Model.Params[1].W, good) {
		t.Fatalf("the good checkpoint did not survive: %v", err)
	}
	// Poison the file itself.
	path := filepath.Join(dir, "model.safetensors")
	ts, _, err := readSafetensors(path)
	if err != nil {
		t.Fatal(err)
	}
	var named []namedTensor
	for name, st := range ts {
		if name == "model.norm.weight" {
			st.data[0] = float32(math.Inf(1))
		}
		named = append(named, namedTensor{name: name, shape: st.shape, data: st.data})
	}
	raw, err := encodeSafetensors(named, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir, &cfg); err == nil || !strings.Contains(err.Error(), "model.norm.weight holds +Inf") {
		t.Fatalf("load of Inf weights: %v", err)
	}
}
