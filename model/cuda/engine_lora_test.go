package cuda

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/model"
)

// testLoRA is rank-4 adapters on every projection with B drawn non-zero,
// so that both A's and B's gradients are exercised.
func testLoRA(t testing.TB, m *model.Model, targets []string) *model.LoRA {
	t.Helper()
	l, err := model.NewLoRA(m, model.LoRAConfig{Rank: 4, Alpha: 8, Targets: targets}, 3)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(9, 9))
	for i := 1; i < len(l.Params); i += 2 {
		for j := range l.Params[i].W {
			l.Params[i].W[j] = float32(0.05 * r.NormFloat64())
		}
	}
	return l
}

// TestLoRAEngineMatchesMergedGorgonia checks the engine's LoRA path
// against its CPU oracle: gorgonia's autodiff of the merged weights
// W + s·A·B, with the adapters' gradients from the chain rule
// (model.LoRA.AdapterGrads). Logprobs, the adapters' gradients, one
// clipped AdamW step on the adapters, the frozen base and the reference
// (adapters off) must all agree.
func TestLoRAEngineMatchesMergedGorgonia(t *testing.T) {
	const tol = 1e-4
	cases := []struct {
		name    string
		targets []string
		opts    Options
	}{
		{"all-linear", model.LoRATargets, Options{}},
		{"q-v-split", []string{"q_proj", "v_proj"}, Options{MicroTokens: 64, HeadRows: 5}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			base := testModel(t, qwen2Small(), 11)
			l := testLoRA(t, base, tc.targets)
			merged := base.Clone()
			if err := l.Merge(merged, base); err != nil {
				t.Fatal(err)
			}
			tc.opts.Train, tc.opts.LoRA = true, l
			e, err := NewEngine(testDevice(t), base.Clone(), tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			r := rand.New(rand.NewPCG(5, 5))
			b := testBatch(r, base.Cfg.VocabSize, []int{17, 33, 8, 12}, []int{9, 1, 7, 3}, 0.8)
			cot := randCot(r, b, 1)

			wantB, err := merged.Backward(ctx, b, cot)
			if err != nil {
				t.Fatal(err)
			}
			gotB, err := e.Backward(ctx, b, cot)
			if err != nil {
				t.Fatal(err)
			}
			if d := relErr(flat(gotB.Logprobs), flat(wantB.Logprobs)); d > tol {
				t.Errorf("logprobs: relative error %.2e", d)
			}
			want := l.Clone()
			if err := want.AdapterGrads(merged); err != nil {
				t.Fatal(err)
			}
			got := make([]float32, l.NumParams())
			if err := e.Grads(got); err != nil {
				t.Fatal(err)
			}
			off := 0
			for _, p := range want.Params {
				g := got[off : off+len(p.G)]
				off += len(p.G)
				if d := relErr(g, p.G); d > tol {
					t.Errorf("gradient of %s: relative error %.2e", p.Name, d)
				}
			}

			// The reference is the base: the adapters off.
			baseLP, err := base.Logprobs(ctx, b)
			if err != nil {
				t.Fatal(err)
			}
			refLP, err := e.LogprobsBase(ctx, b)
			if err != nil {
				t.Fatal(err)
			}
			if d := relErr(flat(refLP.Logprobs), flat(baseLP.Logprobs)); d > tol {
				t.Errorf("reference logprobs: relative error %.2e", d)
			}

			// One clipped AdamW step moves the adapters only.
			oc := config.Default().Optim
			oc.WeightDecay = 0.1
			const lr, clip = 1e-3, 0.5
			optRef, opt := model.NewAdamW(oc, l.NumParams()), model.NewAdamW(oc, l.NumParams())
			normRef := want.ClipGradNorm(clip)
			if err := optRef.UpdateParams(want.Params, want.NumParams(), lr); err != nil {
				t.Fatal(err)
			}
			norm, err := e.Step(opt, lr, clip)
			if err != nil {
				t.Fatal(err)
			}
			if d := (norm - normRef) / normRef; d > tol || d < -tol {
				t.Errorf("grad norm %g, oracle %g", norm, normRef)
			}
			after := l.Clone()
			if err := e.DownloadLoRA(after, opt); err != nil {
				t.Fatal(err)
			}
			if d := relErr(after.Weights(), want.Weights()); d > tol {
				t.Errorf("adapters after AdamW: relative error %.2e", d)
			}
			frozen := base.Clone()
			if err := e.Download(frozen, nil); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(frozen.Weights(), base.Weights()) {
				t.Error("the base weights moved")
			}
		})
	}
}

