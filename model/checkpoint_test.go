package model

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
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

func TestBF16Rounding(t *testing.T) {
	cases := []struct {
		name string
		in   uint32
		want uint16
	}{
		{"one", 0x3f800000, 0x3f80},
		{"minus one and a half", 0xbfc00000, 0xbfc0},
		{"below half rounds down", 0x3f807fff, 0x3f80},
		{"above half rounds up", 0x3f808001, 0x3f81},
		{"tie to even, down", 0x3f808000, 0x3f80},
		{"tie to even, up", 0x3f818000, 0x3f82},
		{"carry into the exponent", 0x3fffffff, 0x4000},
		{"zero", 0, 0},
		{"minus zero", 0x80000000, 0x8000},
		{"smallest subnormal", 0x00000001, 0x0000},
		{"largest float32 overflows", 0x7f7fffff, 0x7f80},
		{"infinity", 0x7f800000, 0x7f80},
		{"quiet NaN", 0x7fc00000, 0x7fc0},
		{"NaN with low payload only", 0x7f800001, 0x7fc0},
		{"negative NaN", 0xffa00000, 0xffe0},
	}
	for _, tc := range cases {
		if got := bf16(math.Float32frombits(tc.in)); got != tc.want {
			t.Errorf("%s: bf16(%#08x) = %#04x, want %#04x", tc.name, tc.in, got, tc.want)
		}
	}
}

