package train

import (
	"context"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/swetui/swetui/prompt"
	"github.com/swetui/swetui/task"
)

// lenTokenizer gives each text one token: its length mod 6 (the bandit's vocabulary).
type lenTokenizer struct{}

func (lenTokenizer) Encode(s string) []int    { return []int{len(s) % 6} }
func (lenTokenizer) Decode(toks []int) string { return "" }

func TestSFTLowersTheGoldNLL(t *testing.T) {
	tasks := []*task.Instance{{InstanceID: "a", Patch: "diff --git a/x b/x\n"}}
	ex, skipped, err := SFTExamples(context.Background(), tasks, staticPrompter{}, lenTokenizer{}, SFTData{Context: 64, MaxNew: 8})
	if err != nil || len(ex) != 1 || skipped.TooLong != 0 || skipped.Gold != 1 {
		t.Fatalf("examples %v skipped %+v err %v", ex, skipped, err)
	}
	pol := newBandit(6, 0.5, 1)
	before, err := HeldoutNLL(context.Background(), pol, ex, 4)
	if err != nil {
		t.Fatal(err)
	}
	near(t, "held-out NLL before training", before, 1.791759469)
	res, err := RunSFT(context.Background(), SFTOptions{Steps: 20, BatchSize: 2, Seed: 1, Heldout: ex, HeldoutEvery: 8}, pol, ex, WarmupHooks{})
	if err != nil {
		t.Fatal(err)
	}
	// Measured after steps 8 and 16, and after the last; here the held-out
	// example is the trained one, so its loss is the last step's.
	if len(res.Heldout) != 3 || res.Heldout[0].Step != 8 || res.Heldout[1].Step != 16 || res.Heldout[2].Step != 20 {
		t.Fatalf("held-out points %+v", res.Heldout)
	}
	if after, _ := HeldoutNLL(context.Background(), pol, ex, 4); math.Abs(after-res.Heldout[2].NLL) > 1e-12 || after > 0.2 {
		t.Fatalf("held-out NLL at the end %.4f, recomputed %.4f", res.Heldout[2].NLL, after)
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
	ex, skipped, err := SFTExamples(context.Background(), tasks, staticPrompter{}, digitTokenizer{}, SFTData{Context: 64})
	if err != nil || len(ex) != 0 || skipped.TooLong != 1 || skipped.Longest == 0 {
		t.Fatalf("examples %v skipped %+v err %v", ex, skipped, err)
	}
	if _, err := RunSFT(context.Background(), SFTOptions{Steps: 1, BatchSize: 1, MaxNewTokens: 0}, newBandit(2, 1, 1), ex, WarmupHooks{}); err == nil {
		t.Fatal("want an error with no usable example")
	}
}

// filesPrompter shows one fixed file for every task.
type filesPrompter struct{ staticPrompter }

func (filesPrompter) Files(context.Context, *task.Instance) ([]prompt.CodeFile, error) {
	return []prompt.CodeFile{{Path: "pkg/items.py", Text: augmentSample}}, nil
}

func TestSFTExamplesAddSyntheticFixes(t *testing.T) {
	tasks := []*task.Instance{{InstanceID: "a", Patch: "p"}, {InstanceID: "b", Patch: "q"}}
	d := SFTData{Context: 64, MaxNew: 8, Synthetic: 3, Seed: 1}
	ex, _, err := SFTExamples(context.Background(), tasks, filesPrompter{}, lenTokenizer{}, d)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range ex {
		ids = append(ids, e.InstanceID)
	}
	want := []string{"a", "a#synthetic-1", "a#synthetic-2", "a#synthetic-3", "b", "b#synthetic-1", "b#synthetic-2", "b#synthetic-3"}
	if !slices.Equal(ids, want) {
		t.Fatalf("examples %v, want %v", ids, want)
	}
	// A prompter that cannot list its files gets no synthetic fixes.
	if ex, _, _ := SFTExamples(context.Background(), tasks, staticPrompter{}, lenTokenizer{}, d); len(ex) != 2 {
		t.Fatalf("%d examples from a plain prompter, want the 2 gold ones", len(ex))
	}
}

func TestSFTBatchCotangents(t *testing.T) {
	batch := []Sequence{{Prompt: []int{1, 2, 3}, Completion: []int{4, 5}}, {Prompt: []int{6, 7}, Completion: []int{8}}}
	tests := []struct {
		name     string
		weight   float64
		wantSeqs []Sequence
		wantCot  [][]float64
	}{
		{"completion only", 0, batch, [][]float64{{-1.0 / 3, -1.0 / 3}, {-1.0 / 3}}},
		// 3 completion tokens at -1/3 each; 3 prompt tokens after the first at -0.5/3.
		{"with the prompts", 0.5,
			[]Sequence{{Prompt: []int{1}, Completion: []int{2, 3, 4, 5}}, {Prompt: []int{6}, Completion: []int{7, 8}}},
			[][]float64{{-0.5 / 3, -0.5 / 3, -1.0 / 3, -1.0 / 3}, {-0.5 / 3, -1.0 / 3}}},
	}
	for _, tt := range tests {
		seqs, cot, n := sftBatch(batch, tt.weight)
		if n != 3 || !reflect.DeepEqual(seqs, tt.wantSeqs) || !reflect.DeepEqual(cot, tt.wantCot) {
			t.Errorf("%s: n %d\nseqs %v\nwant %v\ncot %v\nwant %v", tt.name, n, seqs, tt.wantSeqs, cot, tt.wantCot)
		}
	}
	if batch[0].Prompt[1] != 2 || len(batch[0].Completion) != 2 {
		t.Error("sftBatch changed its input")
	}
}

// runeTokenizer gives each byte one token, so a reply decodes back.
type runeTokenizer struct{}

func (runeTokenizer) Encode(s string) []int {
	out := make([]int, len(s))
	for i := range len(s) {
		out[i] = int(s[i])
	}
	return out
}

func (runeTokenizer) Decode(toks []int) string {
	b := make([]byte, len(toks))
	for i, t := range toks {
		b[i] = byte(t)
	}
	return string(b)
}

func TestSFTExamplesTrimTheGoldContext(t *testing.T) {
	const patch = "--- a/x\n+++ b/x\n@@ -1,7 +1,7 @@\n a\n b\n c\n-d\n+D\n e\n f\n g\n"
	tasks := []*task.Instance{{InstanceID: "a", Patch: patch}}
	d := SFTData{Context: 512, MaxNew: 256, ContextLines: 1}
	ex, _, err := SFTExamples(context.Background(), tasks, staticPrompter{}, runeTokenizer{}, d)
	if err != nil || len(ex) != 1 {
		t.Fatalf("examples %v err %v", ex, err)
	}
	want := prompt.ChatFormat{}.GoldCompletion("--- a/x\n+++ b/x\n@@ -3,3 +3,3 @@\n c\n-d\n+D\n e\n")
	if got := (runeTokenizer{}).Decode(ex[0].Seq.Completion); got != want {
		t.Fatalf("completion %q, want %q", got, want)
	}
	// A gold patch the trim cannot read is an error naming its task.
	tasks[0].Patch = "--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n"
	if _, _, err := SFTExamples(context.Background(), tasks, staticPrompter{}, runeTokenizer{}, d); err == nil || !strings.Contains(err.Error(), "gold reply of a") {
		t.Fatalf("error %v, want one naming task a", err)
	}
}

// An agent trajectory's observations are no SFT targets: the cotangent is
// -1/n on the masked-in completion tokens (n counting only those), 0 on the
// others, and prompt tokens keep their weight.
func TestSFTBatchMask(t *testing.T) {
	batch := []Sequence{
		{Prompt: []int{1, 2}, Completion: []int{3, 4, 5, 6}, Mask: []bool{true, false, false, true}},
		{Prompt: []int{1, 2}, Completion: []int{7}},
	}
	seqs, cot, n := sftBatch(batch, 0)
	if n != 3 {
		t.Fatalf("%d loss tokens, want 3", n)
	}
	want := [][]float64{{-1.0 / 3, 0, 0, -1.0 / 3}, {-1.0 / 3}}
	for i := range want {
		if !slices.Equal(cot[i], want[i]) || !slices.Equal(seqs[i].Completion, batch[i].Completion) {
			t.Errorf("sequence %d: cotangent %v, want %v", i, cot[i], want[i])
		}
	}
	// With a prompt weight the first sequence's prompt token 2 becomes a
	// target of weight w/m (m = 2 prompt targets in the batch).
	_, cot, _ = sftBatch(batch, 0.5)
	if w := []float64{-0.25, -1.0 / 3, 0, 0, -1.0 / 3}; !slices.Equal(cot[0], w) {
		t.Errorf("with a prompt weight: %v, want %v", cot[0], w)
	}
}
