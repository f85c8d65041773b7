package model

import (
	"context"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/swetui/swetui/config"
)

// TestAdamWMatchesReference checks two steps against the AdamW equations
// written out in float64 (torch.optim.AdamW semantics).
func TestAdamWMatchesReference(t *testing.T) {
	m := tinyModel(t, tinyConfig(), 1)
	c := config.Optim{LR: 1e-2, Beta1: 0.9, Beta2: 0.99, Eps: 1e-8, WeightDecay: 0.1}
	o := NewAdamW(c, m.NumParams())
	w0 := f64s(m.Weights())
	r := rand.New(rand.NewPCG(1, 1))
	grads := [2][]float64{}
	mom, vel := make([]float64, len(w0)), make([]float64, len(w0))
	want := append([]float64(nil), w0...)
	decay := make([]bool, len(w0))
	off := 0
	for _, p := range m.Params {
		for i := range p.W {
			decay[off+i] = p.Decay
		}
		off += len(p.W)
	}
	for s := 0; s < 2; s++ {
		grads[s] = make([]float64, len(w0))
		for i := range m.Grads() {
			g := float32(r.NormFloat64())
			m.Grads()[i] = g
			grads[s][i] = float64(g)
		}
		if err := o.Update(m, c.LR); err != nil {
			t.Fatal(err)
		}
		for i := range want {
			g := grads[s][i]
			if decay[i] {
				want[i] *= 1 - c.LR*c.WeightDecay
			}
			mom[i] = 0.9*mom[i] + 0.1*g
			vel[i] = 0.99*vel[i] + 0.01*g*g
			mh := mom[i] / (1 - math.Pow(0.9, float64(s+1)))
			vh := vel[i] / (1 - math.Pow(0.99, float64(s+1)))
			want[i] -= c.LR * mh / (math.Sqrt(vh) + 1e-8)
		}
	}
	for i, w := range m.Weights() {
		if math.Abs(float64(w)-want[i]) > 1e-5 {
			t.Fatalf("weight %d = %v, want %v", i, w, want[i])
		}
	}
	if err := NewAdamW(c, 3).Update(m, 1); err == nil {
		t.Fatal("Update with a mismatched optimiser succeeded")
	}
}

func TestClipGradNorm(t *testing.T) {
	cases := []struct{ max, wantNorm, wantAfter float64 }{
		{1, 5, 1}, {10, 5, 5}, {0, 5, 5},
	}
	for _, tc := range cases {
		m := tinyModel(t, tinyConfig(), 1)
		m.ZeroGrad()
		m.Grads()[0], m.Grads()[1] = 3, 4
		if got := m.ClipGradNorm(tc.max); math.Abs(got-tc.wantNorm) > 1e-9 {
			t.Errorf("max %v: norm %v, want %v", tc.max, got, tc.wantNorm)
		}
		if after := m.ClipGradNorm(0); math.Abs(after-tc.wantAfter) > 1e-5 {
			t.Errorf("max %v: norm after clipping %v, want %v", tc.max, after, tc.wantAfter)
		}
	}
}

func TestSchedule(t *testing.T) {
	cases := []struct {
		kind string
		step int
		want float64
	}{
		{"constant", 0, 0.25}, {"constant", 3, 1}, {"constant", 100, 1},
		{"cosine", 4, 1}, {"cosine", 52, 0.5}, {"cosine", 100, 0}, {"cosine", 500, 0},
	}
	for _, tc := range cases {
		s, err := NewSchedule(config.Optim{LR: 1, Warmup: 4, Schedule: tc.kind}, 100)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.At(tc.step); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s step %d: lr %v, want %v", tc.kind, tc.step, got, tc.want)
		}
	}
	if _, err := NewSchedule(config.Optim{Schedule: "linear"}, 10); err == nil {
		t.Error("unknown schedule accepted")
	}
}

