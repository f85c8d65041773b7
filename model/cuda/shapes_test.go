package cuda

import (
	"slices"
	"testing"

	"github.com/swetui/swetui/model"
)

// The named shapes have their models' published parameter counts (Hugging
// Face's, with the 0.5B's and 1.5B's tied embeddings counted once; we train
// an untied head, one more vocab × d_model).
func TestShapesMatchPublishedCounts(t *testing.T) {
	for _, tt := range []struct {
		name      string
		published int
		tied      bool
	}{
		{"qwen2.5-coder-0.5b", 494_032_768, true},
		{"qwen2.5-coder-1.5b", 1_543_714_304, true},
		{"qwen2.5-coder-7b", 7_615_616_512, false},
		{"qwen2.5-coder-14b", 14_770_033_664, false},
		{"llama-3-8b", 8_030_261_248, false},
	} {
		c, ok := Shape(tt.name)
		if !ok {
			t.Fatalf("no shape %s", tt.name)
		}
		want := tt.published
		if tt.tied {
			want += c.VocabSize * c.DModel
		}
		if got := ParamCount(c); got != want {
			t.Errorf("%s: %d weights, want %d", tt.name, got, want)
		}
	}
	if _, ok := Shape("QWEN2.5-CODER-7B"); !ok {
		t.Error("shape names are not matched in any case")
	}
	if !slices.IsSorted(ShapeNames()) || len(ShapeNames()) != len(Shapes) {
		t.Errorf("ShapeNames %v", ShapeNames())
	}
}

// Fit prefers what changes the run least, and says when nothing fits.
func TestFit(t *testing.T) {
	c, _ := Shape("qwen2.5-coder-7b")
	c.Context = 8192
	lora := &model.LoRAConfig{Rank: 16, Alpha: 32, Targets: model.LoRATargets}
	w := Workload{Cfg: c, Act: BF16, LoRA: lora, Reference: true, Completions: 8, MicroTokens: 16384}
	for _, tt := range []struct {
		name string
		w    Workload
		gib  int64
		want []string
		ok   bool
	}{
		{"fits as it is", w, 200, nil, true},
		{"a smaller micro-batch", w, 80, []string{"model.micro_tokens=8192"}, true},
		{"full fine-tuning takes LoRA", func() Workload { v := w; v.LoRA = nil; return v }(), 80, []string{"lora.rank=16", "model.micro_tokens=8192"}, true},
		{"recomputing before sync sampling", func() Workload { v := w; v.Snapshots = MaxSnapshots; return v }(), 56, []string{"model.recompute=on"}, true},
		{"sync sampling before LoRA or a smaller G", func() Workload { v := w; v.Snapshots, v.Recompute = MaxSnapshots, true; return v }(), 32, []string{"grpo.async.enabled=false"}, true},
		{"nothing fits", w, 8, []string{"model.recompute=on", "grpo.group_size=2"}, false},
	} {
		got, p, ok := Fit(tt.w, tt.gib<<30)
		if ok != tt.ok || !slices.Equal(got, tt.want) || ok && p.Total > tt.gib<<30 {
			t.Errorf("%s: %v (%s, fits %v), want %v fits %v", tt.name, got, GiB(p.Total), ok, tt.want, tt.ok)
		}
	}
}
