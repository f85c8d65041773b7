package train

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/task"
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

func readLines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

// metricsWithoutTimes drops the fields that differ between two equal runs.
func metricsWithoutTimes(t *testing.T, lines []string) []MetricsLine {
	var out []MetricsLine
	for _, l := range lines {
		var m MetricsLine
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		m.Time = time.Time{}
		m.SampleSeconds, m.RewardSeconds, m.TrainSeconds, m.StepSeconds, m.WaitSeconds = 0, 0, 0, 0, 0
		out = append(out, m)
	}
	return out
}

func TestResumeFollowsTheUninterruptedTrajectory(t *testing.T) {
	straightCfg := testConfig(t, "run.max_steps=12", "grpo.kl_coef=0")
	straight := newBandit(6, 0.5, 11)
	tr := newTestTrainer(straightCfg, straight, rewardOf3)
	drain(tr)
	if err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}

	// The same run in two legs: stop at 5 (checkpoint), then resume to 12 in a new process' worth of objects.
	legCfg := testConfig(t, "run.max_steps=5", "grpo.kl_coef=0")
	first := newBandit(6, 0.5, 11)
	tr = newTestTrainer(legCfg, first, rewardOf3)
	drain(tr)
	if err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	legCfg.Run.MaxSteps = 12
	second := newBandit(6, 0.5, 999) // different seed: everything must come from the checkpoint
	tr = newTestTrainer(legCfg, second, rewardOf3)
	drain(tr)
	if err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(straight.Theta, second.Theta) {
		t.Fatalf("resumed θ %v != uninterrupted θ %v", second.Theta, straight.Theta)
	}
	a := metricsWithoutTimes(t, readLines(t, filepath.Join(straightCfg.Run.OutDir, "metrics.jsonl")))
	b := metricsWithoutTimes(t, readLines(t, filepath.Join(legCfg.Run.OutDir, "metrics.jsonl")))
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("metrics differ:\n%v\n%v", a, b)
	}
}

func TestCheckpointsAreAtomicAndPruned(t *testing.T) {
	cfg := testConfig(t, "run.max_steps=7", "run.save_every=2", "run.keep_last=2")
	pol := newBandit(6, 0.5, 3)
	tr := newTestTrainer(cfg, pol, rewardOf3)
	drain(tr)
	if err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(cfg.Run.OutDir, checkpointsDir)
	// A save killed half-way leaves a temporary folder and no state.json: ignored.
	if err := os.MkdirAll(filepath.Join(root, ".tmp-123"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "step-00000099"), 0o755); err != nil {
		t.Fatal(err)
	}
	steps, err := listCheckpoints(root)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range steps {
		names = append(names, filepath.Base(s))
	}
	if want := []string{"step-00000006", "step-00000007"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("checkpoints %v, want %v", names, want)
	}
	latest, _ := LatestCheckpoint(cfg.Run.OutDir)
	if filepath.Base(latest) != "step-00000007" {
		t.Fatalf("latest %s", latest)
	}
}

func TestMismatchedCheckpointIsRefused(t *testing.T) {
	cfg := testConfig(t, "run.max_steps=1")
	pol := newBandit(6, 0.5, 3)
	tr := newTestTrainer(cfg, pol, rewardOf3)
	drain(tr)
	if err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	cfg.Model.DModel = 64
	cfg.Run.MaxSteps = 2
	tr = newTestTrainer(cfg, newBandit(6, 0.5, 3), rewardOf3)
	drain(tr)
	err := tr.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "model.d_model is 128 there and 64 here") {
		t.Fatalf("want a refusal naming model.d_model, got %v", err)
	}
}

// blockingScorer holds every Score call until release is closed.
type blockingScorer struct {
	entered chan struct{}
	release chan struct{}
}

func (b blockingScorer) Score(ctx context.Context, inst *task.Instance, c []string, phase string) ([]event.Verdict, error) {
	select {
	case b.entered <- struct{}{}:
	default:
	}
	<-b.release
	return rewardOf3.Score(ctx, inst, c, phase)
}

