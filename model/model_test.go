package model

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func tinyConfig() Config {
	return Config{Layers: 2, DModel: 16, Heads: 4, KVHeads: 2, DFF: 24, Context: 64, VocabSize: 37, RopeTheta: 10000, NormEps: 1e-6}
}

func tinyModel(t testing.TB, cfg Config, seed uint64) *Model {
	t.Helper()
	m, err := New(cfg, seed)
	if err != nil {
		t.Fatal(err)
	}
	// Larger-than-default weights so gradients are not all tiny.
	r := rand.New(rand.NewPCG(seed, 7))
	for i := range m.Params {
		p := &m.Params[i]
		if len(p.Shape) == 1 {
			for j := range p.W {
				p.W[j] = float32(1 + 0.3*r.NormFloat64())
				if !isNorm(p.Name) {
					p.W[j] = float32(0.2 * r.NormFloat64())
				}
			}
			continue
		}
		for j := range p.W {
			p.W[j] = float32(r.NormFloat64() * 0.3)
		}
	}
	return m
}

func testBatch(r *rand.Rand, vocab int, lens, prompts []int) Batch {
	b := Batch{}
	for i, n := range lens {
		seq := make([]int, n)
		for j := range seq {
			seq[j] = r.IntN(vocab)
		}
		seq[n-1] = seq[0] // repeated tokens exercise gradient accumulation in the embedding
		b.Tokens = append(b.Tokens, seq)
		b.PromptLen = append(b.PromptLen, prompts[i])
	}
	return b
}

func TestForwardMatchesFloat64Reference(t *testing.T) {
	cases := []struct {
		name string
		cfg  func(*Config)
		temp float32
	}{
		{"gqa", func(*Config) {}, 0},
		{"mha-bias-temp", func(c *Config) { c.KVHeads = 4; c.AttnBias = true }, 0.7},
		{"mqa", func(c *Config) { c.KVHeads = 1 }, 1.3},
		{"mqa-attn-blocks", func(c *Config) { c.KVHeads = 1 }, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if strings.HasSuffix(tc.name, "attn-blocks") {
				defer func(old int) { attnBlock = old }(attnBlock)
				attnBlock = 7 // query blocks shorter than the 32-token bucket
			}
			cfg := tinyConfig()
			tc.cfg(&cfg)
			m := tinyModel(t, cfg, 1)
			r := rand.New(rand.NewPCG(2, 2))
			b := testBatch(r, cfg.VocabSize, []int{9, 20, 5}, []int{3, 1, 4})
			b.Temperature = tc.temp
			res, err := m.Logprobs(context.Background(), b)
			if err != nil {
				t.Fatal(err)
			}
			ref := newRef64(m)
			temp := float64(tc.temp)
			if temp == 0 {
				temp = 1
			}
			for i, seq := range b.Tokens {
				z := ref.logits(seq, 1, len(seq))
				tg := make([]int, len(seq))
				for j := range tg {
					tg[j] = -1
				}
				for j := b.PromptLen[i]; j < len(seq); j++ {
					tg[j-1] = seq[j]
				}
				lp, ent := logprob64(z, tg, cfg.VocabSize, temp)
				for j := b.PromptLen[i]; j < len(seq); j++ {
					k := j - b.PromptLen[i]
					if d := math.Abs(float64(res.Logprobs[i][k]) - lp[j-1]); d > 1e-4 {
						t.Errorf("seq %d tok %d: logprob %v, reference %v", i, k, res.Logprobs[i][k], lp[j-1])
					}
					if d := math.Abs(float64(res.Entropy[i][k]) - ent[j-1]); d > 1e-4 {
						t.Errorf("seq %d tok %d: entropy %v, reference %v", i, k, res.Entropy[i][k], ent[j-1])
					}
				}
			}
		})
	}
}

