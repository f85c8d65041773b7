package model

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
)

// TestSamplerMatchesTrainingGraph: behaviour logprobs from the KV-cache
// decoder equal what the training graph recomputes for the same tokens, at
// the same temperature, also after the weights change under a compiled graph.
func TestSamplerMatchesTrainingGraph(t *testing.T) {
	cases := []struct {
		name string
		cfg  func(*Config)
		opts SampleOptions
	}{
		{"temp0.8-topp0.9", func(*Config) {}, SampleOptions{Temperature: 0.8, TopP: 0.9, MaxNewTokens: 20}},
		{"temp1-bias", func(c *Config) { c.AttnBias = true }, SampleOptions{Temperature: 1, MaxNewTokens: 15}},
		{"greedy-mqa", func(c *Config) { c.KVHeads = 1 }, SampleOptions{MaxNewTokens: 10}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tinyConfig()
			tc.cfg(&cfg)
			m := tinyModel(t, cfg, 5)
			for round := 0; round < 2; round++ {
				prompt := []int{1, 5, 9, 2, 7, 7, 3}
				tc.opts.Rand = rand.New(rand.NewPCG(uint64(round), 9))
				comps, err := m.Sample(context.Background(), prompt, 4, tc.opts)
				if err != nil {
					t.Fatal(err)
				}
				b := Batch{Temperature: tc.opts.Temperature}
				for _, c := range comps {
					if len(c.Tokens) != len(c.Logprobs) || len(c.Tokens) == 0 {
						t.Fatalf("completion has %d tokens and %d logprobs", len(c.Tokens), len(c.Logprobs))
					}
					b.Tokens = append(b.Tokens, append(append([]int(nil), prompt...), c.Tokens...))
					b.PromptLen = append(b.PromptLen, len(prompt))
				}
				res, err := m.Logprobs(context.Background(), b)
				if err != nil {
					t.Fatal(err)
				}
				var worst float64
				for i, c := range comps {
					for j, lp := range c.Logprobs {
						worst = math.Max(worst, math.Abs(float64(lp-res.Logprobs[i][j])))
					}
				}
				if worst > 1e-4 {
					t.Errorf("round %d: sampler and graph logprobs differ by %g", round, worst)
				}
				t.Logf("round %d: max |Δ logprob| = %.2g", round, worst)
				// Change the weights in place: the compiled graph must see it.
				for i := range m.Weights() {
					m.Weights()[i] *= 1.05
				}
			}
		})
	}
}

func TestSampleStopsAndTruncates(t *testing.T) {
	m := tinyModel(t, tinyConfig(), 6)
	ctx := context.Background()
	prompt := []int{3, 4, 5}
	greedy, err := m.Sample(ctx, prompt, 2, SampleOptions{MaxNewTokens: 8})
	if err != nil {
		t.Fatal(err)
	}
	if len(greedy[0].Tokens) != 8 || !greedy[0].Truncated {
		t.Fatalf("greedy completion: %d tokens, truncated=%v; want 8, true", len(greedy[0].Tokens), greedy[0].Truncated)
	}
	if !equalInts(greedy[0].Tokens, greedy[1].Tokens) {
		t.Fatalf("greedy completions differ: %v vs %v", greedy[0].Tokens, greedy[1].Tokens)
	}
	stopTok := greedy[0].Tokens[3]
	first := 0
	for first < len(greedy[0].Tokens) && greedy[0].Tokens[first] != stopTok {
		first++
	}
	stopped, err := m.Sample(ctx, prompt, 1, SampleOptions{MaxNewTokens: 8, Stop: []int{stopTok}})
	if err != nil {
		t.Fatal(err)
	}
	c := stopped[0]
	if c.Truncated || len(c.Tokens) != first+1 || c.Tokens[first] != stopTok {
		t.Fatalf("with stop %d: %v truncated=%v; want to end at index %d", stopTok, c.Tokens, c.Truncated, first)
	}
	// The context bounds a completion too.
	long := make([]int, m.Cfg.Context-2)
	c2, err := m.Sample(ctx, long, 1, SampleOptions{MaxNewTokens: 50})
	if err != nil {
		t.Fatal(err)
	}
	if len(c2[0].Tokens) != 2 || !c2[0].Truncated {
		t.Fatalf("at the context edge: %d tokens, truncated=%v; want 2, true", len(c2[0].Tokens), c2[0].Truncated)
	}
	for _, bad := range []struct {
		prompt []int
		n      int
	}{{nil, 1}, {[]int{m.Cfg.VocabSize}, 1}, {[]int{1}, 0}, {make([]int, m.Cfg.Context), 1}} {
		if _, err := m.Sample(ctx, bad.prompt, bad.n, SampleOptions{}); err == nil {
			t.Errorf("Sample(prompt len %d, n=%d) succeeded; want an error", len(bad.prompt), bad.n)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := m.Sample(cctx, prompt, 2, SampleOptions{}); err == nil {
		t.Error("Sample with a cancelled context succeeded")
	}
}

func TestTopPSamplesOnlyFromNucleus(t *testing.T) {
	s := newSampler(4)
	logits := []float32{3, 2, 0, -1} // p ≈ .66 .24 .03 .01... top-p .8 keeps {0,1}
	r := rand.New(rand.NewPCG(1, 2))
	seen := map[int]int{}
	for range 2000 {
		tok, lp := s.draw(logits, SampleOptions{Temperature: 1, TopP: 0.8, Rand: r})
		seen[tok]++
		want, _, _ := rowLogprob(logits, tok, 1, make([]float32, 4))
		if math.Abs(float64(lp)-want) > 1e-6 {
			t.Fatalf("logprob of %d = %v, want full-distribution %v", tok, lp, want)
		}
	}
	if seen[2]+seen[3] > 0 || seen[0] == 0 || seen[1] == 0 {
		t.Fatalf("top-p 0.8 drew %v; want only tokens 0 and 1", seen)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
