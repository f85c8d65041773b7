package train

import (
	"context"
	"strings"
	"testing"

	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/model/cuda"
)

// TestGRPOOnTheDevicePolicyLearns runs the trainer on the device backend's
// CPU implementation (the same orchestration a GPU runs): GRPO raises the
// rewarded share of "a", and its checkpoint loads into the CPU policy.
func TestGRPOOnTheDevicePolicyLearns(t *testing.T) {
	cfg := testConfig(t, "run.max_steps=25", "grpo.group_size=8", "grpo.prompts_per_step=1",
		"sample.max_new_tokens=8", "model.context=64", "grpo.kl_coef=0.02")
	host, tok := tinyModelPolicy(t, 3, 3e-2)
	dev := cuda.NewCPU()
	p, err := cuda.NewPolicy(dev, host.Model, cuda.F32, host.Optim, host.Schedule, host.GradClip, host.stop, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.Temp = 1
	r, err := cuda.NewReference(dev, host.Model, cuda.F32, 1)
	if err != nil {
		t.Fatal(err)
	}
	ref := &DeviceReference{R: r}
	pol := &DevicePolicy{P: p, Host: host.Model.Clone(), Tokenizer: tok, Ref: ref}
	share := rewardFunc(func(text string) event.Verdict {
		if len(text) == 0 {
			return event.Verdict{}
		}
		return event.Verdict{Reward: float64(strings.Count(text, "a")) / float64(len(text)), SyntaxOK: true}
	})
	tr := New(cfg, Deps{Policy: pol, Reference: ref, Tokenizer: tok, Scorer: share, Prompter: staticPrompter{},
		Tasks: fakeTasks(3), Store: pol})
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
	t.Logf("mean reward on the device policy: first 5 steps %.3f, last 5 steps %.3f", first, last)
	if last < first+0.2 {
		t.Fatalf("reward %.3f over the first 5 steps, %.3f over the last 5: no learning", first, last)
	}
	latest, err := LatestCheckpoint(cfg.Run.OutDir)
	if err != nil || latest == "" {
		t.Fatalf("no checkpoint: %v", err)
	}
	q, _ := tinyModelPolicy(t, 99, 3e-2)
	q.Ref = &ModelReference{Model: q.Model.Clone()}
	if err := q.Load(context.Background(), latest); err != nil {
		t.Fatalf("the CPU policy cannot read the device policy's checkpoint: %v", err)
	}
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
