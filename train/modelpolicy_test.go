package train

import (
	"context"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/swetui/swetui/config"
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

// GRPO through the real model: rewarding the share of "a" in the completion
// raises it. The reward is the task's, the gradients the model's.
func TestGRPOOnTheRealModelLearns(t *testing.T) {
	cfg := testConfig(t, "run.max_steps=25", "grpo.group_size=8", "grpo.prompts_per_step=1",
		"sample.max_new_tokens=8", "model.context=64", "grpo.kl_coef=0.02")
	p, tok := tinyModelPolicy(t, 3, 3e-2)
	ref := &ModelReference{Model: p.Model.Clone(), Temp: 1}
	p.Ref = ref
	share := rewardFunc(func(text string) Breakdown {
		if len(text) == 0 {
			return Breakdown{}
		}
		return Breakdown{Total: float64(strings.Count(text, "a")) / float64(len(text)), Valid: true}
	})
	tr := New(cfg, Deps{Policy: p, Reference: ref, Tokenizer: tok, Scorer: share, Prompter: staticPrompter{},
		Tasks: fakeTasks(3), Store: p})
	evs := drain(tr)
	if err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	var rewards []float64
	for _, ev := range <-evs {
		if sf, ok := ev.(StepFinished); ok {
			rewards = append(rewards, sf.Metrics.RewardMean)
		}
	}
	first, last := mean(rewards[:5]), mean(rewards[len(rewards)-5:])
	t.Logf("mean reward: first 5 steps %.3f, last 5 steps %.3f", first, last)
	if last < first+0.2 {
		t.Fatalf("reward %.3f over the first 5 steps, %.3f over the last 5: no learning", first, last)
	}

	// The checkpoint restores the policy, optimiser, reference and sampler RNG.
	latest, err := LatestCheckpoint(cfg.Run.OutDir)
	if err != nil || latest == "" {
		t.Fatalf("no checkpoint: %v", err)
	}
	q, _ := tinyModelPolicy(t, 99, 3e-2)
	q.Ref = &ModelReference{Model: q.Model.Clone()}
	if err := q.Load(context.Background(), latest); err != nil {
		t.Fatal(err)
	}
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
