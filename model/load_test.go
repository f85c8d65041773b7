package model

import (
	"path/filepath"
	"runtime"
	"testing"
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
