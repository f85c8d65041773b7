package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/swetui/swetui/internal/durable"
)

// A checkpoint is a directory that Hugging Face transformers can also read
// as a Llama/Qwen2 model:
//
//	config.json            architecture (HF names)
//	model.safetensors      weights, HF names and [out, in] layout, float32
//	optimizer.safetensors  AdamW moments (flat, model layout) and step  (optional)
//	tokenizer.json         (optional)
//	extra/<name>           trainer state: RNG, curriculum, data position… (optional)
//
// It is written to a temporary sibling directory, every file fsynced, then
// renamed into place; an existing checkpoint of the same name is replaced
// only after the new one is complete.

// Checkpoint is what Save writes and Load returns.
type Checkpoint struct {
	Model     *Model
	Optim     *AdamW
	Tokenizer *Tokenizer
	// Extra holds opaque trainer files by name (no path separators).
	Extra map[string][]byte
}

// hfConfig is config.json as transformers writes it for Llama and Qwen2.
type hfConfig struct {
	Architectures     []string        `json:"architectures"`
	ModelType         string          `json:"model_type"`
	HiddenSize        int             `json:"hidden_size"`
	IntermediateSize  int             `json:"intermediate_size"`
	NumHeads          int             `json:"num_attention_heads"`
	NumLayers         int             `json:"num_hidden_layers"`
	NumKVHeads        int             `json:"num_key_value_heads,omitempty"`
	HeadDim           int             `json:"head_dim,omitempty"`
	VocabSize         int             `json:"vocab_size"`
	MaxPositions      int             `json:"max_position_embeddings"`
	RMSNormEps        float64         `json:"rms_norm_eps"`
	RopeTheta         float64         `json:"rope_theta,omitempty"`
	AttentionBias     *bool           `json:"attention_bias,omitempty"`
	TieWordEmbeddings bool            `json:"tie_word_embeddings"`
	HiddenAct         string          `json:"hidden_act,omitempty"`
	TorchDtype        string          `json:"torch_dtype,omitempty"`
	RopeScaling       json.RawMessage `json:"rope_scaling,omitempty"`
	MLPBias           bool            `json:"mlp_bias,omitempty"`
	UseSlidingWindow  bool            `json:"use_sliding_window,omitempty"`
}

func (c Config) hf() hfConfig {
	c = c.withDefaults()
	arch, typ := "LlamaForCausalLM", "llama"
	if c.AttnBias {
		arch, typ = "Qwen2ForCausalLM", "qwen2"
	}
	return hfConfig{Architectures: []string{arch}, ModelType: typ, HiddenSize: c.DModel, IntermediateSize: c.DFF,
		NumHeads: c.Heads, NumLayers: c.Layers, NumKVHeads: c.KVHeads, HeadDim: c.HeadDim, VocabSize: c.VocabSize,
		MaxPositions: c.Context, RMSNormEps: c.NormEps, RopeTheta: c.RopeTheta, AttentionBias: &c.AttnBias,
		HiddenAct: "silu", TorchDtype: "float32"}
}

func (h hfConfig) config() (Config, error) {
	if len(h.RopeScaling) > 0 && string(h.RopeScaling) != "null" {
		return Config{}, fmt.Errorf("config.json: rope_scaling %s is not supported", h.RopeScaling)
	}
	if h.MLPBias {
		return Config{}, fmt.Errorf("config.json: mlp_bias is not supported")
	}
	if h.UseSlidingWindow {
		return Config{}, fmt.Errorf("config.json: use_sliding_window is not supported")
	}
	if h.HiddenAct != "" && h.HiddenAct != "silu" {
		return Config{}, fmt.Errorf("config.json: hidden_act %q is not supported (want silu)", h.HiddenAct)
	}
	c := Config{Layers: h.NumLayers, DModel: h.HiddenSize, Heads: h.NumHeads, KVHeads: h.NumKVHeads,
		HeadDim: h.HeadDim, DFF: h.IntermediateSize, Context: h.MaxPositions, VocabSize: h.VocabSize,
		RopeTheta: h.RopeTheta, NormEps: h.RMSNormEps}
	switch {
	case h.AttentionBias != nil:
		c.AttnBias = *h.AttentionBias
	case h.ModelType == "qwen2":
		c.AttnBias = true // Qwen2 always has q/k/v biases
	}
	c = c.withDefaults()
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("config.json: %w", err)
	}
	return c, nil
}

// hfLayout says whether a parameter is stored transposed in HF files:
// linear weights are [out, in] there and [in, out] here; the embedding is
// [vocab, d] in both.
func transposed(p *Param) bool { return len(p.Shape) == 2 && p.Name != "model.embed_tokens.weight" }

func transpose(src []float32, rows, cols int) []float32 {
	dst := make([]float32, len(src))
	for r := 0; r < rows; r++ {
		for c := 0; c < cols; c++ {
			dst[c*rows+r] = src[r*cols+c]
		}
	}
	return dst
}

