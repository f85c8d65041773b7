package train

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/task"
)

// stuckScorer never finishes unless its context ends.
type stuckScorer struct{ entered chan struct{} }

func (s stuckScorer) Score(ctx context.Context, inst *task.Instance, c []string, phase string) ([]event.Verdict, error) {
	select {
	case s.entered <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

func lastStopped(evs []event.Event) (event.Stopped, []event.Message) {
	var st event.Stopped
	var msgs []event.Message
	for _, ev := range evs {
		switch e := ev.(type) {
		case event.Stopped:
			st = e
		case event.Message:
			msgs = append(msgs, e)
		}
	}
	return st, msgs
}

func TestWatchdogWarnsThenStops(t *testing.T) {
	cfg := testConfig(t, "run.max_steps=0", "watchdog.stall_s=1")
	pol := newBandit(6, 0.5, 1)
	tr := newTestTrainer(cfg, pol, stuckScorer{entered: make(chan struct{}, 1)})
	evs := drain(tr)
	done := make(chan error, 1)
	go func() { done <- tr.Run(context.Background()) }()
	select {
	case err := <-done:
		// A stalled run failed: its error is what makes swetui exit 1.
		if err == nil || !strings.Contains(err.Error(), "watchdog") {
			t.Fatalf("Run returned %v, want the watchdog's error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a stuck evaluation hung the run past its watchdog")
	}
	st, msgs := lastStopped(<-evs)
	if st.Reason != "watchdog: no progress" || st.Err == nil {
		t.Fatalf("stopped: %+v", st)
	}
	var levels []event.Level
	for _, m := range msgs {
		if strings.HasPrefix(m.Text, "watchdog:") {
			levels = append(levels, m.Level)
		}
	}
	if len(levels) != 2 || levels[0] != event.Warn || levels[1] != event.Error {
		t.Fatalf("watchdog messages %v, want a warning then an error", msgs)
	}
}

func TestStopAbandonsAStuckStep(t *testing.T) {
	cfg := testConfig(t, "run.max_steps=0", "watchdog.stall_s=0")
	pol := newBandit(6, 0.5, 1)
	sc := stuckScorer{entered: make(chan struct{}, 1)}
	tr := newTestTrainer(cfg, pol, sc)
	evs := drain(tr)
	done := make(chan error, 1)
	go func() { done <- tr.Run(context.Background()) }()
	<-sc.entered
	tr.Stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Stop did not end a run whose step was stuck")
	}
	if st, _ := lastStopped(<-evs); st.Reason != "stopped" {
		t.Fatalf("stopped: %+v", st)
	}
	if latest, _ := LatestCheckpoint(cfg.Run.OutDir); latest == "" {
		t.Fatal("no checkpoint at stop")
	}
}

func TestNothingTrainableWarnsThenStops(t *testing.T) {
	cfg := testConfig(t, "run.max_steps=0")
	pol := newBandit(6, 0.5, 1)
	constant := rewardFunc(func(string) event.Verdict { return event.Verdict{} })
	tr := newTestTrainer(cfg, pol, constant)
	evs := drain(tr)
	err := tr.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "3 epochs in a row had nothing trainable") {
		t.Fatalf("want a clear stop, got %v", err)
	}
	st, msgs := lastStopped(<-evs)
	// 5 tasks, 2 per step: 3 steps an epoch, so the stop comes at step 9.
	if st.Step != 9 || st.Reason != "error" {
		t.Fatalf("stopped %+v", st)
	}
	warned := false
	for _, m := range msgs {
		warned = warned || (m.Level == event.Warn && strings.Contains(m.Text, "a whole epoch (3 steps) had nothing trainable"))
	}
	if !warned {
		t.Fatalf("no warning before the stop: %v", msgs)
	}
}