// checkSafetensorsFile checks path as a strict safetensors reader (the
// Rust crate) would: an 8-byte little-endian header length, a JSON object
// padded to a multiple of 8, every tensor's offsets fitting its dtype and
// shape, and the data back to back from 0 to the end of the file. It
// returns the header's tensors.
func checkSafetensorsFile(t *testing.T, path string) map[string]stEntry {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) < 8 {
		t.Fatalf("%s: %d bytes", path, len(raw))
	}
	n := binary.LittleEndian.Uint64(raw)
	if n%8 != 0 || 8+n > uint64(len(raw)) {
		t.Fatalf("%s: header length %d (file %d bytes)", path, n, len(raw))
	}
	hb := raw[8 : 8+n]
	if hb[0] != '{' {
		t.Fatalf("%s: header does not start with {", path)
	}
	var header map[string]json.RawMessage
	if err := json.Unmarshal(hb, &header); err != nil {
		t.Fatalf("%s: header: %v", path, err)
	}
	delete(header, "__metadata__")
	entries := map[string]stEntry{}
	var spans [][2]int
	for name, r := range header {
		var e stEntry
		dec := json.NewDecoder(strings.NewReader(string(r)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil {
			t.Fatalf("%s: tensor %s: %v", path, name, err)
		}
		size := map[string]int{"F32": 4, "BF16": 2}[e.Dtype]
		if size == 0 || e.Offsets[1]-e.Offsets[0] != prod(e.Shape)*size {
			t.Fatalf("%s: tensor %s: %s %v at %v", path, name, e.Dtype, e.Shape, e.Offsets)
		}
		entries[name] = e
		spans = append(spans, e.Offsets)
	}
	slices.SortFunc(spans, func(a, b [2]int) int { return a[0] - b[0] })
	end := 0
	for _, s := range spans {
		if s[0] != end {
			t.Fatalf("%s: data not contiguous: a tensor starts at %d, the previous ends at %d", path, s[0], end)
		}
		end = s[1]
	}
	if uint64(end) != uint64(len(raw))-8-n {
		t.Fatalf("%s: tensors end at %d, the data is %d bytes", path, end, uint64(len(raw))-8-n)
	}
	return entries
}

// hfValues is p's weights in HF layout ([out, in] for linear weights).
func hfValues(p *Param) []float32 {
	if transposed(p) {
		return transpose(p.W, p.Shape[0], p.Shape[1])
	}
	return p.W
}

func roundBF16(xs []float32) []float32 {
	out := make([]float32, len(xs))
	for i, x := range xs {
		out[i] = math.Float32frombits(uint32(bf16(x)) << 16)
	}
	return out
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// trainedTiny is a tiny model one AdamW step in, so its weights are not
// bf16 values, with its optimiser.
func trainedTiny(t *testing.T, cfg Config) (*Model, *AdamW) {
	t.Helper()
	m := tinyModel(t, cfg, 5)
	o := NewAdamW(config.Optim{Beta1: 0.9, Beta2: 0.95, Eps: 1e-7, WeightDecay: 0.1}, m.NumParams())
	for i := range m.Grads() {
		m.Grads()[i] = float32(i%7) - 3
	}
	if err := o.Update(m, 1e-3); err != nil {
		t.Fatal(err)
	}
	return m, o
}

// A bf16 checkpoint holds the masters rounded to nearest even as
// transformers expects them, the fp32 masters in state/ that Load prefers,
// and the files the run started from.
func TestCheckpointBF16(t *testing.T) {
	cfg := tinyConfig()
	cfg.AttnBias = true
	m, o := trainedTiny(t, cfg)
	files := map[string][]byte{"tokenizer_config.json": []byte(`{"chat_template":"{{ x }}"}`),
		"generation_config.json": []byte(`{"eos_token_id":[3,4]}`)}
	dir := filepath.Join(t.TempDir(), "ckpt")
	if err := Save(dir, Checkpoint{Model: m, Optim: o, Format: Format{Dtype: BF16, Files: files}}); err != nil {
		t.Fatal(err)
	}
	var hc map[string]any
	readJSON(t, filepath.Join(dir, "config.json"), &hc)
	if hc["torch_dtype"] != "bfloat16" || hc["model_type"] != "qwen2" {
		t.Errorf("config.json says torch_dtype %v, model_type %v", hc["torch_dtype"], hc["model_type"])
	}
	entries := checkSafetensorsFile(t, filepath.Join(dir, "model.safetensors"))
	if len(entries) != len(m.Params) {
		t.Errorf("model.safetensors holds %d tensors, the model %d", len(entries), len(m.Params))
	}
	ts, _, err := readSafetensors(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range m.Params {
		p := &m.Params[i]
		if entries[p.Name].Dtype != "BF16" {
			t.Errorf("%s is %s, want BF16", p.Name, entries[p.Name].Dtype)
		}
		if !slices.Equal(ts[p.Name].data, roundBF16(hfValues(p))) {
			t.Errorf("%s: the bf16 weights are not the masters rounded to nearest even", p.Name)
		}
	}
	for _, name := range []string{"state/master.safetensors", "state/optimizer.safetensors"} {
		for _, e := range checkSafetensorsFile(t, filepath.Join(dir, name)) {
			if e.Dtype != "F32" {
				t.Errorf("%s holds %s, want F32", name, e.Dtype)
			}
		}
	}
	top, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if len(top) != 1 {
		t.Errorf("top-level safetensors %v: vLLM would load every one as weights", top)
	}
	for name, want := range files {
		if got, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(got) != string(want) {
			t.Errorf("%s = %q (%v), want %q", name, got, err, want)
		}
	}

	ck, err := Load(dir, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ck.Model.Weights(), m.Weights()) {
		t.Error("the fp32 masters did not come back bit for bit")
	}
	om, ov := o.State()
	lm, lv := ck.Optim.State()
	if !slices.Equal(om, lm) || !slices.Equal(ov, lv) || ck.Optim.Step != o.Step {
		t.Error("optimiser state differs after load")
	}
	if ck.Dtype != BF16 || len(ck.Files) != len(files) || string(ck.Files["generation_config.json"]) != string(files["generation_config.json"]) {
		t.Errorf("Load's format: %s, files %v", ck.Dtype, slices.Collect(maps.Keys(ck.Files)))
	}

	// Without state/ it reads as transformers does: the bf16 values.
	if err := os.RemoveAll(filepath.Join(dir, "state")); err != nil {
		t.Fatal(err)
	}
	ck, err = Load(dir, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range m.Params {
		if !slices.Equal(ck.Model.Params[i].W, roundBF16(m.Params[i].W)) {
			t.Errorf("%s without masters: not the bf16 rounding", m.Params[i].Name)
		}
	}
	if ck.Optim != nil {
		t.Error("an optimiser came back from a checkpoint without state/")
	}

	// Weights that are bf16 values already (a model as read from a bf16
	// folder) lose nothing: no masters are written, and they load exactly.
	exact := ck.Model
	dir2 := filepath.Join(t.TempDir(), "exact")
	if err := Save(dir2, Checkpoint{Model: exact, Format: Format{Dtype: BF16}}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir2, "state", "master.safetensors")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("masters written for bf16-exact weights: %v", err)
	}
	ck2, err := Load(dir2, &cfg)
	if err != nil || !slices.Equal(ck2.Model.Weights(), exact.Weights()) {
		t.Errorf("bf16-exact weights did not load exactly: %v", err)
	}
}

// Past MaxShard bytes the weights are split as transformers splits them,
// with an index that Load (and transformers, and vLLM) follow.
func TestCheckpointShards(t *testing.T) {
	cfg := tinyConfig()
	m, o := trainedTiny(t, cfg)
	cases := []struct {
		name     string
		dtype    Dtype
		maxShard int64
		shards   int // 0: one model.safetensors, no index
	}{
		{"bf16 in 1 KB shards", BF16, 1000, -1},
		{"f32 in 4 KB shards", F32, 4096, -1},
		{"bf16 that fits", BF16, 1 << 20, 0},
		{"default shard size", F32, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "ckpt")
			if err := Save(dir, Checkpoint{Model: m, Optim: o, Format: Format{Dtype: tc.dtype, MaxShard: tc.maxShard}}); err != nil {
				t.Fatal(err)
			}
			_, single := os.Stat(filepath.Join(dir, "model.safetensors"))
			_, index := os.Stat(filepath.Join(dir, "model.safetensors.index.json"))
			if tc.shards == 0 {
				if single != nil || index == nil {
					t.Fatalf("want one model.safetensors and no index: %v, %v", single, index)
				}
			} else {
				if single == nil || index != nil {
					t.Fatalf("want shards and an index, no model.safetensors: %v, %v", single, index)
				}
				var idx struct {
					Metadata  map[string]json.Number `json:"metadata"`
					WeightMap map[string]string      `json:"weight_map"`
				}
				readJSON(t, filepath.Join(dir, "model.safetensors.index.json"), &idx)
				files, _ := filepath.Glob(filepath.Join(dir, "model-*.safetensors"))
				if len(files) < 2 {
					t.Fatalf("%d shards", len(files))
				}
				total, seen := 0, 0
				for k, f := range files {
					want := fmt.Sprintf("model-%05d-of-%05d.safetensors", k+1, len(files))
					if filepath.Base(f) != want {
						t.Errorf("shard %d is %s, want %s", k, filepath.Base(f), want)
					}
					size := 0
					for name, e := range checkSafetensorsFile(t, f) {
						if idx.WeightMap[name] != want {
							t.Errorf("index maps %s to %s; it is in %s", name, idx.WeightMap[name], want)
						}
						if e.Dtype != string(tc.dtype) {
							t.Errorf("%s is %s", name, e.Dtype)
						}
						size += e.Offsets[1] - e.Offsets[0]
						seen++
					}
					if size > int(tc.maxShard) && len(checkSafetensorsFile(t, f)) > 1 {
						t.Errorf("%s holds %d bytes of several tensors, past the %d limit", want, size, tc.maxShard)
					}
					total += size
				}
				if seen != len(m.Params) || len(idx.WeightMap) != len(m.Params) {
					t.Errorf("shards hold %d tensors, the index %d, the model %d", seen, len(idx.WeightMap), len(m.Params))
				}
				if got := idx.Metadata["total_size"].String(); got != strconv.Itoa(total) {
					t.Errorf("metadata.total_size = %s, the shards hold %d", got, total)
				}
			}
			ck, err := Load(dir, &cfg)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(ck.Model.Weights(), m.Weights()) {
				t.Error("weights differ after load")
			}
			if tc.dtype == BF16 {
				// The shards themselves, as transformers reads them.
				if err := os.RemoveAll(filepath.Join(dir, "state")); err != nil {
					t.Fatal(err)
				}
				if ck, err = Load(dir, &cfg); err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(ck.Model.Weights(), roundBF16(m.Weights())) {
					t.Error("the shards do not hold the bf16 rounding of the weights")
				}
			}
		})
	}
}

// failingFile fails its writes once it has taken budget bytes, as a full
// disk would.
type failingFile struct {
	*os.File
	budget int
}

func (f *failingFile) Write(b []byte) (int, error) {
	if len(b) > f.budget {
		n, _ := f.File.Write(b[:f.budget])
		f.budget = 0
		return n, syscall.ENOSPC
	}
	f.budget -= len(b)
	return f.File.Write(b)
}

// A save that fails part-way, in any file, leaves the previous checkpoint
// as it was and no temporary folder behind.
func TestCheckpointFailedSaveKeepsTheOld(t *testing.T) {
	cfg := tinyConfig()
	old := tinyModel(t, cfg, 1)
	m, o := trainedTiny(t, cfg)
	cases := []struct {
		name, file string
		budget     int // bytes written before the failure; -1: cannot create
	}{
		{"second shard cannot be created", "model-00002-of-", -1},
		{"disk full mid-shard", "model-00003-of-", 100},
		{"disk full in the masters", "master.safetensors", 5000},
		{"disk full in the optimiser", "optimizer.safetensors", 64},
		{"copied file", "tokenizer_config.json", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "ckpt")
			format := Format{Dtype: BF16, MaxShard: 1000, Files: map[string][]byte{"tokenizer_config.json": []byte("{}")}}
			if err := Save(dir, Checkpoint{Model: old, Format: format}); err != nil {
				t.Fatal(err)
			}
			hit := false
			createFile = func(path string) (checkpointFile, error) {
				if !strings.HasPrefix(filepath.Base(path), tc.file) {
					return os.Create(path)
				}
				hit = true
				if tc.budget < 0 {
					return nil, os.ErrPermission
				}
				f, err := os.Create(path)
				return &failingFile{f, tc.budget}, err
			}
			defer func() { createFile = func(path string) (checkpointFile, error) { return os.Create(path) } }()
			err := Save(dir, Checkpoint{Model: m, Optim: o, Format: format})
			if !hit || err == nil || !strings.Contains(err.Error(), tc.file) {
				t.Fatalf("save failing in %s: %v (reached: %v)", tc.file, err, hit)
			}
			ck, err := Load(dir, &cfg)
			if err != nil || !slices.Equal(ck.Model.Weights(), old.Weights()) || ck.Optim != nil {
				t.Fatalf("the old checkpoint did not survive: %v", err)
			}
			if left, _ := filepath.Glob(filepath.Join(filepath.Dir(dir), ".ckpt*")); len(left) > 0 {
				t.Errorf("temporary folders left behind: %v", left)
			}
		})
	}
}

