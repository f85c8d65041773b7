package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/swetui/swetui/internal/durable"
)

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

// hfLayout says whether a parameter is stored transposed in HF files:
// linear weights are [out, in] there and [in, out] here; the embedding is
// [vocab, d] in both.
func transposed(p *Param) bool { return len(p.Shape) == 2 && p.Name != "model.embed_tokens.weight" }

func transpose(src []float32, rows, cols int) []float32 {
	dst := make([]float32, len(src))
	transposeInto(dst, src, rows, cols)
	return dst
}

// transposeInto writes src [rows, cols] transposed into dst [cols, rows],
// in 16x64 tiles (both sides stay in cache).
func transposeInto(dst, src []float32, rows, cols int) {
	for r0 := 0; r0 < rows; r0 += 16 {
		for c0 := 0; c0 < cols; c0 += 64 {
			for r := r0; r < min(r0+16, rows); r++ {
				for c := c0; c < min(c0+64, cols); c++ {
					dst[c*rows+r] = src[r*cols+c]
				}
			}
		}
	}
}

// hfOut is p as HF files hold it. A linear weight is transposed a block of
// file rows at a time (contiguous reads, a small buffer), not copied whole.
func hfOut(p *Param) stOut {
	if !transposed(p) {
		return stOut{p.Name, p.Shape, func(emit func([]float32) error) error { return emit(p.W) }}
	}
	rows, cols := p.Shape[0], p.Shape[1]
	return stOut{p.Name, []int{cols, rows}, func(emit func([]float32) error) error {
		const block = 64
		buf := make([]float32, min(block, cols)*rows)
		for c0 := 0; c0 < cols; c0 += block {
			c1 := min(c0+block, cols)
			chunk := buf[:(c1-c0)*rows]
			for r0 := 0; r0 < rows; r0 += 16 { // 16x64 tiles: both sides stay in cache
				r1 := min(r0+16, rows)
				for j := 0; j < c1-c0; j++ {
					dst := chunk[j*rows+r0 : j*rows+r1]
					for r := range dst {
						dst[r] = p.W[(r0+r)*cols+c0+j]
					}
				}
			}
			if err := emit(chunk); err != nil {
				return err
			}
		}
		return nil
	}}
}

// shards splits ts into files of at most max bytes of data, in order, as
// transformers does: a tensor that would overflow the current shard starts
// the next, and one larger than max has a shard of its own.
func shards(ts []stOut, dtype Dtype, max int64) [][]stOut {
	var out [][]stOut
	var cur []stOut
	var size int64
	for _, t := range ts {
		n := int64(prod(t.shape) * dtype.size())
		if len(cur) > 0 && size+n > max {
			out, cur, size = append(out, cur), nil, 0
		}
		cur, size = append(cur, t), size+n
	}
	return append(out, cur)
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
		case name == "config.json" || name == "tokenizer.json" || name == "model.safetensors.index.json" ||
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
			if err := writeFile(tmp, "tokenizer.json", bytesOf(tok)); err != nil {
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

// writeWeights writes ts as model.safetensors, or, past maxShard bytes, as
// transformers' numbered shards and their index.
func writeWeights(dir string, dtype Dtype, ts []stOut, maxShard int64) error {
	pt := map[string]string{"format": "pt"}
	parts := shards(ts, dtype, maxShard)
	if len(parts) == 1 {
		return writeFile(dir, "model.safetensors", func(w io.Writer) error { return writeSafetensors(w, dtype, ts, pt) })
	}
	weightMap := map[string]string{}
	var total int64
	for k, part := range parts {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", k+1, len(parts))
		for _, t := range part {
			weightMap[t.name] = name
			total += int64(prod(t.shape) * dtype.size())
		}
		if err := writeFile(dir, name, func(w io.Writer) error { return writeSafetensors(w, dtype, part, pt) }); err != nil {
			return err
		}
	}
	idx, err := json.MarshalIndent(map[string]any{"metadata": map[string]any{"total_size": total}, "weight_map": weightMap}, "", "  ")
	if err != nil {
		return fmt.Errorf("shard index: %w", err)
	}
	return writeFile(dir, "model.safetensors.index.json", bytesOf(append(idx, '\n')))
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

// createFile opens a checkpoint file for writing; tests replace it to fail
// part-way.
var createFile = func(path string) (checkpointFile, error) { return os.Create(path) }

type checkpointFile interface {
	io.Writer
	Sync() error
	Close() error
}

func bytesOf(data []byte) func(io.Writer) error {
	return func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	}
}

// writeFile creates dir/name (and its folder), streams it with write and
// syncs it to the disk.
func writeFile(dir, name string, write func(io.Writer) error) error {
	path := filepath.Join(dir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	f, err := createFile(path)
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	err = write(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

// writeDirAtomic has write fill a temporary sibling of dir, syncs its
// folders and puts it in dir's place; on any failure dir is left as it was.
func writeDirAtomic(dir string, write func(tmp string) error) error {
	dir = filepath.Clean(dir)
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".tmp-*")
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(tmp)
		}
	}()
	if err := write(tmp); err != nil {
		return err
	}
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := durable.SyncDir(filepath.Join(tmp, e.Name())); err != nil {
				return err
			}
		}
	}
	if err := durable.SyncDir(tmp); err != nil {
		return err
	}
	if err := durable.ReplaceDir(tmp, dir); err != nil {
		return err
	}
	ok = true
	return nil
}

