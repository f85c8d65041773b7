package train

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/model"
)

func tinyModelPolicy(t *testing.T, seed uint64, lr float64) (*ModelPolicy, *model.Tokenizer) {
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
	p := NewModelPolicy(m, model.NewAdamW(oc, m.NumParams()), sched, tok, 1.0, seed)
	p.Temp = 1
	return p, tok
}

func TestModelPolicyLogprobsAgreeWithSampler(t *testing.T) {
	p, tok := tinyModelPolicy(t, 1, 1e-3)
	ctx := context.Background()
	prompt := tok.Encode("fix the bug")
	samples, err := p.Sample(ctx, prompt, 4, SampleOptions{Temperature: 1, TopP: 1, MaxNewTokens: 12})
	if err != nil {
		t.Fatal(err)
	}
	seqs := make([]Sequence, len(samples))
	for i, s := range samples {
		seqs[i] = Sequence{Prompt: prompt, Completion: s.Tokens}
	}
	lp, err := p.Logprobs(ctx, seqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range samples {
		for j := range s.Tokens {
			if d := math.Abs(lp[i][j] - s.Logprobs[j]); d > 1e-4 {
				t.Fatalf("seq %d token %d: graph %.6f sampler %.6f", i, j, lp[i][j], s.Logprobs[j])
			}
		}
	}
}

// shareOfA rewards the share of "a" in a completion.
var shareOfA = rewardFunc(func(text string) event.Verdict {
	if len(text) == 0 {
		return event.Verdict{}
	}
	return event.Verdict{Reward: float64(strings.Count(text, "a")) / float64(len(text)), SyntaxOK: true}
})

// shareOfAConfig is the short GRPO run the real-model learning tests share.
func shareOfAConfig(t *testing.T) config.Config {
	return testConfig(t, "run.max_steps=25", "grpo.group_size=8", "grpo.prompts_per_step=1",
		"sample.max_new_tokens=8", "model.context=64", "grpo.kl_coef=0.02")
}

// learnShareOfA runs GRPO on pol rewarding shareOfA and fails unless the
// mean reward of the last 5 steps is 0.2 above that of the first 5.
func learnShareOfA(t *testing.T, cfg config.Config, pol Policy, ref Reference, store Store, tok Tokenizer) {
	t.Helper()
	tr := New(cfg, Deps{Policy: pol, Reference: ref, Tokenizer: tok, Scorer: shareOfA, Prompter: staticPrompter{},
		Tasks: fakeTasks(3), Store: store})
	evs := drain(tr)
	if err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	var rewards []float64
	for _, ev := range <-evs {
		if sf, ok := ev.(event.StepFinished); ok {
			rewards = append(rewards, sf.Metrics.RewardMean)
		}
	}
	first, last := mean(rewards[:5]), mean(rewards[len(rewards)-5:])
	t.Logf("mean reward: first 5 steps %.3f, last 5 steps %.3f", first, last)
	if last < first+0.2 {
		t.Fatalf("reward %.3f over the first 5 steps, %.3f over the last 5: no learning", first, last)
	}
}

// GRPO through the real model: rewarding the share of "a" in the completion
// raises it. The reward is the task's, the gradients the model's.
func TestGRPOOnTheRealModelLearns(t *testing.T) {
	cfg := shareOfAConfig(t)
	p, tok := tinyModelPolicy(t, 3, 3e-2)
	ref := &ModelReference{Model: p.Model.Clone(), Temp: 1}
	p.Ref = ref
	learnShareOfA(t, cfg, p, ref, p, tok)

	// The checkpoint restores the policy, optimiser, reference and sampler RNG.
	q := reloaded(t, cfg.Run.OutDir)
	if !reflect.DeepEqual(q.Model.Weights(), p.Model.Weights()) || q.Version() != p.Version() ||
		!reflect.DeepEqual(q.Ref.Model.Weights(), ref.Model.Weights()) {
		t.Fatal("checkpoint did not restore the weights, reference and optimiser step")
	}
	a, _ := p.Sample(context.Background(), tok.Encode("x"), 2, SampleOptions{Temperature: 1, MaxNewTokens: 6})
	b, _ := q.Sample(context.Background(), tok.Encode("x"), 2, SampleOptions{Temperature: 1, MaxNewTokens: 6})
	if !reflect.DeepEqual(a, b) {
		t.Fatal("sampler RNG not restored")
	}
}

// reloaded is a fresh CPU policy, with a reference, loaded from the newest
// checkpoint under outDir.
func reloaded(t *testing.T, outDir string) *ModelPolicy {
	t.Helper()
	latest, err := LatestCheckpoint(outDir)
	if err != nil || latest == "" {
		t.Fatalf("no checkpoint: %v", err)
	}
	q, _ := tinyModelPolicy(t, 99, 3e-2)
	q.Ref = &ModelReference{Model: q.Model.Clone()}
	if err := q.Load(context.Background(), latest); err != nil {
		t.Fatalf("the CPU policy cannot read %s: %v", latest, err)
	}
	return q
}

// stepOnce takes one update on a fixed batch so the weights change.
func stepOnce(t *testing.T, p *ModelPolicy, tok *model.Tokenizer) {
	t.Helper()
	seqs := []Sequence{{Prompt: tok.Encode("fix the"), Completion: tok.Encode(" bug in add")}}
	cot := [][]float64{make([]float64, len(seqs[0].Completion))}
	for i := range cot[0] {
		cot[0][i] = -1
	}
	if _, _, err := p.Backward(context.Background(), seqs, cot); err != nil {
		t.Fatal(err)
	}
	p.Step()
}

func TestSnapshotSamplingFollowsTheSteps(t *testing.T) {
	ctx := context.Background()
	live, tok := tinyModelPolicy(t, 4, 1e-2)
	snap, _ := tinyModelPolicy(t, 4, 1e-2)
	opts := SampleOptions{Temperature: 1, TopP: 1, MaxNewTokens: 10}
	prompt := tok.Encode("fix the bug")
	if _, _, err := snap.SampleSnapshot(ctx, prompt, 2, opts); err == nil {
		t.Fatal("SampleSnapshot before StartSnapshots: want an error")
	}
	snap.StartSnapshots()
	for v := range 3 {
		want, err := live.Sample(ctx, prompt, 3, opts)
		if err != nil {
			t.Fatal(err)
		}
		got, version, err := snap.SampleSnapshot(ctx, prompt, 3, opts)
		if err != nil {
			t.Fatal(err)
		}
		if version != v || !reflect.DeepEqual(got, want) {
			t.Fatalf("update %d: snapshot version %d; samples equal to the live weights' %v", v, version, reflect.DeepEqual(got, want))
		}
		stepOnce(t, live, tok)
		stepOnce(t, snap, tok)
	}
}

// TestSnapshotInUseIsNotOverwritten holds a snapshot (as a slow sampler
// would) across two updates: its weights stay those of its version, and it
// is recycled once released.
func TestSnapshotInUseIsNotOverwritten(t *testing.T) {
	p, tok := tinyModelPolicy(t, 5, 1e-2)
	p.StartSnapshots()
	held, v, release, err := p.snaps.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	before := slices.Clone(held.Weights())
	stepOnce(t, p, tok)
	stepOnce(t, p, tok)
	if !slices.Equal(held.Weights(), before) || v != 0 {
		t.Fatal("a snapshot in use was overwritten by an update")
	}
	newest, nv, releaseNewest, _ := p.snaps.Acquire()
	if nv != 2 || !slices.Equal(newest.Weights(), p.Model.Weights()) {
		t.Fatalf("newest snapshot is version %d, want 2 with the live weights", nv)
	}
	releaseNewest()
	release()
	stepOnce(t, p, tok) // publishes into a spare
	stepOnce(t, p, tok)
	if n := len(p.snaps.Drain()); n > 3 {
		t.Fatalf("%d snapshots after four updates, want at most 3", n)
	}
}

// TestSnapshotSamplingRunsDuringUpdates samples from snapshots in one
// goroutine while another trains (run it with -race): versions never go
// back and every sample is well formed.
func TestSnapshotSamplingRunsDuringUpdates(t *testing.T) {
	p, tok := tinyModelPolicy(t, 6, 1e-2)
	p.StartSnapshots()
	done := make(chan struct{})
	errs := make(chan error, 1)
	go func() {
		defer close(errs)
		last := 0
		for {
			select {
			case <-done:
				return
			default:
			}
			s, v, err := p.SampleSnapshot(context.Background(), tok.Encode("fix"), 2, SampleOptions{Temperature: 1, MaxNewTokens: 8})
			if err == nil && (v < last || len(s) != 2 || len(s[0].Tokens) != len(s[0].Logprobs)) {
				err = fmt.Errorf("version %d after %d, %d samples", v, last, len(s))
			}
			if err != nil {
				errs <- err
				return
			}
			last = v
		}
	}()
	for range 20 {
		stepOnce(t, p, tok)
	}
	close(done)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
}

// TestAsyncAgeZeroOnTheRealModelMatchesSync runs the async loop, which
// samples from snapshots, against the sync loop, which samples from the live
// weights: with age 0 the weights after every step are the same.
func TestAsyncAgeZeroOnTheRealModelMatchesSync(t *testing.T) {
	run := func(async bool) []float32 {
		cfg := testConfig(t, "run.max_steps=4", "grpo.group_size=4", "grpo.prompts_per_step=2",
			"sample.max_new_tokens=8", "model.context=64", "grpo.is_correction=truncated")
		cfg.GRPO.Async.Enabled = async
		cfg.GRPO.Async.MaxTrajectoryAgeSteps = 0
		p, tok := tinyModelPolicy(t, 7, 3e-2)
		share := rewardFunc(func(text string) event.Verdict {
			return event.Verdict{Reward: float64(strings.Count(text, "a")), SyntaxOK: true}
		})
		tr := New(cfg, Deps{Policy: p, Tokenizer: tok, Scorer: share, Prompter: staticPrompter{}, Tasks: fakeTasks(3)})
		drain(tr)
		if err := tr.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		if p.Version() == 0 {
			t.Fatal("no update was taken")
		}
		return p.Model.Weights()
	}
	if !slices.Equal(run(false), run(true)) {
		t.Fatal("async (age 0, snapshot sampling) and sync runs ended with different weights")
	}
}
