// Package policytest builds the tiny real policies the tests of policy and
// train run on.
package policytest

import (
	"context"
	"slices"
	"testing"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/model"
	"github.com/swetui/swetui/policy"
)

// Tiny is a one-layer gorgonia policy with its own small tokenizer, seeded,
// learning at lr, sampling at temperature 1.
func Tiny(t testing.TB, seed uint64, lr float64) (*policy.Model, *model.Tokenizer) {
	t.Helper()
	corpus := slices.Values([]string{"fix the bug in add", "diff --git a/x b/x", "aaaa bbbb cccc"})
	tok, err := model.TrainBPE(context.Background(), corpus, 300, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := model.Config{Layers: 1, DModel: 32, Heads: 2, KVHeads: 1, DFF: 64, Context: 64, VocabSize: tok.VocabSize(), RopeTheta: 10000}
	m, err := model.New(cfg, seed)
	if err != nil {
		t.Fatal(err)
	}
	oc := config.Default().Optim
	oc.LR, oc.Warmup = lr, 0
	sched, err := model.NewSchedule(oc, 100)
	if err != nil {
		t.Fatal(err)
	}
	p := policy.NewModel(m, model.NewAdamW(oc, m.NumParams()), sched, tok, 1.0, seed)
	p.Temp = 1
	return p, tok
}