func TestPauseHoldsAndResumeContinues(t *testing.T) {
	cfg := testConfig(t, "run.max_steps=0") // no limit
	pol := newBandit(6, 0.5, 3)
	tr := newTestTrainer(cfg, pol, rewardOf3)
	events := observe(tr)
	done := make(chan error, 1)
	go func() { done <- tr.Run(context.Background()) }()

	waitFor := func(match func(event.Event) bool) event.Event {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case ev := <-events:
				if match(ev) {
					return ev
				}
			case <-timeout:
				t.Fatal("timed out waiting for an event")
			}
		}
	}
	waitFor(func(ev event.Event) bool { _, ok := ev.(event.StepFinished); return ok })
	tr.Pause()
	paused := waitFor(func(ev event.Event) bool { _, ok := ev.(event.Paused); return ok }).(event.Paused)
	// While paused no step starts.
	deadline := time.After(300 * time.Millisecond)
	for quiet := true; quiet; {
		select {
		case ev := <-events:
			if sf, ok := ev.(event.StepFinished); ok && sf.Step > paused.Step {
				t.Fatalf("step %d finished while paused at %d", sf.Step, paused.Step)
			}
		case <-deadline:
			quiet = false
		}
	}
	tr.SetPhase("apply-only")
	waitFor(func(ev event.Event) bool { pc, ok := ev.(event.PhaseChanged); return ok && pc.To == "apply-only" })
	tr.Resume()
	waitFor(func(ev event.Event) bool { _, ok := ev.(event.Resumed); return ok })
	sf := waitFor(func(ev event.Event) bool { _, ok := ev.(event.StepFinished); return ok }).(event.StepFinished)
	if sf.Phase != "apply-only" || sf.Step != paused.Step+1 {
		t.Fatalf("after resume: step %d phase %s, want step %d in apply-only", sf.Step, sf.Phase, paused.Step+1)
	}
	tr.Stop()
	waitFor(func(ev event.Event) bool { _, ok := ev.(event.CheckpointSaved); return ok })
	st := waitFor(func(ev event.Event) bool { _, ok := ev.(event.Stopped); return ok }).(event.Stopped)
	if st.Reason != "stopped" {
		t.Fatalf("stopped: %+v", st)
	}
	for range events {
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestCancelMidStepSavesAndStops(t *testing.T) {
	cfg := testConfig(t, "run.max_steps=0")
	pol := newBandit(6, 0.5, 3)
	sc := blockingScorer{entered: make(chan struct{}, 1), release: make(chan struct{})}
	tr := newTestTrainer(cfg, pol, sc)
	evs := drain(tr)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tr.Run(ctx) }()
	<-sc.entered
	cancel()
	close(sc.release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	var stopped event.Stopped
	for _, ev := range <-evs {
		if s, ok := ev.(event.Stopped); ok {
			stopped = s
		}
	}
	if stopped.Reason != "interrupted" {
		t.Fatalf("stopped: %+v", stopped)
	}
	if latest, _ := LatestCheckpoint(cfg.Run.OutDir); latest == "" {
		t.Fatal("no checkpoint after interruption")
	}
}

func TestWarmupRunsOnlyOnAFreshRun(t *testing.T) {
	cfg := testConfig(t, "run.max_steps=2")
	calls := 0
	run := func() []event.Event {
		pol := newBandit(6, 0.5, 3)
		tr := New(cfg, Deps{Policy: pol, Tokenizer: digitTokenizer{}, Scorer: rewardOf3, Prompter: staticPrompter{},
			Tasks: fakeTasks(5), Store: pol, Warmup: func(ctx context.Context, publish func(event.Event)) error {
				calls++
				publish(event.StageChanged{Stage: "sft", Progress: 1, Detail: "done"})
				return nil
			}})
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
	if calls != 1 || !reflect.DeepEqual(stages, []string{"sft", "sft", "grpo"}) {
		t.Fatalf("fresh run: %d warm-ups, stages %v", calls, stages)
	}
	cfg.Run.MaxSteps = 4
	run()
	if calls != 1 {
		t.Fatalf("resumed run warmed up again (%d calls)", calls)
	}
}

func TestDockerPhaseRefusedWithoutDocker(t *testing.T) {
	cfg := testConfig(t, "run.max_steps=0")
	pol := newBandit(6, 0.5, 3)
	tr := New(cfg, Deps{Policy: pol, Tokenizer: digitTokenizer{}, Scorer: rewardOf3, Prompter: staticPrompter{},
		Tasks: fakeTasks(5), DockerOK: false})
	evs := observe(tr)
	done := make(chan error, 1)
	go func() { done <- tr.Run(context.Background()) }()
	tr.SetPhase("docker")
	var warning event.Message
	for ev := range evs {
		switch e := ev.(type) {
		case event.PhaseChanged:
			t.Fatalf("switched to %s without Docker", e.To)
		case event.Message:
			if e.Level == event.Warn {
				warning = e
				tr.Stop()
			}
		case event.StepFinished:
			if e.Phase == "docker" {
				t.Fatal("a docker step ran without Docker")
			}
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(warning.Text, "docker phase unavailable: the Docker daemon is not reachable") {
		t.Fatalf("warning %q", warning.Text)
	}
}
