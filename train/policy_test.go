package train_test

// The trainer on the real policies (package policy, which imports train:
// these tests are external to train, and reach its test helpers through
// export_test.go).

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/model/cuda"
	"github.com/swetui/swetui/policy"
	"github.com/swetui/swetui/policy/policytest"
	"github.com/swetui/swetui/prompt"
	"github.com/swetui/swetui/train"
)

// shareOfA rewards the share of "a" in a completion.
var shareOfA = train.RewardFunc(func(text string) event.Verdict {
	if len(text) == 0 {
		return event.Verdict{}
	}
	return event.Verdict{Reward: float64(strings.Count(text, "a")) / float64(len(text)), SyntaxOK: true}
})

// shareOfAConfig is the short GRPO run the real-model learning tests share.
func shareOfAConfig(t *testing.T) config.Config {
	return train.TestConfig(t, "run.max_steps=25", "grpo.group_size=8", "grpo.prompts_per_step=1",
		"sample.max_new_tokens=8", "model.context=64", "grpo.kl_coef=0.02")
}

// learnShareOfA runs GRPO on pol rewarding shareOfA and fails unless the
// mean reward of the last 5 steps is 0.2 above that of the first 5.
func learnShareOfA(t *testing.T, cfg config.Config, pol train.Policy, ref train.Reference, store train.Store, tok prompt.Tokenizer) {
	t.Helper()
	tr := train.New(cfg, train.Deps{Policy: pol, Reference: ref, Tokenizer: tok, Scorer: shareOfA, Prompter: train.StaticPrompter{},
		Tasks: train.FakeTasks(3), Store: store})
	evs := train.Drain(tr)
	if err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	var rewards []float64
	for _, ev := range <-evs {
		if sf, ok := ev.(event.StepFinished); ok {
			rewards = append(rewards, sf.Metrics.RewardMean)
		}
	}
	first, last := train.Mean(rewards[:5]), train.Mean(rewards[len(rewards)-5:])
	t.Logf("mean reward: first 5 steps %.3f, last 5 steps %.3f", first, last)
	if last < first+0.2 {
		t.Fatalf("reward %.3f over the first 5 steps, %.3f over the last 5: no learning", first, last)
	}
}

// GRPO through the real model: rewarding the share of "a" in the completion
// raises it. The reward is the task's, the gradients the model's.
func TestGRPOOnTheRealModelLearns(t *testing.T) {
	cfg := shareOfAConfig(t)
	p, tok := policytest.Tiny(t, 3, 3e-2)
	ref := &policy.ModelReference{Model: p.Model.Clone(), Temp: 1}
	p.Ref = ref
	learnShareOfA(t, cfg, p, ref, p, tok)

	// The checkpoint restores the policy, optimiser, reference and sampler RNG.
	q := reloaded(t, cfg.Run.OutDir)
	if !reflect.DeepEqual(q.Model.Weights(), p.Model.Weights()) || q.Version() != p.Version() ||
		!reflect.DeepEqual(q.Ref.Model.Weights(), ref.Model.Weights()) {
		t.Fatal("checkpoint did not restore the weights, reference and optimiser step")
	}
	a, _ := p.Sample(context.Background(), tok.Encode("x"), 2, train.SampleOptions{Temperature: 1, MaxNewTokens: 6})
	b, _ := q.Sample(context.Background(), tok.Encode("x"), 2, train.SampleOptions{Temperature: 1, MaxNewTokens: 6})
	if !reflect.DeepEqual(a, b) {
		t.Fatal("sampler RNG not restored")
	}
}

// reloaded is a fresh CPU policy, with a reference, loaded from the newest
// checkpoint under outDir.
func reloaded(t *testing.T, outDir string) *policy.Model {
	t.Helper()
	latest, err := train.LatestCheckpoint(outDir)
	if err != nil || latest == "" {
		t.Fatalf("no checkpoint: %v", err)
	}
	q, _ := policytest.Tiny(t, 99, 3e-2)
	q.Ref = &policy.ModelReference{Model: q.Model.Clone()}
	if err := q.Load(context.Background(), latest); err != nil {
		t.Fatalf("the CPU policy cannot read %s: %v", latest, err)
	}
	return q
}

