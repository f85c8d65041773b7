package model

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// TokenizerFile is the tokenizer's file in a model folder (Hugging Face's
// layout, which swetui's checkpoints and adapter folders follow).
const TokenizerFile = "tokenizer.json"

// A checkpoint is a directory that Hugging Face transformers and vLLM load
// as a Llama/Qwen2 model:
//
//	config.json            architecture (HF names); torch_dtype, the weights' dtype
//	model.safetensors      weights, HF names and [out, in] layout, float32 or
//	                       bfloat16 (rounded to nearest even from the fp32 masters);
//	                       past MaxShard bytes (5 GB) split as transformers does into
//	                       model-0000K-of-0000N.safetensors + model.safetensors.index.json
//	tokenizer.json         (optional)
//	tokenizer_config.json, generation_config.json, special_tokens_map.json…
//	                       Format.Files, copied through from the model the run
//	                       started from: its chat template and end tokens (optional)
//	state/master.safetensors     the fp32 master weights, HF names and layout, when the
//	                             weights are bf16 and some master is not a bf16 value
//	state/optimizer.safetensors  AdamW moments (flat, model layout) and step (optional)
//	extra/<name>           trainer state: RNG, curriculum, data position… (optional)
//
// Only the top level is the model: vLLM loads every *.safetensors there when
// no index names the shards, so what only a resumed run needs lives in
// state/, which transformers and vLLM never read. Load takes the weights
// from state/master.safetensors when it is there, so a bf16 checkpoint
// resumes bit-exactly; it belongs to the weights beside it (delete state/
// after editing them). Checkpoints written before state/ existed hold
// optimizer.safetensors at the top; Load reads that too.
//
// It is written to a temporary sibling directory, the weights streamed a
// tensor at a time, every file fsynced, then renamed into place; an
// existing checkpoint of the same name is replaced only after the new one
// is complete.

// Checkpoint is what Save writes and Load returns.
type Checkpoint struct {
	Model     *Model
	Optim     *AdamW
	Tokenizer *Tokenizer
	// Extra holds opaque trainer files by name (no path separators).
	Extra map[string][]byte
	// Format is how Save writes the weights. Load fills Dtype (from
	// config.json) and the HFFiles it finds, so a checkpoint loaded and
	// saved again keeps its format.
	Format
	// ReadWeight and ReadMoment read parameter i's values (model layout)
	// when Model is a Layout: a device's weights and AdamW moments (which
	// 1 or 2), streamed a tensor at a time so that the host never holds
	// them whole; Optim then carries only the step and hyper-parameters.
	ReadWeight func(i int, dst []float32) error
	ReadMoment func(i, which int, dst []float32) error
}

