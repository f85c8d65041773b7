package cuda

import (
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/model"
)

// qwen2Small is a small Qwen2-style architecture: q/k/v biases, grouped
// query attention, an explicit head size and Qwen2's RoPE base.
func qwen2Small() model.Config {
	return model.Config{Layers: 2, DModel: 64, Heads: 4, KVHeads: 2, HeadDim: 16, DFF: 160, Context: 128,
		VocabSize: 301, RopeTheta: 1e6, NormEps: 1e-6, AttnBias: true}
}

// testModel builds a model whose norms and biases are not the trivial
// init, so that their gradients are exercised too.
func testModel(t testing.TB, cfg model.Config, seed uint64) *model.Model {
	t.Helper()
	m, err := model.New(cfg, seed)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(seed, 3))
	for i := range m.Params {
		p := &m.Params[i]
		switch {
		case strings.HasSuffix(p.Name, "norm.weight"):
			for j := range p.W {
				p.W[j] = float32(1 + 0.2*r.NormFloat64())
			}
		case len(p.Shape) == 1:
			for j := range p.W {
				p.W[j] = float32(0.1 * r.NormFloat64())
			}
		default:
			for j := range p.W {
				p.W[j] = float32(0.08 * r.NormFloat64())
			}
		}
	}
	return m
}

func testBatch(r *rand.Rand, vocab int, lens, prompts []int, temp float32) model.Batch {
	b := model.Batch{Temperature: temp}
	for i, n := range lens {
		seq := make([]int, n)
		for j := range seq {
			seq[j] = r.IntN(vocab)
		}
		seq[n-1] = seq[0] // a repeated token accumulates into one embedding row
		b.Tokens = append(b.Tokens, seq)
		b.PromptLen = append(b.PromptLen, prompts[i])
	}
	return b
}

func randCot(r *rand.Rand, b model.Batch, scale float64) [][]float32 {
	cot := make([][]float32, len(b.Tokens))
	for i, s := range b.Tokens {
		cot[i] = make([]float32, len(s)-b.PromptLen[i])
		for j := range cot[i] {
			cot[i][j] = float32(scale * r.NormFloat64())
		}
	}
	return cot
}

// relErr is max|a−b| / max|b|: a tensor-wide relative error that near-zero
// elements do not blow up.
func relErr(a, b []float32) float64 {
	var diff, ref float64
	for i := range a {
		diff = math.Max(diff, math.Abs(float64(a[i])-float64(b[i])))
		ref = math.Max(ref, math.Abs(float64(b[i])))
	}
	if ref == 0 {
		return diff
	}
	return diff / ref
}

func flat(xs [][]float32) []float32 {
	var out []float32
	for _, x := range xs {
		out = append(out, x...)
	}
	return out
}