// TestModelGradientFiniteDifference checks Backward's gradient of
// Σ cot·logprob against central differences of the float64 reference, on a
// sample of entries of every parameter.
func TestModelGradientFiniteDifference(t *testing.T) {
	for _, bias := range []bool{false, true} {
		cfg := tinyConfig()
		cfg.AttnBias = bias
		m := tinyModel(t, cfg, 3)
		m.MicroBatch = 2 // buckets B=2 and B=1
		if !bias {
			m.MicroBatch = 4 // one bucket of B=4 with an empty padding row
		}
		r := rand.New(rand.NewPCG(4, 4))
		b := testBatch(r, cfg.VocabSize, []int{7, 12, 10}, []int{2, 5, 1})
		b.Temperature = 0.8
		cot := make([][]float32, len(b.Tokens))
		for i, seq := range b.Tokens {
			for range len(seq) - b.PromptLen[i] {
				cot[i] = append(cot[i], float32(r.NormFloat64()))
			}
		}
		m.ZeroGrad()
		bres, err := m.Backward(context.Background(), b, cot)
		if err != nil {
			t.Fatal(err)
		}
		// Backward returns the same values as the forward-only pass.
		fres, err := m.Logprobs(context.Background(), b)
		if err != nil {
			t.Fatal(err)
		}
		for i := range fres.Logprobs {
			if !equalF32(bres.Logprobs[i], fres.Logprobs[i]) || !equalF32(bres.Entropy[i], fres.Entropy[i]) {
				t.Fatalf("sequence %d: Backward returned %v / %v, Logprobs %v / %v", i,
					bres.Logprobs[i], bres.Entropy[i], fres.Logprobs[i], fres.Entropy[i])
			}
		}
		ref := newRef64(m)
		const h = 1e-5
		checked := 0
		for _, p := range m.Params {
			w := ref.w[p.Name]
			for range 4 {
				j := r.IntN(len(w))
				orig := w[j]
				w[j] = orig + h
				up := ref.objective(b, cot)
				w[j] = orig - h
				down := ref.objective(b, cot)
				w[j] = orig
				fd := (up - down) / (2 * h)
				got := float64(p.G[j])
				if math.Abs(got-fd) > 2e-3+2e-3*math.Abs(fd) {
					t.Errorf("bias=%v %s[%d]: gradient %.6g, finite difference %.6g", bias, p.Name, j, got, fd)
				}
				checked++
			}
		}
		t.Logf("bias=%v: checked %d gradient entries", bias, checked)
	}
}

// MicroTokens splits a batch into graphs of fewer sequences at long
// lengths; the logprobs and the accumulated gradients are those of one graph.
func TestMicroTokensSplitsLongBatches(t *testing.T) {
	for _, tc := range []struct {
		batch, tokens, T, want int
	}{
		{4, 0, 8192, 4}, {4, 16384, 1024, 4}, {4, 16384, 4096, 4}, {4, 16384, 8192, 2},
		{4, 8192, 8192, 1}, {4, 1000, 8192, 1}, {1, 16384, 64, 1},
	} {
		m := &Model{MicroBatch: tc.batch, MicroTokens: tc.tokens}
		if got := m.perGraph(tc.T); got != tc.want {
			t.Errorf("MicroBatch %d, MicroTokens %d, T %d: %d sequences a graph, want %d", tc.batch, tc.tokens, tc.T, got, tc.want)
		}
	}
	cfg := tinyConfig()
	r := rand.New(rand.NewPCG(7, 7))
	b := testBatch(r, cfg.VocabSize, []int{7, 40, 12, 33, 10}, []int{2, 5, 1, 9, 3})
	cot := make([][]float32, len(b.Tokens))
	for i, seq := range b.Tokens {
		for range len(seq) - b.PromptLen[i] {
			cot[i] = append(cot[i], float32(r.NormFloat64()))
		}
	}
	run := func(microTokens int) (*Result, []float32) {
		m := tinyModel(t, cfg, 5)
		m.MicroBatch, m.MicroTokens = 4, microTokens
		res, err := m.Backward(context.Background(), b, cot)
		if err != nil {
			t.Fatal(err)
		}
		return res, slices.Clone(m.Grads())
	}
	whole, gw := run(0)
	split, gs := run(64) // buckets of 32 go two a graph, of 64 one
	for i := range whole.Logprobs {
		for k, v := range whole.Logprobs[i] {
			if d := math.Abs(float64(v - split.Logprobs[i][k])); d > 1e-5 {
				t.Errorf("sequence %d token %d: logprob %v split, %v whole", i, k, split.Logprobs[i][k], v)
			}
		}
	}
	for i, g := range gw {
		if d := math.Abs(float64(g - gs[i])); d > 1e-5+1e-4*math.Abs(float64(g)) {
			t.Fatalf("gradient %d: %v split, %v whole", i, gs[i], g)
		}
	}
}
