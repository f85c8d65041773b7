package model

import (
	"context"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// tinyLoRA is a one-layer model with a rank-1 adapter on q_proj only.
func tinyLoRA(t *testing.T) (*Model, *LoRA) {
	t.Helper()
	m, err := New(Config{Layers: 1, DModel: 4, Heads: 2, KVHeads: 1, DFF: 8, Context: 16, VocabSize: 11}, 1)
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewLoRA(m, LoRAConfig{Rank: 1, Alpha: 2, Targets: []string{"q_proj"}}, 1)
	if err != nil {
		t.Fatal(err)
	}
	return m, l
}

// TestLoRAMergeAndChainRule works W_eff = W + s·A·B and the adapters'
// gradients ∂L/∂A = s·G·Bᵀ, ∂L/∂B = s·Aᵀ·G out by hand for a 4×4 weight
// (q_proj: d_model 4 → heads·head_dim 4) and a rank-1 adapter, s = 2.
func TestLoRAMergeAndChainRule(t *testing.T) {
	m, l := tinyLoRA(t)
	if len(l.Params) != 2 || l.Base[0] != "model.layers.0.self_attn.q_proj.weight" {
		t.Fatalf("adapters %v on %v", len(l.Params), l.Base)
	}
	a, b := &l.Params[0], &l.Params[1]
	if a.Name != "model.layers.0.self_attn.q_proj.lora_A.weight" || a.Shape[0] != 4 || a.Shape[1] != 1 || b.Shape[0] != 1 || b.Shape[1] != 4 {
		t.Fatalf("A %s %v, B %s %v", a.Name, a.Shape, b.Name, b.Shape)
	}
	for _, w := range b.W {
		if w != 0 {
			t.Fatal("B must start at zero (training starts from the base)")
		}
	}
	copy(a.W, []float32{1, 2, 0, -1})
	copy(b.W, []float32{0.5, 0, 1, 2})
	w, _ := m.Param(l.Base[0])
	merged := m.Clone()
	if err := l.Merge(merged, m); err != nil {
		t.Fatal(err)
	}
	mw, _ := merged.Param(l.Base[0])
	// s·A·B = 2·[1 2 0 −1]ᵀ·[0.5 0 1 2]: row i is 2·a_i·[0.5 0 1 2].
	outer := []float32{
		1, 0, 2, 4,
		2, 0, 4, 8,
		0, 0, 0, 0,
		-1, 0, -2, -4,
	}
	for i := range outer {
		if got, want := mw.W[i], w.W[i]+outer[i]; math.Abs(float64(got-want)) > 1e-6 {
			t.Fatalf("merged[%d] = %g, want %g", i, got, want)
		}
	}
	// G = e_0·e_2ᵀ (only ∂L/∂W_eff[0][2] = 1): ∂L/∂A = s·G·Bᵀ = [2·B_2, 0, 0, 0]
	// = [2, 0, 0, 0]; ∂L/∂B = s·Aᵀ·G = [0, 0, 2·A_0, 0] = [0, 0, 2, 0].
	mw.G[2] = 1
	if err := l.AdapterGrads(merged); err != nil {
		t.Fatal(err)
	}
	for i, want := range []float32{2, 0, 0, 0} {
		if a.G[i] != want {
			t.Errorf("dA[%d] = %g, want %g", i, a.G[i], want)
		}
	}
	for i, want := range []float32{0, 0, 2, 0} {
		if b.G[i] != want {
			t.Errorf("dB[%d] = %g, want %g", i, b.G[i], want)
		}
	}
}

// TestLoRAGradsMatchFiniteDifferences checks the chain rule end to end: the
// adapters' gradients of Σ cot·logprob (gorgonia on the merged model, then
// AdapterGrads) against central differences of the loss in float64 terms.
func TestLoRAGradsMatchFiniteDifferences(t *testing.T) {
	ctx := context.Background()
	m, err := New(Config{Layers: 1, DModel: 8, Heads: 2, KVHeads: 1, DFF: 16, Context: 16, VocabSize: 13}, 2)
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewLoRA(m, LoRAConfig{Rank: 2, Alpha: 4, Targets: []string{"v_proj", "down_proj"}}, 2)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := 1; i < len(l.Params); i += 2 {
		for j := range l.Params[i].W {
			l.Params[i].W[j] = float32(0.3 * r.NormFloat64())
		}
	}
	b := Batch{Tokens: [][]int{{1, 5, 7, 2, 9, 4}}, PromptLen: []int{2}, Temperature: 1}
	cot := [][]float32{{1, -0.5, 0.25, 2}}
	loss := func() float64 {
		merged := m.Clone()
		if err := l.Merge(merged, m); err != nil {
			t.Fatal(err)
		}
		res, err := merged.Logprobs(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		var s float64
		for j, lp := range res.Logprobs[0] {
			s += float64(cot[0][j]) * float64(lp)
		}
		return s
	}
	merged := m.Clone()
	if err := l.Merge(merged, m); err != nil {
		t.Fatal(err)
	}
	if _, err := merged.Backward(ctx, b, cot); err != nil {
		t.Fatal(err)
	}
	if err := l.AdapterGrads(merged); err != nil {
		t.Fatal(err)
	}
	const h = 1e-2
	checked := 0
	for pi := range l.Params {
		p := &l.Params[pi]
		for _, j := range []int{0, len(p.W) / 2, len(p.W) - 1} {
			w := p.W[j]
			p.W[j] = w + h
			up := loss()
			p.W[j] = w - h
			down := loss()
			p.W[j] = w
			fd := (up - down) / (2 * h)
			if math.Abs(fd-float64(p.G[j])) > 2e-3+2e-2*math.Abs(fd) {
				t.Errorf("%s[%d]: chain rule %g, finite difference %g", p.Name, j, p.G[j], fd)
			}
			checked++
		}
	}
	if checked != 12 {
		t.Fatalf("checked %d entries", checked)
	}
}

func TestLoRAConfigRefusals(t *testing.T) {
	for _, tc := range []struct {
		c    LoRAConfig
		want string
	}{
		{LoRAConfig{Rank: 0, Alpha: 1, Targets: LoRATargets}, "rank=0"},
		{LoRAConfig{Rank: 8, Alpha: 0, Targets: LoRATargets}, "alpha=0"},
		{LoRAConfig{Rank: 8, Alpha: 16}, "no target modules"},
		{LoRAConfig{Rank: 8, Alpha: 16, Targets: []string{"lm_head"}}, `"lm_head" is not one of`},
	} {
		err := tc.c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.c, err, tc.want)
		}
	}
}