// TestEngineMatchesGorgonia runs the CPU device through the engine's
// orchestration (memory plan, micro-batches, chunked LM head, hand-written
// backward) and checks logprobs, entropies, every parameter's gradient
// and one clipped AdamW step against gorgonia's autodiff on the same
// weights.
func TestEngineMatchesGorgonia(t *testing.T) {
	const tol = 1e-4
	def := model.ConfigFrom(config.Default().Model)
	cases := []struct {
		name    string
		cfg     model.Config
		lens    []int
		prompts []int
		temp    float32
		opts    Options
	}{
		{"default", def, []int{40, 23, 61}, []int{30, 5, 50}, 0.9, Options{}},
		{"qwen2-bias-gqa", qwen2Small(), []int{17, 33, 8, 12}, []int{9, 1, 7, 3}, 1, Options{}},
		// Tiny micro-batches and head chunks: gradients accumulate across
		// micro-batches and logits never exist for all rows at once.
		{"qwen2-split", qwen2Small(), []int{17, 33, 8, 12}, []int{9, 1, 7, 3}, 0.7,
			Options{MicroTokens: 64, HeadRows: 5}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			ref := testModel(t, tc.cfg, 11)
			m := ref.Clone()
			tc.opts.Train = true
			e, err := NewEngine(testDevice(t), m, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			r := rand.New(rand.NewPCG(5, 5))
			b := testBatch(r, tc.cfg.VocabSize, tc.lens, tc.prompts, tc.temp)
			cot, ent := randCot(r, b, 1), randCot(r, b, 0.3)

			want, err := ref.Logprobs(ctx, b)
			if err != nil {
				t.Fatal(err)
			}
			got, err := e.Logprobs(ctx, b)
			if err != nil {
				t.Fatal(err)
			}
			if d := relErr(flat(got.Logprobs), flat(want.Logprobs)); d > tol {
				t.Errorf("logprobs: relative error %.2e", d)
			}
			if d := relErr(flat(got.Entropy), flat(want.Entropy)); d > tol {
				t.Errorf("entropy: relative error %.2e", d)
			}

			wantB, err := ref.BackwardEntropy(ctx, b, cot, ent)
			if err != nil {
				t.Fatal(err)
			}
			gotB, err := e.BackwardEntropy(ctx, b, cot, ent)
			if err != nil {
				t.Fatal(err)
			}
			if d := relErr(flat(gotB.Logprobs), flat(wantB.Logprobs)); d > tol {
				t.Errorf("backward logprobs: relative error %.2e", d)
			}
			grads := make([]float32, m.NumParams())
			if err := e.Grads(grads); err != nil {
				t.Fatal(err)
			}
			off := 0
			for _, p := range ref.Params {
				g := grads[off : off+len(p.G)]
				off += len(p.G)
				if d := relErr(g, p.G); d > tol {
					t.Errorf("gradient of %s: relative error %.2e", p.Name, d)
				}
			}

			// One AdamW step with clipping on both sides.
			oc := config.Default().Optim
			oc.WeightDecay = 0.1
			optRef, opt := model.NewAdamW(oc, ref.NumParams()), model.NewAdamW(oc, m.NumParams())
			const lr, clip = 1e-3, 0.5
			normRef := ref.ClipGradNorm(clip)
			if err := optRef.Update(ref, lr); err != nil {
				t.Fatal(err)
			}
			norm, err := e.Step(opt, lr, clip)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(norm-normRef) > tol*normRef {
				t.Errorf("grad norm %g, gorgonia %g", norm, normRef)
			}
			if normRef <= clip {
				t.Errorf("grad norm %g does not exercise clipping at %g", normRef, clip)
			}
			if err := e.Download(m, opt); err != nil {
				t.Fatal(err)
			}
			if d := relErr(m.Weights(), ref.Weights()); d > tol {
				t.Errorf("weights after AdamW: relative error %.2e", d)
			}
			mr, vr := optRef.State()
			mg, vg := opt.State()
			if d := relErr(mg, mr); d > tol {
				t.Errorf("AdamW first moment: relative error %.2e", d)
			}
			if d := relErr(vg, vr); d > 1e-3 { // squares of the gradients' own 1e-5 differences
				t.Errorf("AdamW second moment: relative error %.2e", d)
			}
			if err := e.Grads(grads); err != nil {
				t.Fatal(err)
			}
			for i, g := range grads {
				if g != 0 {
					t.Fatalf("gradient %d = %g after Step, want cleared", i, g)
				}
			}
		})
	}
}

// TestDeviceCheckConfigs: the config.json files the device check gives
// PyTorch describe the architectures the Go side benchmarks.
func TestDeviceCheckConfigs(t *testing.T) {
	cases := []struct {
		file string
		want model.Config
	}{
		{"qwen2.5-coder-0.5b.json", qwen05B()},
		{"qwen2.5-coder-1.5b.json", qwen15B()},
		{"default-model.json", model.ConfigFrom(config.Default().Model)},
	}
	for _, tc := range cases {
		b, err := os.ReadFile(filepath.Join("devicecheck", tc.file))
		if err != nil {
			t.Fatal(err)
		}
		var got model.Config
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		want := tc.want
		if strings.HasPrefix(tc.file, "qwen2.5-coder-") {
			want.Context = got.Context // the real model's 32768; the Go bench keeps 4096 of it
		}
		if want.HeadDim == 0 {
			want.HeadDim = want.DModel / want.Heads
		}
		if got != want {
			t.Errorf("%s: %+v, Go side benchmarks %+v", tc.file, got, want)
		}
	}
}
