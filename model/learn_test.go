package model

import (
	"context"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/swetui/swetui/config"
)

// TestDefaultModelLearns trains the default-size model on diff-like text for
// SWETUI_LEARN_SECONDS seconds (skipped when unset: it is a measurement, not
// a unit test) and logs the held-out NLL curve.
//
//	SWETUI_LEARN_SECONDS=90 go test -tags blas ./model -run DefaultModelLearns -v
func TestDefaultModelLearns(t *testing.T) {
	secs, _ := strconv.Atoi(os.Getenv("SWETUI_LEARN_SECONDS"))
	if secs <= 0 {
		t.Skip("set SWETUI_LEARN_SECONDS to run this measurement")
	}
	ctx := context.Background()
	docs := corpus(9, 1200)
	tok, err := TrainBPE(ctx, slices.Values(docs[:1000]), 2048, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(ConfigFrom(config.Default().Model), 1)
	if err != nil {
		t.Fatal(err)
	}
	o := NewAdamW(config.Default().Optim, m.NumParams())
	batch := func(ds []string, r *rand.Rand) Batch {
		var b Batch
		for range 4 {
			ids := tok.Encode(ds[r.IntN(len(ds))])
			ids = ids[:min(len(ids), 256)]
			b.Tokens = append(b.Tokens, ids)
			b.PromptLen = append(b.PromptLen, 1)
		}
		return b
	}
	heldOut := batch(docs[1000:], rand.New(rand.NewPCG(7, 7)))
	eval := func() float64 {
		res, err := m.Logprobs(ctx, heldOut)
		if err != nil {
			t.Fatal(err)
		}
		var s float64
		var n int
		for _, lp := range res.Logprobs {
			for _, v := range lp {
				s -= float64(v)
				n++
			}
		}
		return s / float64(n)
	}
	r := rand.New(rand.NewPCG(1, 2))
	start := time.Now()
	first := eval()
	tokens := 0
	step := 0
	for ; time.Since(start) < time.Duration(secs)*time.Second; step++ {
		b := batch(docs[:1000], r)
		m.ZeroGrad()
		if _, err := m.Backward(ctx, b, nllCotangent(b)); err != nil {
			t.Fatal(err)
		}
		m.ClipGradNorm(1)
		if err := o.Update(m, 1e-3*min(1, float64(step+1)/10)); err != nil {
			t.Fatal(err)
		}
		for _, s := range b.Tokens {
			tokens += len(s)
		}
		if step%25 == 0 {
			t.Logf("%5.1fs step %4d held-out NLL %.3f", time.Since(start).Seconds(), step, eval())
		}
	}
	last := eval()
	t.Logf("%s: %d steps, %d tokens in %v: held-out NLL %.3f -> %.3f", BLASName(), step, tokens, time.Since(start).Round(time.Second), first, last)
	if last > first/2 {
		t.Errorf("held-out NLL %.3f -> %.3f; want it at least halved", first, last)
	}
	c, err := m.Sample(ctx, tok.Encode("diff --git a/pkg/mod7.py b/pkg/mod7.py\n"), 1, SampleOptions{Temperature: 0.7, MaxNewTokens: 80})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sample at T=0.7:\n%s", tok.Decode(c[0].Tokens))
}