// plainName reports whether name is a file name without a path.
func plainName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsAny(name, `/\`)
}

// Save writes ck to dir atomically. Model is required; the rest optional.
func Save(dir string, ck Checkpoint) error {
	if ck.Model == nil {
		return fmt.Errorf("save checkpoint %s: no model", dir)
	}
	m := ck.Model
	dtype := ck.Dtype
	switch dtype {
	case "":
		dtype = F32
	case F32, BF16:
	default:
		return fmt.Errorf("save checkpoint %s: dtype %q: want F32 or BF16", dir, dtype)
	}
	maxShard := ck.MaxShard
	if maxShard <= 0 {
		maxShard = DefaultMaxShard
	}
	streamed := !m.HasWeights()
	if streamed && (ck.ReadWeight == nil || ck.Optim != nil && ck.ReadMoment == nil) {
		return fmt.Errorf("save checkpoint %s: a model layout without ReadWeight (and ReadMoment for its optimiser)", dir)
	}
	var buf []float32
	weights := func(i int) ([]float32, error) {
		p := &m.Params[i]
		if !streamed {
			return p.W, nil
		}
		n := prod(p.Shape)
		buf = slices.Grow(buf[:0], n)[:n]
		if err := ck.ReadWeight(i, buf); err != nil {
			return nil, fmt.Errorf("save checkpoint %s: tensor %s: %w", dir, p.Name, err)
		}
		return buf, nil
	}
	// Every value is checked before a file is written: a diverged model
	// must not replace a good checkpoint. bf16 weights need the masters
	// beside them unless rounding lost nothing (a model read from bf16).
	exact := true
	for i := range m.Params {
		p := &m.Params[i]
		w, err := weights(i)
		if err != nil {
			return err
		}
		if j := nonFinite(w); j >= 0 {
			return fmt.Errorf("save checkpoint %s: tensor %s holds %v at index %d: the weights are not finite", dir, p.Name, w[j], j)
		}
		if dtype != BF16 {
			continue
		}
		for j, x := range w {
			b := bf16(x)
			if b&0x7f80 == 0x7f80 {
				return fmt.Errorf("save checkpoint %s: tensor %s holds %v at index %d, past bfloat16's range", dir, p.Name, x, j)
			}
			exact = exact && uint32(b)<<16 == math.Float32bits(x)
		}
	}
	if o := ck.Optim; o != nil && !streamed && len(o.m) != len(m.data) {
		return fmt.Errorf("save checkpoint %s: optimiser holds %d weights, model %d", dir, len(o.m), len(m.data))
	}
	for name := range ck.Extra {
		if !plainName(name) {
			return fmt.Errorf("save checkpoint %s: extra file name %q is not a plain name", dir, name)
		}
	}
	for name := range ck.Files {
		switch {
		case !plainName(name):
			return fmt.Errorf("save checkpoint %s: file name %q is not a plain name", dir, name)
		case name == "config.json" || name == TokenizerFile || name == "model.safetensors.index.json" ||
			name == "state" || name == "extra" || strings.HasSuffix(name, ".safetensors"):
			// Save writes these itself; another *.safetensors vLLM would load as weights.
			return fmt.Errorf("save checkpoint %s: file %q would clash with the checkpoint's own", dir, name)
		}
	}
	h := m.Cfg.hf()
	h.TorchDtype = dtype.torch()
	cfg, err := configJSON(h, ck.BaseConfig)
	if err != nil {
		return fmt.Errorf("save checkpoint %s: config: %w", dir, err)
	}
	var tok []byte
	if ck.Tokenizer != nil {
		if tok, err = ck.Tokenizer.MarshalJSON(); err != nil {
			return fmt.Errorf("save checkpoint %s: tokenizer: %w", dir, err)
		}
	}
	ts := make([]stOut, len(m.Params))
	for i := range m.Params {
		if streamed {
			ts[i] = streamedOut(m.Params[i], func() ([]float32, error) { return weights(i) })
		} else {
			ts[i] = hfOut(&m.Params[i])
		}
	}
	err = writeDirAtomic(dir, func(tmp string) error {
		if err := writeFile(tmp, "config.json", bytesOf(cfg)); err != nil {
			return err
		}
		if err := writeWeights(tmp, dtype, ts, maxShard); err != nil {
			return err
		}
		if dtype == BF16 && !exact {
			meta := map[string]string{"format": "pt", "of": "the fp32 master weights of the bf16 weights beside state/"}
			if err := writeFile(tmp, "state/master.safetensors", func(w io.Writer) error {
				return writeSafetensors(w, F32, ts, meta)
			}); err != nil {
				return err
			}
		}
		if o := ck.Optim; o != nil {
			write := o.write
			if streamed {
				write = func(w io.Writer) error { return o.writeStreamed(w, m, ck.ReadMoment) }
			}
			if err := writeFile(tmp, "state/optimizer.safetensors", write); err != nil {
				return err
			}
		}
		if tok != nil {
			if err := writeFile(tmp, TokenizerFile, bytesOf(tok)); err != nil {
				return err
			}
		}
		for name, data := range ck.Files {
			if err := writeFile(tmp, name, bytesOf(data)); err != nil {
				return err
			}
		}
		return writeExtra(tmp, ck.Extra)
	})
	if err != nil {
		return fmt.Errorf("save checkpoint %s: %w", dir, err)
	}
	return nil
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

// Load reads a checkpoint directory: ours (the fp32 masters in state/ when
// there are some), or a Hugging Face Llama/Qwen2 model (config.json +
// model.safetensors or its shards, tied or untied embeddings; a tied LM
// head is copied, and then trains untied). When want is non-nil, an
// architecture that differs is refused with the first differing field.
// The weights are read one tensor at a time into the model: the host
// holds the model and one tensor, not the files' values beside it.
func Load(dir string, want *Config) (*Checkpoint, error) {
	w, err := OpenWeights(dir, want)
	if err != nil {
		return nil, err
	}
	m, err := newEmpty(w.Cfg)
	if err != nil {
		return nil, fmt.Errorf("load checkpoint %s: %w", dir, err)
	}
	if err := w.Each(m, func(p *Param, data []float32) error { copy(p.W, data); return nil }); err != nil {
		return nil, err
	}
	h := w.hf
	ck := &Checkpoint{Model: m, Extra: map[string][]byte{}, Format: Format{Dtype: F32, BaseConfig: w.raw}}
	if h.dtype() == "bfloat16" {
		ck.Dtype = BF16
	}
	if ck.Files, err = readHFFiles(dir); err != nil {
		return nil, fmt.Errorf("load checkpoint %s: %w", dir, err)
	}
	optPath := filepath.Join(dir, "state", "optimizer.safetensors")
	if _, err := os.Stat(optPath); errors.Is(err, os.ErrNotExist) {
		optPath = filepath.Join(dir, "optimizer.safetensors") // written before state/ existed
	}
	if ck.Optim, err = readOptim(optPath, len(m.data)); err != nil {
		return nil, fmt.Errorf("load checkpoint %s: %w", dir, err)
	}
	if _, err := os.Stat(filepath.Join(dir, TokenizerFile)); err == nil {
		if ck.Tokenizer, err = LoadTokenizer(filepath.Join(dir, TokenizerFile)); err != nil {
			return nil, fmt.Errorf("load checkpoint %s: %w", dir, err)
		}
	}
	if ck.Extra, err = readExtra(dir); err != nil {
		return nil, fmt.Errorf("load checkpoint %s: %w", dir, err)
	}
	return ck, nil
}

// LoadStreamed reads the checkpoint in dir for architecture want (refused
// with the first differing field) a tensor at a time into write (parameter
// i of layout, which 0 for weights, 1 and 2 for the AdamW moments): a
// device resuming from it never has it whole on the host. It returns the
// optimiser's step and hyper-parameters (nil when the checkpoint has none:
// its moments are then not written) and the extra files.
func LoadStreamed(dir string, want Config, layout *Model, write func(i, which int, src []float32) error) (*AdamW, map[string][]byte, error) {
	w, err := OpenWeights(dir, &want)
	if err != nil {
		return nil, nil, err
	}
	i := 0
	if err := w.Each(layout, func(p *Param, data []float32) error {
		err := write(i, 0, data)
		i++
		return err
	}); err != nil {
		return nil, nil, fmt.Errorf("load checkpoint %s: %w", dir, err)
	}
	extra, err := readExtra(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("load checkpoint %s: %w", dir, err)
	}
	path := filepath.Join(dir, "state", "optimizer.safetensors")
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		path = filepath.Join(dir, "optimizer.safetensors")
	}
	ts, meta, err := indexSafetensors(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, extra, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("load checkpoint %s: %w", dir, err)
	}
	o, err := optimFromMeta(filepath.Base(path), meta)
	if err != nil {
		return nil, nil, fmt.Errorf("load checkpoint %s: %w", dir, err)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("load checkpoint %s: %w", dir, err)
	}
	defer f.Close()
	var buf []float32
	var scratch []byte
	for which, name := range []string{"exp_avg", "exp_avg_sq"} {
		t, ok := ts[name]
		if !ok || prod(t.shape) != layout.NumParams() {
			return nil, nil, fmt.Errorf("load checkpoint %s: %s: %s missing or not of %d values", dir, filepath.Base(path), name, layout.NumParams())
		}
		off := 0
		for i := range layout.Params {
			n := prod(layout.Params[i].Shape)
			buf = slices.Grow(buf[:0], n)[:n]
			if err := t.readFrom(f, buf, off, &scratch); err != nil {
				return nil, nil, fmt.Errorf("load checkpoint %s: %s: %w", dir, name, err)
			}
			if nonFinite(buf) >= 0 {
				return nil, nil, fmt.Errorf("load checkpoint %s: %s: the AdamW moments are not finite", dir, filepath.Base(path))
			}
			if err := write(i, which+1, buf); err != nil {
				return nil, nil, err
			}
			off += n
		}
	}
	return o, extra, nil
}
