package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// An adapter folder is what PEFT writes and reads (PeftModel.from_pretrained,
// vLLM's LoRA loading):
//
//	adapter_config.json        peft_type LORA, r, lora_alpha, target_modules, base model
//	adapter_model.safetensors  base_model.model.<weight stem>.lora_A.weight [r, in],
//	                           …lora_B.weight [out, r], float32
//	tokenizer.json             (optional)
//	state/optimizer.safetensors, extra/  the trainer's, as in a full checkpoint
//
// written atomically as Save writes a checkpoint.

// peftPrefix is PEFT's name for the wrapped model in adapter files.
const peftPrefix = "base_model.model."

// peftConfig is adapter_config.json's fields that matter here.
type peftConfig struct {
	PeftType       string   `json:"peft_type"`
	TaskType       string   `json:"task_type"`
	R              int      `json:"r"`
	LoraAlpha      float64  `json:"lora_alpha"`
	LoraDropout    float64  `json:"lora_dropout"`
	TargetModules  []string `json:"target_modules"`
	Bias           string   `json:"bias"`
	FanInFanOut    bool     `json:"fan_in_fan_out"`
	UseRSLoRA      bool     `json:"use_rslora"`
	UseDoRA        bool     `json:"use_dora"`
	InferenceMode  bool     `json:"inference_mode"`
	BaseModel      string   `json:"base_model_name_or_path"`
	ModulesToSave  []string `json:"modules_to_save"`
	InitLoraWeight bool     `json:"init_lora_weights"`
}

// IsAdapter reports whether dir is an adapter folder.
func IsAdapter(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "adapter_config.json"))
	return err == nil
}

// Adapter is what SaveAdapter writes and LoadAdapter returns.
type Adapter struct {
	LoRA *LoRA
	// BaseModel is the base model's folder (adapter_config.json's
	// base_model_name_or_path), which LoadAdapter does not read.
	BaseModel string
	Optim     *AdamW
	Tokenizer *Tokenizer
	// Files are top-level files written as they are: the base model's chat
	// template and end tokens (Format.Files), so the folder prompts alike.
	Files map[string][]byte
	Extra map[string][]byte
}

// SaveAdapter writes a into dir atomically.
func SaveAdapter(dir string, a Adapter) error {
	l := a.LoRA
	if j := nonFinite(l.data); j >= 0 {
		return fmt.Errorf("save adapter %s: weight %d is %v: the adapters are not finite", dir, j, l.data[j])
	}
	for name := range a.Extra {
		if !plainName(name) {
			return fmt.Errorf("save adapter %s: extra file name %q is not a plain name", dir, name)
		}
	}
	for name := range a.Files {
		if !slices.Contains(HFFiles, name) {
			return fmt.Errorf("save adapter %s: file %q is not one of %v", dir, name, HFFiles)
		}
	}
	cfg, err := json.MarshalIndent(peftConfig{PeftType: "LORA", TaskType: "CAUSAL_LM", R: l.Cfg.Rank, LoraAlpha: l.Cfg.Alpha,
		TargetModules: l.Cfg.Targets, Bias: "none", InferenceMode: true, BaseModel: a.BaseModel, InitLoraWeight: true}, "", "  ")
	if err != nil {
		return fmt.Errorf("save adapter %s: %w", dir, err)
	}
	var ts []stOut
	for i := range l.Params {
		p := &l.Params[i]
		o := hfOut(p) // [in, r] and [r, out] stored as PEFT's [r, in] and [out, r]
		o.name = peftPrefix + p.Name
		ts = append(ts, o)
	}
	var tok []byte
	if a.Tokenizer != nil {
		if tok, err = a.Tokenizer.MarshalJSON(); err != nil {
			return fmt.Errorf("save adapter %s: tokenizer: %w", dir, err)
		}
	}
	err = writeDirAtomic(dir, func(tmp string) error {
		if err := writeFile(tmp, "adapter_config.json", bytesOf(cfg)); err != nil {
			return err
		}
		if err := writeFile(tmp, "adapter_model.safetensors", func(w io.Writer) error {
			return writeSafetensors(w, F32, ts, map[string]string{"format": "pt"})
		}); err != nil {
			return err
		}
		if a.Optim != nil {
			if err := writeFile(tmp, "state/optimizer.safetensors", a.Optim.write); err != nil {
				return err
			}
		}
		if tok != nil {
			if err := writeFile(tmp, TokenizerFile, bytesOf(tok)); err != nil {
				return err
			}
		}
		for name, data := range a.Files {
			if err := writeFile(tmp, name, bytesOf(data)); err != nil {
				return err
			}
		}
		return writeExtra(tmp, a.Extra)
	})
	if err != nil {
		return fmt.Errorf("save adapter %s: %w", dir, err)
	}
	return nil
}