func TestCheckpointRefusals(t *testing.T) {
	cfg := tinyConfig()
	cases := []struct {
		name string
		edit func(*Checkpoint)
		want string
	}{
		{"NaN in bf16", func(c *Checkpoint) { c.Model.Params[2].W[1] = float32(math.NaN()); c.Dtype = BF16 }, "not finite"},
		{"past bf16's range", func(c *Checkpoint) { c.Model.Params[2].W[1] = 3.4e38; c.Dtype = BF16 }, "past bfloat16's range"},
		{"unknown dtype", func(c *Checkpoint) { c.Dtype = "F16" }, `dtype "F16"`},
		{"file with a path", func(c *Checkpoint) { c.Files = map[string][]byte{"../x": nil} }, "not a plain name"},
		{"file named as a weight file", func(c *Checkpoint) { c.Files = map[string][]byte{"extra.safetensors": nil} }, "clash"},
		{"file named config.json", func(c *Checkpoint) { c.Files = map[string][]byte{"config.json": nil} }, "clash"},
		{"file named state", func(c *Checkpoint) { c.Files = map[string][]byte{"state": nil} }, "clash"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "ckpt")
			good := tinyModel(t, cfg, 2)
			if err := Save(dir, Checkpoint{Model: good}); err != nil {
				t.Fatal(err)
			}
			ck := Checkpoint{Model: good.Clone()}
			tc.edit(&ck)
			if err := Save(dir, ck); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Save: %v, want an error saying %q", err, tc.want)
			}
			if got, err := Load(dir, &cfg); err != nil || !slices.Equal(got.Model.Weights(), good.Weights()) {
				t.Fatalf("the good checkpoint did not survive: %v", err)
			}
		})
	}
}

