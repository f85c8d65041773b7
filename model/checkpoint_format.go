package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
)

// Format is how Save lays out the weights.
type Format struct {
	// Dtype of the weights: F32 (also the zero value) or BF16.
	Dtype Dtype
	// MaxShard is the most bytes of tensor data in one weight file before
	// the weights are sharded; 0 = DefaultMaxShard.
	MaxShard int64
	// Files are further top-level files, by plain name, written as they are
	// (the HFFiles of the model the run started from).
	Files map[string][]byte
	// BaseConfig is the config.json of the model the run started from.
	// Save keeps its keys that it does not write itself (bos_token_id,
	// eos_token_id, sliding_window, transformers_version…).
	BaseConfig []byte
}

// DefaultMaxShard is transformers' save_pretrained default, "5GB".
const DefaultMaxShard = 5_000_000_000

// HFFiles are the files of a Hugging Face model folder that FormatOf
// carries into the run's checkpoints: the chat template, the special and
// end-of-turn tokens that vLLM and transformers read beside tokenizer.json.
var HFFiles = []string{"tokenizer_config.json", "generation_config.json", "special_tokens_map.json"}

// FormatOf is the Format to save a run in whose weights came from initDir
// (model.init_ckpt; "" = freshly initialised): saveDtype (run.save_dtype)
// "bf16" or "f32", or "auto": bf16 when initDir's config.json says
// bfloat16, else f32 (a float16 model is saved as f32, losing nothing).
// The HFFiles initDir holds are carried over. A run checkpoint's policy/
// subfolder stands for the run checkpoint, as in loading.
func FormatOf(initDir, saveDtype string) (Format, error) {
	f := Format{Dtype: F32}
	switch saveDtype {
	case "auto", "":
	case "f32":
	case "bf16":
		f.Dtype = BF16
	default:
		return Format{}, fmt.Errorf("run.save_dtype = %q: must be one of auto, bf16, f32", saveDtype)
	}
	if initDir == "" {
		return f, nil
	}
	if _, err := os.Stat(filepath.Join(initDir, "policy", "config.json")); err == nil {
		initDir = filepath.Join(initDir, "policy")
	}
	raw, err := os.ReadFile(filepath.Join(initDir, "config.json"))
	if err != nil {
		return Format{}, fmt.Errorf("save format: %w", err)
	}
	var h hfConfig
	if err := json.Unmarshal(raw, &h); err != nil {
		return Format{}, fmt.Errorf("save format: %s: %w", filepath.Join(initDir, "config.json"), err)
	}
	if (saveDtype == "auto" || saveDtype == "") && h.dtype() == "bfloat16" {
		f.Dtype = BF16
	}
	if f.Files, err = readHFFiles(initDir); err != nil {
		return Format{}, fmt.Errorf("save format: %w", err)
	}
	f.BaseConfig = raw
	return f, nil
}

// configJSON is h as config.json, over base's keys (nil: none): the keys
// h writes take its values, and "dtype" (transformers 4.56's name) follows
// torch_dtype.
func configJSON(h hfConfig, base []byte) ([]byte, error) {
	if len(base) == 0 {
		return json.MarshalIndent(h, "", "  ")
	}
	var out, own map[string]json.RawMessage
	if err := json.Unmarshal(base, &out); err != nil {
		return nil, fmt.Errorf("base config.json: %w", err)
	}
	raw, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(raw, &own); err != nil {
		return nil, err
	}
	maps.Copy(out, own)
	if _, ok := out["dtype"]; ok {
		out["dtype"] = own["torch_dtype"]
	}
	return json.MarshalIndent(out, "", "  ")
}

// readHFFiles reads the HFFiles dir holds; nil when none.
func readHFFiles(dir string) (map[string][]byte, error) {
	var files map[string][]byte
	for _, name := range HFFiles {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if files == nil {
			files = map[string][]byte{}
		}
		files[name] = data
	}
	return files, nil
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
	Dtype             string          `json:"dtype,omitempty"` // torch_dtype's name from transformers 4.56
	RopeScaling       json.RawMessage `json:"rope_scaling,omitempty"`
	MLPBias           bool            `json:"mlp_bias,omitempty"`
	UseSlidingWindow  bool            `json:"use_sliding_window,omitempty"`
}

// dtype is the weights' torch dtype, under either name.
func (h hfConfig) dtype() string {
	if h.TorchDtype != "" {
		return h.TorchDtype
	}
	return h.Dtype
}

func (c Config) hf() hfConfig {
	c = c.withDefaults()
	arch, typ := "LlamaForCausalLM", "llama"
	if c.AttnBias {
		arch, typ = "Qwen2ForCausalLM", "qwen2"
	}
	return hfConfig{Architectures: []string{arch}, ModelType: typ, HiddenSize: c.DModel, IntermediateSize: c.DFF,
		NumHeads: c.Heads, NumLayers: c.Layers, NumKVHeads: c.KVHeads, HeadDim: c.HeadDim, VocabSize: c.VocabSize,
		MaxPositions: max(c.Context, c.MaxPositions), RMSNormEps: c.NormEps, RopeTheta: c.RopeTheta, AttentionBias: &c.AttnBias,
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
		HeadDim: h.HeadDim, DFF: h.IntermediateSize, Context: h.MaxPositions, MaxPositions: h.MaxPositions, VocabSize: h.VocabSize,
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
