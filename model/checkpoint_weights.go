package model

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
)

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
