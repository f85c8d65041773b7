package cuda

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/swetui/swetui/model"
)

// TestSampleMatchesModel: greedy decoding picks model.Sample's tokens, and
// the behaviour logprobs of temperature/top-p samples are what the
// training forward (engine and gorgonia) computes for them.
func TestSampleMatchesModel(t *testing.T) {
	ctx := context.Background()
	for _, cfg := range []model.Config{qwen2Small(), func() model.Config {
		c := qwen2Small()
		c.AttnBias, c.KVHeads, c.HeadDim = false, 1, 0 // MQA, derived head size
		return c
	}()} {
		ref := testModel(t, cfg, 21)
		e, err := NewEngine(testDevice(t), ref, Options{})
		if err != nil {
			t.Fatal(err)
		}
		prompt := []int{5, 17, 3, 99, 42, 7, 7, 1, 250, 13, 8, 64}
		want, err := ref.Sample(ctx, prompt, 2, model.SampleOptions{MaxNewTokens: 20})
		if err != nil {
			t.Fatal(err)
		}
		got, err := e.Sample(ctx, prompt, 3, model.SampleOptions{MaxNewTokens: 20})
		if err != nil {
			t.Fatal(err)
		}
		for i := range got {
			if !slices.Equal(got[i].Tokens, want[0].Tokens) {
				t.Fatalf("greedy completion %d: %v, model %v", i, got[i].Tokens, want[0].Tokens)
			}
			if d := relErr(got[i].Logprobs, want[0].Logprobs); d > 1e-4 {
				t.Errorf("greedy logprobs: relative error %.2e", d)
			}
		}

		const temp = 0.8
		samples, err := e.Sample(ctx, prompt, 4, model.SampleOptions{Temperature: temp, TopP: 0.9, MaxNewTokens: 16,
			Rand: rand.New(rand.NewPCG(3, 4))})
		if err != nil {
			t.Fatal(err)
		}
		b := model.Batch{Temperature: temp}
		var behaviour []float32
		for _, s := range samples {
			b.Tokens = append(b.Tokens, append(slices.Clone(prompt), s.Tokens...))
			b.PromptLen = append(b.PromptLen, len(prompt))
			behaviour = append(behaviour, s.Logprobs...)
		}
		if slices.Equal(samples[0].Tokens, samples[1].Tokens) && slices.Equal(samples[1].Tokens, samples[2].Tokens) {
			t.Errorf("three samples at temperature %g are equal: %v", temp, samples[0].Tokens)
		}
		for name, lp := range map[string]func() (*model.Result, error){
			"engine":   func() (*model.Result, error) { return e.Logprobs(ctx, b) },
			"gorgonia": func() (*model.Result, error) { return ref.Logprobs(ctx, b) },
		} {
			res, err := lp()
			if err != nil {
				t.Fatal(err)
			}
			if d := relErr(behaviour, flat(res.Logprobs)); d > 1e-4 {
				t.Errorf("behaviour logprobs vs %s forward: relative error %.2e", name, d)
			}
		}
		e.Close()
	}
}