// readWeights indexes the fp32 masters in state/ when there are some
// (fromMasters), else model.safetensors or the shards that
// model.safetensors.index.json lists; no values are read.
func readWeights(dir string) (ts map[string]stTensor, fromMasters bool, err error) {
	master := filepath.Join(dir, "state", "master.safetensors")
	if _, err := os.Stat(master); err == nil {
		ts, _, err := indexSafetensors(master)
		return ts, true, err
	}
	single := filepath.Join(dir, "model.safetensors")
	if _, err := os.Stat(single); err == nil {
		ts, _, err := indexSafetensors(single)
		return ts, false, err
	}
	raw, err := os.ReadFile(filepath.Join(dir, "model.safetensors.index.json"))
	if err != nil {
		return nil, false, fmt.Errorf("neither model.safetensors nor a shard index: %w", err)
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(raw, &idx); err != nil {
		return nil, false, fmt.Errorf("model.safetensors.index.json: %w", err)
	}
	all := map[string]stTensor{}
	seen := map[string]bool{}
	for _, shard := range idx.WeightMap {
		if seen[shard] {
			continue
		}
		seen[shard] = true
		if shard != filepath.Base(shard) {
			return nil, false, fmt.Errorf("model.safetensors.index.json: shard %q is not a plain file name", shard)
		}
		ts, _, err := indexSafetensors(filepath.Join(dir, shard))
		if err != nil {
			return nil, false, err
		}
		for k, v := range ts {
			all[k] = v
		}
	}
	return all, false, nil
}

// Weights are a checkpoint folder's weights, indexed but not read: Each
// reads them one tensor at a time, so that a device engine can take a
// model that the host never holds whole.
type Weights struct {
	Cfg  Config
	dir  string
	tied bool
	ts   map[string]stTensor
	from string // names the masters' file in errors about its tensors
	hf   hfConfig
	raw  []byte // config.json as read
}

// OpenWeights reads dir's config.json and indexes its weight files (ours,
// or a Hugging Face Llama/Qwen2 model's, sharded or not, in any float
// type). When want is non-nil, an architecture that differs is refused
// with the first differing field.
func OpenWeights(dir string, want *Config) (*Weights, error) {
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
	ts, fromMasters, err := readWeights(dir)
	if err != nil {
		return nil, fmt.Errorf("load checkpoint %s: %w", dir, err)
	}
	w := &Weights{Cfg: cfg, dir: dir, tied: h.TieWordEmbeddings, ts: ts, hf: h, raw: raw}
	if fromMasters {
		w.from = " (state/master.safetensors)"
	}
	return w, nil
}

// Each reads every parameter of layout (a model of w.Cfg: Layout's, or a
// full model) in order and calls fn with its values in the model's layout
// ([in, out] projections); data is reused from call to call. A tied LM
// head is read from the embedding.
func (w *Weights) Each(layout *Model, fn func(p *Param, data []float32) error) error {
	var buf, tbuf []float32
	var scratch []byte
	for i := range layout.Params {
		p := &layout.Params[i]
		t, ok := w.ts[p.Name]
		if !ok && p.Name == "lm_head.weight" {
			t, ok = w.ts["model.embed_tokens.weight"] // tied embeddings
			if ok && !w.tied {
				return fmt.Errorf("load checkpoint %s: lm_head.weight missing and tie_word_embeddings is false", w.dir)
			}
		}
		if !ok {
			return fmt.Errorf("load checkpoint %s: tensor %s missing%s", w.dir, p.Name, w.from)
		}
		wantShape := p.Shape
		if transposed(p) {
			wantShape = []int{p.Shape[1], p.Shape[0]}
		}
		if !slices.Equal(t.shape, wantShape) {
			return fmt.Errorf("load checkpoint %s: tensor %s%s has shape %v, want %v", w.dir, p.Name, w.from, t.shape, wantShape)
		}
		n := prod(p.Shape)
		buf = slices.Grow(buf[:0], n)[:n]
		if err := t.read(buf, &scratch); err != nil {
			return fmt.Errorf("load checkpoint %s: tensor %s%s: %w", w.dir, p.Name, w.from, err)
		}
		if j := nonFinite(buf); j >= 0 {
			return fmt.Errorf("load checkpoint %s: tensor %s%s holds %v at index %d: the weights are not finite (a diverged run?); resume from an earlier checkpoint",
				w.dir, p.Name, w.from, buf[j], j)
		}
		data := buf
		if transposed(p) {
			tbuf = slices.Grow(tbuf[:0], n)[:n]
			transposeInto(tbuf, buf, wantShape[0], wantShape[1])
			data = tbuf
		}
		if err := fn(p, data); err != nil {
			return err
		}
	}
	return nil
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
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err == nil {
		if ck.Tokenizer, err = LoadTokenizer(filepath.Join(dir, "tokenizer.json")); err != nil {
			return nil, fmt.Errorf("load checkpoint %s: %w", dir, err)
		}
	}
	if ck.Extra, err = readExtra(dir); err != nil {
		return nil, fmt.Errorf("load checkpoint %s: %w", dir, err)
	}
	return ck, nil
}

// write streams the optimiser's moments, step and hyper-parameters as
// safetensors (a checkpoint's state/optimizer.safetensors).
func (o *AdamW) write(w io.Writer) error {
	moments := []stOut{namedTensor{"exp_avg", []int{len(o.m)}, o.m}.out(), namedTensor{"exp_avg_sq", []int{len(o.v)}, o.v}.out()}
	return writeSafetensors(w, F32, moments, o.meta())
}

func (o *AdamW) meta() map[string]string {
	return map[string]string{"step": strconv.Itoa(o.Step), "beta1": fmtF(o.Beta1), "beta2": fmtF(o.Beta2),
		"eps": fmtF(o.Eps), "weight_decay": fmtF(o.WeightDecay)}
}

// writeStreamed is write for moments read a parameter at a time (a
// device's) over layout's parameters.
func (o *AdamW) writeStreamed(w io.Writer, layout *Model, read func(i, which int, dst []float32) error) error {
	var buf []float32
	moment := func(which int) func(emit func([]float32) error) error {
		return func(emit func([]float32) error) error {
			for i := range layout.Params {
				n := prod(layout.Params[i].Shape)
				buf = slices.Grow(buf[:0], n)[:n]
				if err := read(i, which, buf); err != nil {
					return fmt.Errorf("optimizer %s: %w", layout.Params[i].Name, err)
				}
				if err := emit(buf); err != nil {
					return err
				}
			}
			return nil
		}
	}
	n := []int{layout.NumParams()}
	return writeSafetensors(w, F32, []stOut{{"exp_avg", n, moment(1)}, {"exp_avg_sq", n, moment(2)}}, o.meta())
}

// streamedOut is hfOut of p with its values read by get when written.
func streamedOut(p Param, get func() ([]float32, error)) stOut {
	out := hfOut(&p)
	inner := out.each
	out.each = func(emit func([]float32) error) error {
		w, err := get()
		if err != nil {
			return err
		}
		p.W = w
		return inner(emit)
	}
	return out
}

// readOptim reads what AdamW.write wrote for n weights; nil when the file
// does not exist.
func readOptim(path string, n int) (*AdamW, error) {
	ots, meta, err := readSafetensors(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	name := filepath.Base(path)
	o, err := optimFromMeta(name, meta)
	if err != nil {
		return nil, err
	}
	o.m, o.v = ots["exp_avg"].data, ots["exp_avg_sq"].data
	if nonFinite(o.m) >= 0 || nonFinite(o.v) >= 0 {
		return nil, fmt.Errorf("%s: the AdamW moments are not finite", name)
	}
	if len(o.m) != n || len(o.v) != n {
		return nil, fmt.Errorf("%s: optimizer state has %d/%d values for %d weights", name, len(o.m), len(o.v), n)
	}
	return o, nil
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

// optimFromMeta is an optimiser's step and hyper-parameters from its
// file's metadata (name for errors).
func optimFromMeta(name string, meta map[string]string) (*AdamW, error) {
	o := &AdamW{}
	var err error
	if o.Step, err = strconv.Atoi(meta["step"]); err != nil {
		return nil, fmt.Errorf("%s: step %q: %w", name, meta["step"], err)
	}
	for _, f := range []struct {
		key string
		dst *float64
	}{{"beta1", &o.Beta1}, {"beta2", &o.Beta2}, {"eps", &o.Eps}, {"weight_decay", &o.WeightDecay}} {
		if *f.dst, err = strconv.ParseFloat(meta[f.key], 64); err != nil {
			return nil, fmt.Errorf("%s: %s %q: %w", name, f.key, meta[f.key], err)
		}
	}
	return o, nil
}

// writeExtra writes a checkpoint's opaque trainer files under extra/.
func writeExtra(tmp string, extra map[string][]byte) error {
	for name, data := range extra {
		if err := writeFile(tmp, "extra/"+name, bytesOf(data)); err != nil {
			return err
		}
	}
	return nil
}

// readExtra reads dir/extra/ (none: an empty map).
func readExtra(dir string) (map[string][]byte, error) {
	extra := map[string][]byte{}
	entries, err := os.ReadDir(filepath.Join(dir, "extra"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	for _, e := range entries {
		if e.Type().IsRegular() {
			if extra[e.Name()], err = os.ReadFile(filepath.Join(dir, "extra", e.Name())); err != nil {
				return nil, err
			}
		}
	}
	return extra, nil
}
