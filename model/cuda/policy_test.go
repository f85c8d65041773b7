package cuda

import (
	"context"
	"slices"
	"testing"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/model"
)

// TestPolicyGRPOStep runs what one GRPO step asks of the policy on the
// CPU device (sample a group, score it, old logprobs, backward of an
// advantage-weighted cotangent, step) and checks it against the same step
// on the gorgonia model, plus snapshots and checkpoint sync.
func TestPolicyGRPOStep(t *testing.T) {
	ctx := context.Background()
	cfg := qwen2Small()
	ref := testModel(t, cfg, 31)
	oc := config.Default().Optim
	sched, err := model.NewSchedule(oc, 10)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPolicy(testDevice(t), ref.Clone(), Options{Act: F32}, model.NewAdamW(oc, ref.NumParams()), sched, oc.GradClip, []int{0}, 7)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.Temp = 0.9
	p.StartSnapshots()
	prompt := []int{3, 14, 15, 92, 65, 35}
	group, version, err := p.SampleSnapshot(ctx, prompt, 4, model.SampleOptions{Temperature: 0.9, MaxNewTokens: 10})
	if err != nil {
		t.Fatal(err)
	}
	if version != 0 || len(group) != 4 {
		t.Fatalf("snapshot sample: %d completions at version %d", len(group), version)
	}
	b := model.Batch{}
	var cot [][]float32
	for i, c := range group {
		b.Tokens = append(b.Tokens, append(slices.Clone(prompt), c.Tokens...))
		b.PromptLen = append(b.PromptLen, len(prompt))
		adv := float32(i) - 1.5 // advantages of a group with rewards 0..3
		row := make([]float32, len(c.Tokens))
		for j := range row {
			row[j] = -adv / float32(len(c.Tokens))
		}
		cot = append(cot, row)
	}
	old, err := p.Logprobs(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if d := relErr(flat(old), flatCompletions(group)); d > 1e-4 {
		t.Errorf("old logprobs vs behaviour: relative error %.2e", d)
	}
	lp, ent, err := p.Backward(ctx, b, cot)
	if err != nil {
		t.Fatal(err)
	}
	if d := relErr(flat(lp), flat(old)); d > 1e-6 || ent <= 0 {
		t.Errorf("backward logprobs differ by %.2e from forward; entropy %g", d, ent)
	}
	norm, lr := p.Step()
	if p.Version() != 1 || lr != sched.At(0) || norm <= 0 {
		t.Errorf("after Step: version %d, lr %g, norm %g", p.Version(), lr, norm)
	}

	// The same step on gorgonia.
	b.Temperature = 0.9
	if _, err := ref.Backward(ctx, b, cot); err != nil {
		t.Fatal(err)
	}
	refNorm := ref.ClipGradNorm(oc.GradClip)
	if err := model.NewAdamW(oc, ref.NumParams()).Update(ref, lr); err != nil {
		t.Fatal(err)
	}
	got := ref.Clone()
	if err := p.Sync(got); err != nil {
		t.Fatal(err)
	}
	if d := relErr(got.Weights(), ref.Weights()); d > 1e-4 || relErr([]float32{float32(norm)}, []float32{float32(refNorm)}) > 1e-4 {
		t.Errorf("weights after the step: relative error %.2e; norm %g vs %g", d, norm, refNorm)
	}
	_, version, err = p.SampleSnapshot(ctx, prompt, 2, model.SampleOptions{Temperature: 0.9, MaxNewTokens: 4})
	if err != nil || version != 1 {
		t.Errorf("snapshot after Step: version %d, %v", version, err)
	}
	// The sampler's random source round-trips through a checkpoint.
	st, err := p.RNGState()
	if err != nil {
		t.Fatal(err)
	}
	a, err := p.Sample(ctx, prompt, 2, model.SampleOptions{Temperature: 0.9, MaxNewTokens: 6})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.SetRNGState(st); err != nil {
		t.Fatal(err)
	}
	again, err := p.Sample(ctx, prompt, 2, model.SampleOptions{Temperature: 0.9, MaxNewTokens: 6})
	if err != nil || !slices.Equal(a[1].Tokens, again[1].Tokens) {
		t.Errorf("sampling after restoring the RNG: %v vs %v (%v)", again[1].Tokens, a[1].Tokens, err)
	}
	r, err := NewReference(testDevice(t), ref, Options{Act: F32}, 0.9)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Engine.Close()
	rl, err := r.Logprobs(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	want, err := ref.Logprobs(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if d := relErr(flat(rl), flat(want.Logprobs)); d > 1e-4 {
		t.Errorf("reference logprobs: relative error %.2e", d)
	}
}

func flatCompletions(cs []model.Completion) []float32 {
	var out []float32
	for _, c := range cs {
		out = append(out, c.Logprobs...)
	}
	return out
}
