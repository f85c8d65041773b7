package train

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/task"
)

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
	if stopped, _ := lastStopped(<-evs); stopped.Reason != "interrupted" {
		t.Fatalf("stopped: %+v", stopped)
	}
	if latest, _ := LatestCheckpoint(cfg.Run.OutDir); latest == "" {
		t.Fatal("no checkpoint after interruption")
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
	// Other warnings (a barren epoch of the bandit) may come first: wait for
	// the one this test is about.
	const want = "docker phase unavailable: the Docker daemon is not reachable"
	warned := false
	timeout := time.After(time.Minute)
	for ev := range evs {
		switch e := ev.(type) {
		case event.PhaseChanged:
			t.Fatalf("switched to %s without Docker", e.To)
		case event.Message:
			if e.Level == event.Warn && strings.Contains(e.Text, want) && !warned {
				warned = true
				tr.Stop()
			}
		case event.StepFinished:
			if e.Phase == "docker" {
				t.Fatal("a docker step ran without Docker")
			}
		}
		select {
		case <-timeout:
			tr.Stop()
			t.Fatalf("no warning %q within a minute", want)
		default:
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !warned {
		t.Fatalf("the run ended without the warning %q", want)
	}
}