// Checkpoints written before state/ existed keep optimizer.safetensors at
// the top.
func TestCheckpointOldOptimizerPlace(t *testing.T) {
	cfg := tinyConfig()
	m, o := trainedTiny(t, cfg)
	dir := filepath.Join(t.TempDir(), "ckpt")
	if err := Save(dir, Checkpoint{Model: m, Optim: o}); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "state", "optimizer.safetensors"), filepath.Join(dir, "optimizer.safetensors")); err != nil {
		t.Fatal(err)
	}
	ck, err := Load(dir, &cfg)
	if err != nil || ck.Optim == nil || ck.Optim.Step != o.Step {
		t.Fatalf("optimiser at the old place not read: %v", err)
	}
}

func TestFormatOf(t *testing.T) {
	root := t.TempDir()
	hf := func(name string, cfg map[string]any, files ...string) string {
		dir := filepath.Join(root, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		raw, _ := json.Marshal(cfg)
		if err := os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if err := os.WriteFile(filepath.Join(dir, f), []byte(f+" data"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	qwen := hf("qwen", map[string]any{"torch_dtype": "bfloat16"}, "tokenizer_config.json", "generation_config.json", "special_tokens_map.json", "vocab.json")
	newer := hf("newer", map[string]any{"dtype": "bfloat16"}, "generation_config.json")
	half := hf("half", map[string]any{"torch_dtype": "float16"})
	run := filepath.Join(root, "run-step")
	if err := os.MkdirAll(run, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(hf("p", map[string]any{"torch_dtype": "bfloat16"}, "tokenizer_config.json"), filepath.Join(run, "policy")); err != nil {
		t.Fatal(err)
	}
	all := []string{"generation_config.json", "special_tokens_map.json", "tokenizer_config.json"}
	cases := []struct {
		name, init, setting string
		dtype               Dtype
		files               []string
		err                 string
	}{
		{"fresh model, auto", "", "auto", F32, nil, ""},
		{"fresh model, bf16", "", "bf16", BF16, nil, ""},
		{"bf16 HF folder, auto", qwen, "auto", BF16, all, ""},
		{"bf16 HF folder, f32", qwen, "f32", F32, all, ""},
		{"transformers 4.56's dtype key", newer, "auto", BF16, []string{"generation_config.json"}, ""},
		{"f16 HF folder, auto", half, "auto", F32, nil, ""},
		{"run checkpoint", run, "auto", BF16, []string{"tokenizer_config.json"}, ""},
		{"unknown setting", qwen, "fp16", "", nil, "run.save_dtype"},
		{"missing folder", filepath.Join(root, "none"), "auto", "", nil, "config.json"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, err := FormatOf(tc.init, tc.setting)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one naming %s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			names := slices.Sorted(maps.Keys(f.Files))
			if f.Dtype != tc.dtype || !slices.Equal(names, tc.files) {
				t.Errorf("got %s with %v, want %s with %v", f.Dtype, names, tc.dtype, tc.files)
			}
			for name, data := range f.Files {
				if string(data) != name+" data" {
					t.Errorf("%s holds %q", name, data)
				}
			}
		})
	}
}

// A checkpoint runs at the context it is given, past the positions its
// config.json declares and below them: logprobs of a short sequence do not
// change, a sequence past the old context runs, and saving keeps the larger
// of the two so that a run at a short context leaves the model's own.
func TestSetContextRunsALoadedModelAtTheRunsContext(t *testing.T) {
	cfg := tinyConfig()
	cfg.Context = 32
	m := tinyModel(t, cfg, 3)
	dir := filepath.Join(t.TempDir(), "c")
	if err := Save(dir, Checkpoint{Model: m}); err != nil {
		t.Fatal(err)
	}
	short := Batch{Tokens: [][]int{{1, 2, 3, 4, 5, 6, 7, 8}}, PromptLen: []int{2}, Temperature: 1}
	before, err := m.Logprobs(context.Background(), short)
	if err != nil {
		t.Fatal(err)
	}
	long := Batch{Tokens: [][]int{make([]int, 100)}, PromptLen: []int{50}, Temperature: 1}
	for i := range long.Tokens[0] {
		long.Tokens[0][i] = 1 + i%(cfg.VocabSize-1)
	}
	for _, tc := range []struct {
		context, saved int
	}{{128, 128}, {16, 32}} {
		ck, err := Load(dir, &cfg) // the context is not part of the architecture
		if err != nil {
			t.Fatal(err)
		}
		l := ck.Model
		if err := l.SetContext(tc.context); err != nil {
			t.Fatal(err)
		}
		if l.Cfg.Context != tc.context || l.Cfg.MaxPositions != 32 {
			t.Errorf("context %d: Cfg.Context %d, MaxPositions %d", tc.context, l.Cfg.Context, l.Cfg.MaxPositions)
		}
		after, err := l.Logprobs(context.Background(), short)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range after.Logprobs[0] {
			if math.Abs(float64(v-before.Logprobs[0][i])) > 1e-5 {
				t.Errorf("context %d: logprob %d %v, was %v at context 32", tc.context, i, v, before.Logprobs[0][i])
			}
		}
		_, err = l.Logprobs(context.Background(), long)
		if tc.context >= 100 && err != nil {
			t.Errorf("context %d: 100 tokens: %v", tc.context, err)
		}
		if tc.context < 100 && (err == nil || !strings.Contains(err.Error(), "exceed context 16")) {
			t.Errorf("context %d: 100 tokens: %v, want the context named", tc.context, err)
		}
		out := filepath.Join(t.TempDir(), "saved")
		if err := Save(out, Checkpoint{Model: l}); err != nil {
			t.Fatal(err)
		}
		raw, _ := os.ReadFile(filepath.Join(out, "config.json"))
		var hf struct {
			MaxPositions int `json:"max_position_embeddings"`
		}
		if err := json.Unmarshal(raw, &hf); err != nil || hf.MaxPositions != tc.saved {
			t.Errorf("context %d: saved max_position_embeddings %d (%v), want %d", tc.context, hf.MaxPositions, err, tc.saved)
		}
	}
	if err := m.SetContext(1); err == nil {
		t.Error("SetContext(1) accepted")
	}
}

// A checkpoint saved from a Hugging Face folder keeps the config.json keys
// it does not write itself (the special tokens' ids that transformers and
// vLLM read), its max_position_embeddings, and a "dtype" that agrees with
// the weights it saved.
func TestSaveKeepsTheBaseConfigsKeys(t *testing.T) {
	base := Config{Layers: 2, DModel: 16, Heads: 4, KVHeads: 2, DFF: 24, Context: 32768, VocabSize: 37}
	dir := filepath.Join(t.TempDir(), "hf")
	cfg := hfConfigMap(base, "qwen2", true)
	cfg["architectures"], cfg["hidden_act"], cfg["rope_scaling"] = []string{"Qwen2ForCausalLM"}, "silu", nil
	cfg["bos_token_id"], cfg["eos_token_id"], cfg["sliding_window"], cfg["transformers_version"] = 35, 36, 32768, "4.56.0"
	cfg["dtype"], cfg["use_sliding_window"] = "bfloat16", false
	writeHF(t, dir, cfg, hfTensors(base, true, true), "BF16", lcgWeight)
	f, err := FormatOf(dir, "f32")
	if err != nil {
		t.Fatal(err)
	}
	ck, err := Load(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ck.Model.SetContext(1024); err != nil {
		t.Fatal(err)
	}
	for name, format := range map[string]Format{"run checkpoint": f, "loaded and saved again": ck.Format} {
		out := filepath.Join(t.TempDir(), "saved")
		if err := Save(out, Checkpoint{Model: ck.Model, Format: format}); err != nil {
			t.Fatal(err)
		}
		raw, _ := os.ReadFile(filepath.Join(out, "config.json"))
		var got map[string]any
		if err := json.Unmarshal(raw, &got); err != nil {
			t.Fatal(err)
		}
		dtype := map[Dtype]string{F32: "float32", BF16: "bfloat16"}[format.Dtype]
		want := map[string]any{"bos_token_id": 35.0, "eos_token_id": 36.0, "sliding_window": 32768.0,
			"transformers_version": "4.56.0", "max_position_embeddings": 32768.0, "tie_word_embeddings": false,
			"torch_dtype": dtype, "dtype": dtype, "model_type": "qwen2", "use_sliding_window": false}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: config.json %s = %v, want %v", name, k, got[k], v)
			}
		}
		again, err := Load(out, nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if again.Model.Cfg.AttnBias != true || again.Model.Cfg.Context != 32768 {
			t.Errorf("%s: read back as %+v", name, again.Model.Cfg)
		}
	}
	if _, err := configJSON(hfConfig{}, []byte("{not json")); err == nil || !strings.Contains(err.Error(), "base config.json") {
		t.Errorf("a base config.json that is not JSON: %v", err)
	}
}