// LoadAdapter reads an adapter folder for base's architecture: ours, or
// one PEFT wrote (float32, bf16 or fp16 weights; no DoRA, rsLoRA, biases
// or fan_in_fan_out).
func LoadAdapter(dir string, base *Model) (*Adapter, error) {
	fail := func(err error) (*Adapter, error) { return nil, fmt.Errorf("load adapter %s: %w", dir, err) }
	raw, err := os.ReadFile(filepath.Join(dir, "adapter_config.json"))
	if err != nil {
		return fail(err)
	}
	var pc peftConfig
	if err := json.Unmarshal(raw, &pc); err != nil {
		return fail(fmt.Errorf("adapter_config.json: %w", err))
	}
	switch {
	case pc.PeftType != "LORA":
		return fail(fmt.Errorf("adapter_config.json: peft_type %q is not LORA", pc.PeftType))
	case pc.UseDoRA || pc.UseRSLoRA || pc.FanInFanOut:
		return fail(errors.New("adapter_config.json: DoRA, rsLoRA and fan_in_fan_out adapters are not supported"))
	case pc.Bias != "" && pc.Bias != "none":
		return fail(fmt.Errorf("adapter_config.json: bias %q is not supported (want none)", pc.Bias))
	case len(pc.ModulesToSave) > 0:
		return fail(fmt.Errorf("adapter_config.json: modules_to_save %v is not supported", pc.ModulesToSave))
	}
	l, err := newLoRAEmpty(base, LoRAConfig{Rank: pc.R, Alpha: pc.LoraAlpha, Targets: pc.TargetModules})
	if err != nil {
		return fail(err)
	}
	ts, _, err := readSafetensors(filepath.Join(dir, "adapter_model.safetensors"))
	if err != nil {
		return fail(err)
	}
	for i := range l.Params {
		p := &l.Params[i]
		t, ok := ts[peftPrefix+p.Name]
		if !ok {
			// PEFT names a module's adapter with its adapter name when saved
			// by some versions ("lora_A.default.weight").
			t, ok = ts[peftPrefix+strings.Replace(p.Name, ".weight", ".default.weight", 1)]
		}
		if !ok {
			return fail(fmt.Errorf("tensor %s%s missing", peftPrefix, p.Name))
		}
		want := []int{p.Shape[1], p.Shape[0]}
		if !slices.Equal(t.shape, want) {
			return fail(fmt.Errorf("tensor %s%s has shape %v, want %v", peftPrefix, p.Name, t.shape, want))
		}
		if j := nonFinite(t.data); j >= 0 {
			return fail(fmt.Errorf("tensor %s%s holds %v at index %d", peftPrefix, p.Name, t.data[j], j))
		}
		copy(p.W, transpose(t.data, want[0], want[1]))
	}
	a := &Adapter{LoRA: l, BaseModel: pc.BaseModel}
	if a.Optim, err = readOptim(filepath.Join(dir, "state", "optimizer.safetensors"), l.NumParams()); err != nil {
		return fail(err)
	}
	if _, err := os.Stat(filepath.Join(dir, TokenizerFile)); err == nil {
		if a.Tokenizer, err = LoadTokenizer(filepath.Join(dir, TokenizerFile)); err != nil {
			return fail(err)
		}
	}
	if a.Files, err = readHFFiles(dir); err != nil {
		return fail(err)
	}
	if a.Extra, err = readExtra(dir); err != nil {
		return fail(err)
	}
	return a, nil
}

// ReadAdapterBase is an adapter folder's base model
// (adapter_config.json's base_model_name_or_path).
func ReadAdapterBase(dir string) (string, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "adapter_config.json"))
	if err != nil {
		return "", fmt.Errorf("adapter %s: %w", dir, err)
	}
	var pc peftConfig
	if err := json.Unmarshal(raw, &pc); err != nil {
		return "", fmt.Errorf("adapter %s: adapter_config.json: %w", dir, err)
	}
	return pc.BaseModel, nil
}