// stepOnce takes one update on a fixed batch so the weights change.
// TestAsyncAgeZeroOnTheRealModelMatchesSync runs the async loop, which
// samples from snapshots, against the sync loop, which samples from the live
// weights: with age 0 the weights after every step are the same.
func TestAsyncAgeZeroOnTheRealModelMatchesSync(t *testing.T) {
	run := func(async bool) []float32 {
		cfg := train.TestConfig(t, "run.max_steps=4", "grpo.group_size=4", "grpo.prompts_per_step=2",
			"sample.max_new_tokens=8", "model.context=64", "grpo.is_correction=truncated")
		cfg.GRPO.Async.Enabled = async
		cfg.GRPO.Async.MaxTrajectoryAgeSteps = 0
		p, tok := policytest.Tiny(t, 7, 3e-2)
		share := train.RewardFunc(func(text string) event.Verdict {
			return event.Verdict{Reward: float64(strings.Count(text, "a")), SyntaxOK: true}
		})
		tr := train.New(cfg, train.Deps{Policy: p, Tokenizer: tok, Scorer: share, Prompter: train.StaticPrompter{}, Tasks: train.FakeTasks(3)})
		train.Drain(tr)
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

// TestGRPOOnTheDevicePolicyLearns runs the trainer on the device backend's
// CPU implementation (the same orchestration a GPU runs): GRPO raises the
// rewarded share of "a", and its checkpoint loads into the CPU policy.
func TestGRPOOnTheDevicePolicyLearns(t *testing.T) {
	cfg := shareOfAConfig(t)
	host, tok := policytest.Tiny(t, 3, 3e-2)
	dev := cuda.NewCPU()
	p, err := cuda.NewPolicy(dev, host.Model, cuda.Options{Act: cuda.F32}, host.Optim, host.Schedule, host.GradClip, host.StopTokens(), 3)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.Temp = 1
	r, err := cuda.NewReference(dev, host.Model, cuda.Options{Act: cuda.F32}, 1)
	if err != nil {
		t.Fatal(err)
	}
	ref := &policy.DeviceReference{R: r}
	pol := &policy.Device{P: p, Host: host.Model.Clone(), Tokenizer: tok, Ref: ref}
	learnShareOfA(t, cfg, pol, ref, pol, tok)
	q := reloaded(t, cfg.Run.OutDir)
	if q.Version() != p.Version() {
		t.Fatalf("checkpoint version %d, device policy %d", q.Version(), p.Version())
	}
	onDevice := host.Model.Clone()
	if err := p.Sync(onDevice); err != nil {
		t.Fatal(err)
	}
	for i, w := range onDevice.Weights() {
		if q.Model.Weights()[i] != w {
			t.Fatalf("weight %d: checkpoint %v, device %v", i, q.Model.Weights()[i], w)
		}
	}
}

func TestCheckpointWithoutSamplerRNGIsDamaged(t *testing.T) {
	cfg := train.TestConfig(t, "run.max_steps=1", "sample.max_new_tokens=4", "model.context=64")
	p, tok := policytest.Tiny(t, 3, 1e-3)
	tr := train.New(cfg, train.Deps{Policy: p, Tokenizer: tok, Scorer: shareOfA, Prompter: train.StaticPrompter{}, Tasks: train.FakeTasks(3), Store: p})
	train.Drain(tr)
	if err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	latest, _ := train.LatestCheckpoint(cfg.Run.OutDir)
	rng := filepath.Join(latest, "policy", "extra", "sampler_rng")
	if _, err := os.Stat(rng); err != nil {
		t.Fatalf("the checkpoint has no %s to remove: %v", rng, err)
	}
	os.Remove(rng)
	q, _ := policytest.Tiny(t, 3, 1e-3)
	if err := q.Load(context.Background(), latest); err == nil || !strings.Contains(err.Error(), "sampler_rng") {
		t.Fatalf("a checkpoint without its sampler RNG loaded: %v", err)
	}
}

// A run without KL saves no reference/; resuming it with a KL term says
// why it cannot, rather than reporting a missing file.
func TestNoKLCheckpointHasNoReference(t *testing.T) {
	p, _ := policytest.Tiny(t, 3, 3e-2) // no Ref: grpo.kl_coef = 0
	dir := t.TempDir()
	if err := p.Save(context.Background(), dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "reference")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("reference/ saved without a reference: %v", err)
	}
	q, _ := policytest.Tiny(t, 4, 3e-2)
	q.Ref = &policy.ModelReference{Model: q.Model.Clone()}
	err := q.Load(context.Background(), dir)
	if err == nil || !strings.Contains(err.Error(), "grpo.kl_coef = 0") {
		t.Fatalf("load with a reference: %v", err)
	}
}
