package train

import (
	"context"
	"reflect"
	"testing"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
)

func testConfig(t *testing.T, overrides ...string) config.Config {
	t.Helper()
	base := []string{"run.out_dir=" + t.TempDir(), "run.max_steps=30", "run.save_every=0",
		"grpo.group_size=8", "grpo.prompts_per_step=2", "grpo.kl_coef=0", "curriculum.auto=false", "curriculum.window=5"}
	cfg, err := config.Load("", nil, append(base, overrides...))
	if err != nil {
		t.Fatal(err)
	}
	if err := config.Validate(cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// rewardOf3 rewards completion "3": a valid, applying patch in this fake world.
var rewardOf3 = rewardFunc(func(text string) event.Verdict {
	if text == "3" {
		return event.Verdict{Reward: 1, SyntaxOK: true, Applied: true}
	}
	return event.Verdict{Reward: 0, SyntaxOK: text == "2"}
})

func newTestTrainer(cfg config.Config, pol *banditPolicy, scorer Scorer) *Trainer {
	return New(cfg, Deps{Policy: pol, Reference: nil, Tokenizer: digitTokenizer{}, Scorer: scorer,
		Prompter: staticPrompter{}, Tasks: fakeTasks(5), Store: pol, DockerOK: true})
}

// observe subscribes to tr's events; call it before Run. The channel ends
// after the run's last event, Stopped.
func observe(tr *Trainer) <-chan event.Event {
	bus := event.NewBus()
	sub := bus.Subscribe(EventBuffer)
	tr.d.Events = bus
	out := make(chan event.Event, EventBuffer)
	go func() {
		defer close(out)
		defer bus.Close()
		for ev := range sub.Events() {
			out <- ev
			if _, ok := ev.(event.Stopped); ok {
				return
			}
		}
	}()
	return out
}

func drain(tr *Trainer) <-chan []event.Event {
	done := make(chan []event.Event, 1)
	evCh := observe(tr)
	go func() {
		var evs []event.Event
		for ev := range evCh {
			evs = append(evs, ev)
		}
		done <- evs
	}()
	return done
}

func TestGRPOLearnsTheRewardedCompletion(t *testing.T) {
	cfg := testConfig(t)
	pol := newBandit(6, 0.5, 7)
	tr := newTestTrainer(cfg, pol, rewardOf3)
	evs := drain(tr)
	if err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-evs
	p := pol.probs()
	if p[3] < 0.9 {
		t.Fatalf("p(rewarded) = %.3f after 30 steps, want ≥ 0.9 (started at 1/6)", p[3])
	}
}

func TestZeroVarianceGroupContributesNoGradient(t *testing.T) {
	cfg := testConfig(t, "grpo.kl_coef=0.5", "run.max_steps=3")
	pol := newBandit(6, 0.5, 7)
	tr := New(cfg, Deps{Policy: pol, Reference: pol, Tokenizer: digitTokenizer{},
		Scorer:   rewardFunc(func(string) event.Verdict { return event.Verdict{Reward: 0.3, SyntaxOK: true} }),
		Prompter: staticPrompter{}, Tasks: fakeTasks(5)})
	evs := drain(tr)
	if err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, th := range pol.Theta {
		if th != 0 {
			t.Fatalf("θ moved to %v on constant rewards (KL-only gradient leaked)", pol.Theta)
		}
	}
	var last event.StepFinished
	for _, ev := range <-evs {
		if sf, ok := ev.(event.StepFinished); ok {
			last = sf
		}
	}
	if last.Metrics.FracZeroStd != 1 {
		t.Fatalf("frac_reward_zero_std = %v, want 1", last.Metrics.FracZeroStd)
	}
}

func TestInfraFailuresAreMaskedNotZero(t *testing.T) {
	// Completion "3" is an infra failure: it must not be pushed down as if it scored 0.
	cfg := testConfig(t, "run.max_steps=20")
	pol := newBandit(6, 0.5, 7)
	infra3 := rewardFunc(func(text string) event.Verdict {
		switch text {
		case "3":
			return event.Verdict{Infra: true}
		case "1":
			return event.Verdict{Reward: 1, SyntaxOK: true}
		}
		return event.Verdict{}
	})
	tr := newTestTrainer(cfg, pol, infra3)
	evs := drain(tr)
	if err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	infra := 0
	for _, ev := range <-evs {
		if sf, ok := ev.(event.StepFinished); ok {
			infra += sf.Metrics.InfraFailures
		}
	}
	if infra == 0 {
		t.Fatal("no infra failures counted")
	}
	// θ3 moves only through the softmax normaliser of other tokens' updates,
	// never by a negative advantage of its own: it stays above the losers'.
	p := pol.probs()
	if p[3] <= p[0] || p[3] <= p[5] {
		t.Fatalf("masked completion was punished: p = %v", p)
	}
}

func TestWarmupRunsOnlyOnAFreshRun(t *testing.T) {
	cfg := testConfig(t, "run.max_steps=2")
	calls := 0
	run := func() []event.Event {
		pol := newBandit(6, 0.5, 3)
		tr := New(cfg, Deps{Policy: pol, Tokenizer: digitTokenizer{}, Scorer: rewardOf3, Prompter: staticPrompter{},
			Tasks: fakeTasks(5), Store: pol, Warmup: &fakeWarmup{runs: &calls}})
		evs := drain(tr)
		if err := tr.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		return <-evs
	}
	var stages []string
	for _, ev := range run() {
		if sc, ok := ev.(event.StageChanged); ok {
			stages = append(stages, sc.Stage)
		}
	}
	if calls != 1 || !reflect.DeepEqual(stages, []string{"sft", "grpo"}) {
		t.Fatalf("fresh run: %d warm-ups, stages %v", calls, stages)
	}
	cfg.Run.MaxSteps = 4
	run()
	if calls != 1 {
		t.Fatalf("resumed run warmed up again (%d calls)", calls)
	}
}

func TestMaxMinutesStopsTheRunAfterAStep(t *testing.T) {
	cfg := testConfig(t, "run.max_minutes=1e-9") // passed by the end of the first step
	tr := newTestTrainer(cfg, newBandit(6, 0.5, 7), rewardOf3)
	evs := drain(tr)
	if err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	var stopped event.Stopped
	for _, ev := range <-evs {
		if s, ok := ev.(event.Stopped); ok {
			stopped = s
		}
	}
	if stopped.Step != 1 || stopped.Reason != TimeBudgetReason {
		t.Fatalf("stopped at step %d (%q), want step 1 (%q)", stopped.Step, stopped.Reason, TimeBudgetReason)
	}
}
