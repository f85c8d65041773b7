package model

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/swetui/swetui/config"
)

// TestLoadReadsOneTensorAtATime: loading allocates the model's arenas
// (weights and gradients, 8 bytes a weight) and the largest tensor's
// buffers (the 2048 × 128 embedding: about 2 bytes a weight of this
// model), not every file's values beside them (19 bytes a weight from
// these bf16 files, measured before).
func TestLoadReadsOneTensorAtATime(t *testing.T) {
	cfg := Config{Layers: 4, DModel: 128, Heads: 4, KVHeads: 2, DFF: 384, Context: 64, VocabSize: 2048}
	m, err := New(cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "ckpt")
	if err := Save(dir, Checkpoint{Model: m, Format: Format{Dtype: BF16, MaxShard: int64(m.NumParams())}}); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	ck, err := Load(dir, nil)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	perWeight := float64(after.TotalAlloc-before.TotalAlloc) / float64(ck.Model.NumParams())
	t.Logf("Load allocated %.1f bytes a weight", perWeight)
	if perWeight > 11 {
		t.Errorf("Load allocated %.1f bytes a weight, want at most 11 (arenas 8, plus one tensor's buffers)", perWeight)
	}
}

// TestStreamedSaveAndLoad: a checkpoint written from a Layout whose values
// are read a tensor at a time (a device's) is byte for byte the one Save
// writes from the model itself, in f32 and bf16; LoadStreamed hands back
// every weight and moment.
func TestStreamedSaveAndLoad(t *testing.T) {
	cfg := Config{Layers: 2, DModel: 32, Heads: 4, KVHeads: 2, DFF: 48, Context: 64, VocabSize: 300, AttnBias: true}
	m, err := New(cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	opt := NewAdamW(config.Default().Optim, m.NumParams())
	opt.Step = 7
	for i := range opt.m {
		opt.m[i], opt.v[i] = float32(i%13)*0.25, float32(i%5)
	}
	layout, err := Layout(m.Cfg)
	if err != nil {
		t.Fatal(err)
	}
	readW := func(i int, dst []float32) error { copy(dst, m.Params[i].W); return nil }
	offs := []int{0}
	for _, p := range m.Params {
		offs = append(offs, offs[len(offs)-1]+len(p.W))
	}
	readM := func(i, which int, dst []float32) error {
		src := opt.m
		if which == 2 {
			src = opt.v
		}
		copy(dst, src[offs[i]:offs[i+1]])
		return nil
	}
	for _, dtype := range []Dtype{F32, BF16} {
		whole, streamed := filepath.Join(t.TempDir(), "whole"), filepath.Join(t.TempDir(), "streamed")
		f := Format{Dtype: dtype, MaxShard: int64(m.NumParams())}
		if err := Save(whole, Checkpoint{Model: m, Optim: opt, Format: f, Extra: map[string][]byte{"x": {1}}}); err != nil {
			t.Fatal(err)
		}
		hs := &AdamW{Beta1: opt.Beta1, Beta2: opt.Beta2, Eps: opt.Eps, WeightDecay: opt.WeightDecay, Step: opt.Step}
		if err := Save(streamed, Checkpoint{Model: layout, Optim: hs, Format: f, Extra: map[string][]byte{"x": {1}},
			ReadWeight: readW, ReadMoment: readM}); err != nil {
			t.Fatal(err)
		}
		err := filepath.WalkDir(whole, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(whole, path)
			a, _ := os.ReadFile(path)
			b, err := os.ReadFile(filepath.Join(streamed, rel))
			if err != nil || !bytes.Equal(a, b) {
				t.Errorf("%s: %s differs when streamed (%v)", dtype, rel, err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		got := make([][3][]float32, len(m.Params))
		o, extra, err := LoadStreamed(streamed, m.Cfg, layout, func(i, which int, src []float32) error {
			got[i][which] = slices.Clone(src)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if o == nil || o.Step != 7 || o.Beta2 != opt.Beta2 || !bytes.Equal(extra["x"], []byte{1}) {
			t.Fatalf("%s: optimiser %+v, extra %v", dtype, o, extra)
		}
		for i, p := range m.Params {
			if !slices.Equal(got[i][0], p.W) || !slices.Equal(got[i][1], opt.m[offs[i]:offs[i+1]]) || !slices.Equal(got[i][2], opt.v[offs[i]:offs[i+1]]) {
				t.Fatalf("%s: %s read back differs", dtype, p.Name)
			}
		}
	}
}
