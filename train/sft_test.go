package train

import (
	"context"
	"testing"

	"github.com/swetui/swetui/task"
)

// lenTokenizer gives each text one token: its length mod 6 (the bandit's vocabulary).
type lenTokenizer struct{}

func (lenTokenizer) Encode(s string) []int    { return []int{len(s) % 6} }
func (lenTokenizer) Decode(toks []int) string { return "" }

func TestSFTLowersTheGoldNLL(t *testing.T) {
	tasks := []*task.Instance{{InstanceID: "a", Patch: "diff --git a/x b/x\n"}}
	ex, skipped, err := SFTExamples(context.Background(), tasks, staticPrompter{}, lenTokenizer{}, 64, 8)
	if err != nil || len(ex) != 1 || skipped != 0 {
		t.Fatalf("examples %v skipped %d err %v", ex, skipped, err)
	}
	pol := newBandit(6, 0.5, 1)
	res, err := RunSFT(context.Background(), SFTOptions{Steps: 20, BatchSize: 2, Seed: 1}, pol, ex, nil)
	if err != nil {
		t.Fatal(err)
	}
	first, last := res.Losses[0], res.Losses[len(res.Losses)-1]
	// Uniform over 6 tokens: NLL = ln 6 = 1.7918 at the start.
	near(t, "initial NLL", first, 1.791759469)
	if last > 0.2 {
		t.Fatalf("NLL %.3f → %.3f: SFT did not learn the gold token", first, last)
	}
}

func TestSFTSkipsTooLongGold(t *testing.T) {
	tasks := []*task.Instance{{InstanceID: "a", Patch: "p"}}
	ex, skipped, err := SFTExamples(context.Background(), tasks, staticPrompter{}, digitTokenizer{}, 64, 0)
	if err != nil || len(ex) != 0 || skipped != 1 {
		t.Fatalf("examples %v skipped %d err %v", ex, skipped, err)
	}
	if _, err := RunSFT(context.Background(), SFTOptions{Steps: 1, BatchSize: 1, MaxNewTokens: 0}, newBandit(2, 1, 1), ex, nil); err == nil {
		t.Fatal("want an error with no usable example")
	}
}