// TestTrainingLearnsAndMemoryIsFlat overfits a tiny model on one batch with
// the SFT cotangent, and checks that the heap does not grow over many steps
// (graphs are compiled once per bucket and re-bound, never rebuilt).
func TestTrainingLearnsAndMemoryIsFlat(t *testing.T) {
	m, err := New(tinyConfig(), 1)
	if err != nil {
		t.Fatal(err)
	}
	o := NewAdamW(config.Optim{Beta1: 0.9, Beta2: 0.99, Eps: 1e-8}, m.NumParams())
	r := rand.New(rand.NewPCG(3, 3))
	b := testBatch(r, m.Cfg.VocabSize, []int{20, 33, 12}, []int{4, 8, 2})
	cot := make([][]float32, len(b.Tokens))
	ntok := 0
	for i, s := range b.Tokens {
		ntok += len(s) - b.PromptLen[i]
	}
	for i, s := range b.Tokens {
		for range len(s) - b.PromptLen[i] {
			cot[i] = append(cot[i], -1/float32(ntok))
		}
	}
	nll := func(res *Result) float64 {
		var s float64
		for _, lp := range res.Logprobs {
			for _, v := range lp {
				s -= float64(v)
			}
		}
		return s / float64(ntok)
	}
	steps := 1000
	if testing.Short() {
		steps = 200
	}
	var first, last float64
	var heapAt [2]uint64
	for step := 0; step < steps; step++ {
		m.ZeroGrad()
		res, err := m.Backward(context.Background(), b, cot)
		if err != nil {
			t.Fatal(err)
		}
		m.ClipGradNorm(1)
		if err := o.Update(m, 3e-3); err != nil {
			t.Fatal(err)
		}
		if step == 0 {
			first = nll(res)
		}
		last = nll(res)
		if step == 100 || step == steps-1 {
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			heapAt[min(1, step/101)] = ms.HeapAlloc
		}
	}
	if last > first/10 {
		t.Errorf("NLL went from %.3f to %.3f; want it below a tenth", first, last)
	}
	if heapAt[1] > heapAt[0]+4<<20 {
		t.Errorf("heap grew from %d to %d bytes between step 100 and %d", heapAt[0], heapAt[1], steps)
	}
	t.Logf("NLL %.3f -> %.3f over %d steps; heap %d -> %d bytes", first, last, steps, heapAt[0], heapAt[1])
}

var lrTest = 5e-3

func TestGraphCacheIsBounded(t *testing.T) {
	m := tinyModel(t, tinyConfig(), 1)
	m.MicroBatch = 4
	ctx := context.Background()
	var first *Result
	for round := 0; round < 2; round++ {
		for _, n := range []int{1, 2, 3, 4} {
			for _, l := range []int{5, 40, 64} {
				lens, pls := make([]int, n), make([]int, n)
				for i := range lens {
					lens[i], pls[i] = l, 2
				}
				b := testBatch(rand.New(rand.NewPCG(uint64(n), uint64(l))), m.Cfg.VocabSize, lens, pls)
				res, err := m.Logprobs(ctx, b)
				if err != nil {
					t.Fatal(err)
				}
				if n == 1 && l == 5 {
					if first == nil {
						first = res
					} else if !equalF32(first.Logprobs[0], res.Logprobs[0]) {
						t.Error("a rebuilt bucket gives different logprobs")
					}
				}
				if _, err := m.Backward(ctx, b, nllCotangent(b)); err != nil {
					t.Fatal(err)
				}
				if len(m.graphs) > maxGraphs {
					t.Fatalf("%d graphs cached; want at most %d", len(m.graphs), maxGraphs)
				}
			}
		}
	}
}

// nllCotangent is the Backward cotangent of the mean negative
// log-likelihood of b's completion tokens: −1/num_tokens each (the tests'
// supervised loss; train.sftBatch is the product's).
func nllCotangent(b Batch) [][]float32 {
	n := 0
	for i, s := range b.Tokens {
		n += len(s) - b.PromptLen[i]
	}
	cot := make([][]float32, len(b.Tokens))
	for i, s := range b.Tokens {
		cot[i] = make([]float32, len(s)-b.PromptLen[i])
		for j := range cot[i] {
			cot[i][j] = -1 / float32(n)
		}
	}
	return cot
}
