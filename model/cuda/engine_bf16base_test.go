package cuda

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/model"
)

// bf16Round is x as bf16 holds it.
func bf16Round(x []float32) {
	for i, v := range x {
		x[i] = fromBF16(toBF16(v))
	}
}

// roundedMatrices is m with every matrix rounded to bf16 and the norms
// and biases left in fp32: what a bf16-only frozen base holds.
func roundedMatrices(m *model.Model) *model.Model {
	r := m.Clone()
	all := r.Weights()
	off := 0
	for _, p := range r.Params {
		n := 1
		for _, d := range p.Shape {
			n *= d
		}
		if len(p.Shape) > 1 {
			bf16Round(all[off : off+n])
		}
		off += n
	}
	return r
}

// TestBF16FrozenBase: with LoRA in bf16 the base is held in bf16 only (its
// matrices have no fp32 masters, norms and biases keep theirs). It computes
// exactly the logprobs a bf16 engine computes from fp32 masters of the
// bf16-rounded weights, so the masters were never needed, and matches the fp32 base to bf16 tolerance:
// logprobs, the adapters' gradients, one AdamW step, the reference.
func TestBF16FrozenBase(t *testing.T) {
	ctx := context.Background()
	base := testModel(t, qwen2Small(), 11) // Qwen2: q, k, v biases
	l := testLoRA(t, base, model.LoRATargets)
	bf16Round(l.Weights()) // the compute copy of the adapters is bf16 too
	r := rand.New(rand.NewPCG(5, 5))
	b := testBatch(r, base.Cfg.VocabSize, []int{17, 33, 8, 12}, []int{9, 1, 7, 3}, 0.8)
	cot := randCot(r, b, 1)

	type run struct {
		lp, ref, grads, after []float32
		e                     *Engine
	}
	do := func(m *model.Model, act DType) run {
		t.Helper()
		e, err := NewEngine(testDevice(t), m.Clone(), Options{Act: act, Train: true, LoRA: l.Clone()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		res, err := e.Backward(ctx, b, cot)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := e.LogprobsBase(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		g := make([]float32, l.NumParams())
		if err := e.Grads(g); err != nil {
			t.Fatal(err)
		}
		opt := model.NewAdamW(config.Default().Optim, l.NumParams())
		if _, err := e.Step(opt, 1e-3, 1); err != nil {
			t.Fatal(err)
		}
		after := l.Clone()
		if err := e.DownloadLoRA(after, nil); err != nil {
			t.Fatal(err)
		}
		return run{flat(res.Logprobs), flat(ref.Logprobs), g, after.Weights(), e}
	}
	bf := do(base, BF16)
	// The same bf16 activations over fp32 masters of the rounded weights:
	// equal to the bit, on the CPU kernels (fp32 activations) and on the
	// GPU path alike. (Against an fp32-activation engine the bf16 one is
	// equal only on the CPU kernels: the emulator found the test held
	// there alone, as a GPU rounds every activation it stores.)
	exact := do(roundedMatrices(base), BF16)
	full := do(base, F32)

	if !bf.e.bf16Base || bf.e.w.N != VectorParamCount(base.Cfg) {
		t.Fatalf("bf16 base: %v, %d fp32 masters, want only the %d of the norms and biases", bf.e.bf16Base, bf.e.w.N, VectorParamCount(base.Cfg))
	}
	if full.e.bf16Base || full.e.w.N != base.NumParams() {
		t.Fatalf("an fp32 engine keeps every weight in fp32: %v, %d", full.e.bf16Base, full.e.w.N)
	}
	for _, c := range []struct {
		name      string
		got, want []float32
	}{{"logprobs", bf.lp, exact.lp}, {"reference", bf.ref, exact.ref}} {
		// (The backward casts activations to bf16, as the GPU does.)
		if !slices.Equal(c.got, c.want) {
			t.Errorf("%s: the bf16 base differs from fp32 on the rounded weights (relative error %.2e)", c.name, relErr(c.got, c.want))
		}
	}
	const tol = 2e-2 // bf16 keeps 8 bits of mantissa
	for _, c := range []struct {
		name      string
		got, want []float32
	}{{"logprobs", bf.lp, full.lp}, {"reference", bf.ref, full.ref}, {"adapter gradients", bf.grads, full.grads}, {"adapters after a step", bf.after, full.after}} {
		if d := relErr(c.got, c.want); d > tol {
			t.Errorf("%s: relative error %.2e against the fp32 base, over %.0e", c.name, d, tol)
		}
	}

	// The base reads back as bf16 holds it, and writes round the same way.
	before, err := bf.e.Logprobs(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	got := base.Clone()
	if err := bf.e.Download(got, nil); err != nil {
		t.Fatal(err)
	}
	if want := roundedMatrices(base); !slices.Equal(got.Weights(), want.Weights()) {
		t.Errorf("the bf16 base downloads as something else than its rounded weights (relative error %.2e)", relErr(got.Weights(), want.Weights()))
	}
	for i, p := range base.Params {
		want := make([]float32, len(p.W))
		copy(want, p.W)
		if len(p.Shape) > 1 {
			bf16Round(want)
		}
		one := make([]float32, len(p.W))
		if err := bf.e.ReadParam(i, Weights, one); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(one, want) {
			t.Fatalf("%s reads back changed", p.Name)
		}
		if err := bf.e.WriteParam(i, Weights, one); err != nil {
			t.Fatal(err)
		}
	}
	again, err := bf.e.Logprobs(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(flat(again.Logprobs), flat(before.Logprobs)) {
		t.Error("after WriteParam of its own values the bf16 base scores differently")
	}
}