func TestSampleStopsAndTruncates(t *testing.T) {
	ctx := context.Background()
	ref := testModel(t, qwen2Small(), 21)
	e, err := NewEngine(testDevice(t), ref, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	prompt := []int{5, 17, 3}
	greedy, err := e.Sample(ctx, prompt, 1, model.SampleOptions{MaxNewTokens: 12})
	if err != nil {
		t.Fatal(err)
	}
	if g := greedy[0]; len(g.Tokens) != 12 || !g.Truncated {
		t.Fatalf("max_new_tokens=12: %d tokens, truncated %v", len(g.Tokens), g.Truncated)
	}
	stopAt := greedy[0].Tokens[4]
	first := slices.Index(greedy[0].Tokens, stopAt)
	got, err := e.Sample(ctx, prompt, 2, model.SampleOptions{MaxNewTokens: 12, Stop: []int{stopAt}})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range got {
		if len(g.Tokens) != first+1 || g.Truncated || g.Tokens[first] != stopAt {
			t.Errorf("stop %d: got %v truncated %v, want the first %d greedy tokens", stopAt, g.Tokens, g.Truncated, first+1)
		}
	}
	// A prompt one short of the context has room for one token.
	long := make([]int, ref.Cfg.Context-1)
	got, err = e.Sample(ctx, long, 2, model.SampleOptions{Temperature: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(got[0].Tokens) != 1 || !got[0].Truncated {
		t.Errorf("full context: %d tokens, truncated %v", len(got[0].Tokens), got[0].Truncated)
	}
	if _, err := e.Sample(ctx, make([]int, ref.Cfg.Context), 1, model.SampleOptions{}); err == nil {
		t.Error("a prompt filling the context was accepted")
	}
}

// TestSampleTokens checks the sampling kernel's contract on one row:
// inverse CDF in vocab order over the top-p set, full-vocabulary logprobs.
func TestSampleTokens(t *testing.T) {
	logits := []float32{1, 3, 0, 2.5, -1} // p ≈ .085 .52 .031 .31 .011
	// want is the definition's answer (inverseCDF); the cases walk u across
	// the kept tokens' CDF with top-p off, loose and tight, and at three
	// temperatures.
	cases := []struct {
		name          string
		invT, topP, u float32
	}{
		{"greedy", 0, 1, 0.9},
		{"greedy-ignores-top-p", 0, 0.5, 0.1},
		{"first", 1, 1, 0.01},
		{"second", 1, 1, 0.5},
		{"third", 1, 1, 0.62},
		{"fourth", 1, 1, 0.9},
		{"last", 1, 1, 0.999},
		{"top-p-zero-is-off", 1, 0, 0.01},
		{"nucleus-low", 1, 0.8, 0.01},
		{"nucleus-mid", 1, 0.8, 0.62},
		{"nucleus-mid2", 1, 0.8, 0.64},
		{"nucleus-high", 1, 0.8, 0.99},
		{"nucleus-one", 1, 0.3, 0.99},
		{"cold", 4, 0.95, 0.999},
		{"hot", 0.25, 1, 0.999},
	}
	cpu := NewCPU()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			z, tok, lp, u := mustAlloc(t, cpu, F32, 5), mustAlloc(t, cpu, I32, 1), mustAlloc(t, cpu, F32, 1), mustAlloc(t, cpu, F32, 1)
			copy(z.f32(), logits)
			u.f32()[0] = tc.u
			cpu.SampleTokens(tok, lp, z, u, 1, 5, tc.invT, tc.topP)
			// The expected token by the definition, in float64.
			it := float64(tc.invT)
			if it == 0 {
				it = 1
			}
			var lse float64
			for _, x := range logits {
				lse += math.Exp(float64(x) * it)
			}
			lse = math.Log(lse)
			want := 1 // argmax
			if tc.invT > 0 {
				want = inverseCDF(logits, it, lse, tc.topP, tc.u)
			}
			got := int(tok.i32()[0])
			if got != want {
				t.Fatalf("token %d, want %d", got, want)
			}
			if wl := float64(logits[got])*it - lse; math.Abs(float64(lp.f32()[0])-wl) > 1e-6 {
				t.Errorf("logprob %g, want %g", lp.f32()[0], wl)
			}
		})
	}
}

// inverseCDF is SampleTokens' definition, spelt out.
func inverseCDF(z []float32, invT, lse float64, topP, u float32) int {
	p := make([]float64, len(z))
	for i, x := range z {
		p[i] = math.Exp(float64(x)*invT - lse)
	}
	keep := make([]bool, len(z))
	if topP <= 0 || topP >= 1 {
		for i := range keep {
			keep[i] = true
		}
	} else {
		idx := []int{0, 1, 2, 3, 4}[:len(z)]
		slices.SortFunc(idx, func(a, b int) int {
			if p[a] > p[b] {
				return -1
			}
			return 1
		})
		var cum float64
		for _, i := range idx {
			keep[i] = true
			if cum += p[i]; cum >= float64(topP) {
				break
			}
		}
	}
	var mass float64
	for i, k := range keep {
		if k {
			mass += p[i]
		}
	}
	target, cum := float64(u)*mass, 0.0
	for i, k := range keep {
		if k {
			if cum += p[i]; cum > target {
				return i
			}
		}
	}
	return -1
}

func mustAlloc(t *testing.T, d Device, dt DType, n int) Tensor {
	t.Helper()
	x, err := d.Alloc(dt, n)
	if err != nil {
		t.Fatal(err)
	}
	return x
}