// Save writes ck to dir atomically. Model is required; the rest optional.
func Save(dir string, ck Checkpoint) error {
	if ck.Model == nil {
		return fmt.Errorf("save checkpoint %s: no model", dir)
	}
	m := ck.Model
	files := map[string][]byte{}
	cfg, err := json.MarshalIndent(m.Cfg.hf(), "", "  ")
	if err != nil {
		return fmt.Errorf("save checkpoint %s: config: %w", dir, err)
	}
	files["config.json"] = cfg
	var ts []namedTensor
	for i := range m.Params {
		p := &m.Params[i]
		if j := nonFinite(p.W); j >= 0 {
			// A diverged model must not replace a good checkpoint.
			return fmt.Errorf("save checkpoint %s: tensor %s holds %v at index %d: the weights are not finite", dir, p.Name, p.W[j], j)
		}
		t := namedTensor{name: p.Name, shape: p.Shape, data: p.W}
		if transposed(p) {
			t.shape = []int{p.Shape[1], p.Shape[0]}
			t.data = transpose(p.W, p.Shape[0], p.Shape[1])
		}
		ts = append(ts, t)
	}
	if files["model.safetensors"], err = encodeSafetensors(ts, map[string]string{"format": "pt"}); err != nil {
		return fmt.Errorf("save checkpoint %s: %w", dir, err)
	}
	if o := ck.Optim; o != nil {
		if len(o.m) != len(m.data) {
			return fmt.Errorf("save checkpoint %s: optimiser holds %d weights, model %d", dir, len(o.m), len(m.data))
		}
		meta := map[string]string{"step": strconv.Itoa(o.Step), "beta1": fmtF(o.Beta1), "beta2": fmtF(o.Beta2),
			"eps": fmtF(o.Eps), "weight_decay": fmtF(o.WeightDecay)}
		if files["optimizer.safetensors"], err = encodeSafetensors([]namedTensor{
			{"exp_avg", []int{len(o.m)}, o.m}, {"exp_avg_sq", []int{len(o.v)}, o.v}}, meta); err != nil {
			return fmt.Errorf("save checkpoint %s: %w", dir, err)
		}
	}
	if ck.Tokenizer != nil {
		if files["tokenizer.json"], err = ck.Tokenizer.MarshalJSON(); err != nil {
			return fmt.Errorf("save checkpoint %s: tokenizer: %w", dir, err)
		}
	}
	for name, data := range ck.Extra {
		if name == "" || strings.ContainsAny(name, `/\`) || name == "." || name == ".." {
			return fmt.Errorf("save checkpoint %s: extra file name %q is not a plain name", dir, name)
		}
		files[filepath.Join("extra", name)] = data
	}
	return writeDirAtomic(dir, files)
}

// nonFinite returns the index of the first NaN or infinite value, or -1.
func nonFinite(xs []float32) int {
	for i, x := range xs {
		if x != x || x > math.MaxFloat32 || x < -math.MaxFloat32 {
			return i
		}
	}
	return -1
}

func fmtF(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

func writeDirAtomic(dir string, files map[string][]byte) error {
	dir = filepath.Clean(dir)
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("save checkpoint %s: %w", dir, err)
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".tmp-*")
	if err != nil {
		return fmt.Errorf("save checkpoint %s: %w", dir, err)
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(tmp)
		}
	}()
	for name, data := range files {
		p := filepath.Join(tmp, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("save checkpoint %s: %w", dir, err)
		}
		if err := durable.WriteFile(p, data); err != nil {
			return fmt.Errorf("save checkpoint %s: %w", dir, err)
		}
	}
	if _, err := os.Stat(filepath.Join(tmp, "extra")); err == nil {
		if err := durable.SyncDir(filepath.Join(tmp, "extra")); err != nil {
			return err
		}
	}
	if err := durable.SyncDir(tmp); err != nil {
		return err
	}
	if err := durable.ReplaceDir(tmp, dir); err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	ok = true
	return nil
}

// readWeights reads model.safetensors, or the shards that
// model.safetensors.index.json lists.
func readWeights(dir string) (map[string]stTensor, error) {
	single := filepath.Join(dir, "model.safetensors")
	if _, err := os.Stat(single); err == nil {
		ts, _, err := readSafetensors(single)
		return ts, err
	}
	raw, err := os.ReadFile(filepath.Join(dir, "model.safetensors.index.json"))
	if err != nil {
		return nil, fmt.Errorf("neither model.safetensors nor a shard index: %w", err)
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(raw, &idx); err != nil {
		return nil, fmt.Errorf("model.safetensors.index.json: %w", err)
	}
	all := map[string]stTensor{}
	seen := map[string]bool{}
	for _, shard := range idx.WeightMap {
		if seen[shard] {
			continue
		}
		seen[shard] = true
		if shard != filepath.Base(shard) {
			return nil, fmt.Errorf("model.safetensors.index.json: shard %q is not a plain file name", shard)
		}
		ts, _, err := readSafetensors(filepath.Join(dir, shard))
		if err != nil {
			return nil, err
		}
		for k, v := range ts {
			all[k] = v
		}
	}
	return all, nil
}

// Load reads a checkpoint directory: ours, or a Hugging Face Llama/Qwen2
// model (config.json + model.safetensors or its shards, tied or untied
// embeddings; a tied LM head is copied, and then trains untied). When want is non-nil, an
// architecture that differs is refused with the first differing field.
func Load(dir string, want *Config) (*Checkpoint, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("load checkpoint: %w", err)
	}
	var h hfConfig
	if err := json.Unmarshal(raw, &h); err != nil {
		return nil, fmt.Errorf("load checkpoint %s: config.json: %w", dir, err)
	}
	cfg, err := h.config()
	if err != nil {
		return nil, fmt.Errorf("load checkpoint %s: %w", dir, err)
	}
	if want != nil {
		if err := want.match(cfg); err != nil {
			return nil, fmt.Errorf("load checkpoint %s: %w", dir, err)
		}
	}
	m, err := newEmpty(cfg)
	if err != nil {
		return nil, fmt.Errorf("load checkpoint %s: %w", dir, err)
	}
	ts, err := readWeights(dir)
	if err != nil {
		return nil, fmt.Errorf("load checkpoint %s: %w", dir, err)
	}
	for i := range m.Params {
		p := &m.Params[i]
		t, ok := ts[p.Name]
		if !ok && p.Name == "lm_head.weight" {
			t, ok = ts["model.embed_tokens.weight"] // tied embeddings
			if ok && !h.TieWordEmbeddings {
				return nil, fmt.Errorf("load checkpoint %s: lm_head.weight missing and tie_word_embeddings is false", dir)
			}
		}
		if !ok {
			return nil, fmt.Errorf("load checkpoint %s: tensor %s missing", dir, p.Name)
		}
		wantShape := p.Shape
		if transposed(p) {
			wantShape = []int{p.Shape[1], p.Shape[0]}
		}
		if !slices.Equal(t.shape, wantShape) {
			return nil, fmt.Errorf("load checkpoint %s: tensor %s has shape %v, want %v", dir, p.Name, t.shape, wantShape)
		}
		if j := nonFinite(t.data); j >= 0 {
			return nil, fmt.Errorf("load checkpoint %s: tensor %s holds %v at index %d: the weights are not finite (a diverged run?); resume from an earlier checkpoint",
				dir, p.Name, t.data[j], j)
		}
		if transposed(p) {
			copy(p.W, transpose(t.data, wantShape[0], wantShape[1]))
		} else {
			copy(p.W, t.data)
		}
	}
	ck := &Checkpoint{Model: m, Extra: map[string][]byte{}}
	if ots, meta, err := readSafetensors(filepath.Join(dir, "optimizer.safetensors")); err == nil {
		o := &AdamW{}
		o.Step, err = strconv.Atoi(meta["step"])
		if err != nil {
			return nil, fmt.Errorf("load checkpoint %s: optimizer step %q: %w", dir, meta["step"], err)
		}
		for _, f := range []struct {
			key string
			dst *float64
		}{{"beta1", &o.Beta1}, {"beta2", &o.Beta2}, {"eps", &o.Eps}, {"weight_decay", &o.WeightDecay}} {
			if *f.dst, err = strconv.ParseFloat(meta[f.key], 64); err != nil {
				return nil, fmt.Errorf("load checkpoint %s: optimizer %s %q: %w", dir, f.key, meta[f.key], err)
			}
		}
		o.m, o.v = ots["exp_avg"].data, ots["exp_avg_sq"].data
		if nonFinite(o.m) >= 0 || nonFinite(o.v) >= 0 {
			return nil, fmt.Errorf("load checkpoint %s: optimizer.safetensors: the AdamW moments are not finite", dir)
		}
		if len(o.m) != len(m.data) || len(o.v) != len(m.data) {
			return nil, fmt.Errorf("load checkpoint %s: optimizer state has %d/%d values for %d weights", dir, len(o.m), len(o.v), len(m.data))
		}
		ck.Optim = o
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("load checkpoint %s: %w", dir, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err == nil {
		if ck.Tokenizer, err = LoadTokenizer(filepath.Join(dir, "tokenizer.json")); err != nil {
			return nil, fmt.Errorf("load checkpoint %s: %w", dir, err)
		}
	}
	entries, err := os.ReadDir(filepath.Join(dir, "extra"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("load checkpoint %s: %w", dir, err)
	}
	for _, e := range entries {
		if e.Type().IsRegular() {
			if ck.Extra[e.Name()], err = os.ReadFile(filepath.Join(dir, "extra", e.Name())); err != nil {
				return nil, fmt.Errorf("load checkpoint %s: %w", dir, err)
			}
		}
	}
	return ck, nil
}