// TestLoRAPolicySamplesAsMerged: a LoRA policy's sampler (prefill and KV
// cache decode through the adapters) and its snapshot draw the same
// tokens as the full engine on the merged weights, and its reference
// scores as the base.
func TestLoRAPolicySamplesAsMerged(t *testing.T) {
	ctx := context.Background()
	base := testModel(t, qwen2Small(), 21)
	l := testLoRA(t, base, model.LoRATargets)
	merged := base.Clone()
	if err := l.Merge(merged, base); err != nil {
		t.Fatal(err)
	}
	oc := config.Default().Optim
	sched, err := model.NewSchedule(oc, 10)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPolicy(testDevice(t), base.Clone(), Options{Act: F32, LoRA: l}, model.NewAdamW(oc, l.NumParams()), sched, 0, nil, 7)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	full, err := NewEngine(testDevice(t), merged, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer full.Close()
	prompt := []int{5, 17, 42, 99, 3, 250, 8}
	opts := func(seed uint64) model.SampleOptions {
		return model.SampleOptions{Temperature: 1, TopP: 1, MaxNewTokens: 12, Rand: rand.New(rand.NewPCG(seed, 1))}
	}
	want, err := full.Sample(ctx, prompt, 3, opts(4))
	if err != nil {
		t.Fatal(err)
	}
	got, err := p.Sample(ctx, prompt, 3, opts(4))
	if err != nil {
		t.Fatal(err)
	}
	p.StartSnapshots()
	snap, _, err := p.SampleSnapshot(ctx, prompt, 3, opts(4))
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if !slices.Equal(got[i].Tokens, want[i].Tokens) {
			t.Errorf("completion %d: LoRA %v, merged %v", i, got[i].Tokens, want[i].Tokens)
		}
		if !slices.Equal(snap[i].Tokens, want[i].Tokens) {
			t.Errorf("snapshot completion %d: %v, merged %v", i, snap[i].Tokens, want[i].Tokens)
		}
	}
	b := model.Batch{Tokens: [][]int{append(slices.Clone(prompt), want[0].Tokens...)}, PromptLen: []int{len(prompt)}, Temperature: 1}
	refLP, err := BaseReference(p, 1).Logprobs(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	baseLP, err := base.Logprobs(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if d := relErr(flat(refLP), flat(baseLP.Logprobs)); d > 1e-4 {
		t.Errorf("reference logprobs: relative error %.2e", d)
	}
}

// TestEngineStreamsWeightsFromFiles: an engine given a model.Layout reads
// its weights from the checkpoint's files one tensor at a time (bf16
// shards here) and computes what the fully loaded model computes.
func TestEngineStreamsWeightsFromFiles(t *testing.T) {
	ctx := context.Background()
	m := testModel(t, qwen2Small(), 4)
	dir := t.TempDir()
	if err := model.Save(dir, model.Checkpoint{Model: m, Format: model.Format{Dtype: model.BF16, MaxShard: int64(m.NumParams())}}); err != nil {
		t.Fatal(err)
	}
	full, err := model.Load(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	w, err := model.OpenWeights(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	layout, err := model.Layout(w.Cfg)
	if err != nil {
		t.Fatal(err)
	}
	if layout.HasWeights() || layout.NumParams() != full.Model.NumParams() {
		t.Fatalf("layout: weights %v, %d params, want none and %d", layout.HasWeights(), layout.NumParams(), full.Model.NumParams())
	}
	e, err := NewEngine(testDevice(t), layout, Options{Act: F32, Source: w})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	got := full.Model.Clone()
	if err := e.Download(got, nil); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Weights(), full.Model.Weights()) {
		t.Error("the streamed weights differ from the loaded ones")
	}
	r := rand.New(rand.NewPCG(1, 1))
	b := testBatch(r, m.Cfg.VocabSize, []int{20, 9}, []int{4, 2}, 1)
	want, err := full.Model.Logprobs(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	lp, err := e.Logprobs(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if d := relErr(flat(lp.Logprobs), flat(want.Logprobs)); d > 1e-4 {
		t.Errorf("logprobs of the streamed engine: relative error %.2e", d)
	}
}
