package train

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/history"
)

// fakeWarmup is a warm start of Steps steps, each taking Delay; it counts
// its runs and saves as the trainer drives it.
type fakeWarmup struct {
	Steps int
	Delay time.Duration
	runs  *int

	mu    sync.Mutex
	done  int
	saves []int // the step at each Save
}

func (f *fakeWarmup) Run(ctx context.Context, h WarmupHooks) error {
	if f.runs != nil {
		*f.runs++
	}
	for step := f.Done() + 1; step <= f.Steps; step++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		time.Sleep(f.Delay)
		f.mu.Lock()
		f.done = step
		f.mu.Unlock()
		ev := event.SFTStep{Step: step, Steps: f.Steps, Loss: 1 / float64(step), LR: 1e-3, Elapsed: time.Duration(step) * f.Delay}
		h.Publish(ev)
		if err := h.AfterStep(ctx, ev); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeWarmup) Save(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.saves = append(f.saves, f.done)
	return nil
}

func (f *fakeWarmup) Done() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.done
}

func (f *fakeWarmup) savedSteps() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.saves...)
}

// waitEvent reads evs until match, failing after a while.
func waitEvent(t *testing.T, evs <-chan event.Event, what string, match func(event.Event) bool) event.Event {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case ev, ok := <-evs:
			if !ok {
				t.Fatalf("the run ended before %s", what)
			}
			if match(ev) {
				return ev
			}
		case <-timeout:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestWarmupIsAStage: during the warm start a pause holds it between steps,
// a save request saves it, phase keys say when they apply, and a stop saves
// what it has; its steps are in metrics.jsonl under sft/*.
func TestWarmupIsAStage(t *testing.T) {
	cfg := testConfig(t, "run.max_steps=2")
	pol := newBandit(6, 0.5, 3)
	wu := &fakeWarmup{Steps: 1000, Delay: 2 * time.Millisecond}
	tr := New(cfg, Deps{Policy: pol, Tokenizer: digitTokenizer{}, Scorer: rewardOf3, Prompter: staticPrompter{},
		Tasks: fakeTasks(5), Store: pol, Warmup: wu})
	evs := observe(tr)
	done := make(chan error, 1)
	go func() { done <- tr.Run(context.Background()) }()

	waitEvent(t, evs, "a warm-start step", func(ev event.Event) bool { _, ok := ev.(event.SFTStep); return ok })
	tr.Pause()
	waitEvent(t, evs, "the pause", func(ev event.Event) bool { _, ok := ev.(event.Paused); return ok })
	held := wu.Done()
	time.Sleep(50 * time.Millisecond)
	if now := wu.Done(); now != held {
		t.Fatalf("the warm start went on while paused: step %d -> %d", held, now)
	}
	tr.SaveNow()
	waitEvent(t, evs, "the save's note", func(ev event.Event) bool {
		m, ok := ev.(event.Message)
		return ok && strings.Contains(m.Text, "warm start saved")
	})
	if s := wu.savedSteps(); len(s) != 1 || s[0] != held {
		t.Fatalf("saves at %v, want one at the paused step %d", s, held)
	}
	tr.SetPhase("apply-only")
	waitEvent(t, evs, "the phase note", func(ev event.Event) bool {
		m, ok := ev.(event.Message)
		return ok && strings.Contains(m.Text, "phase apply-only takes effect when GRPO starts")
	})
	tr.Resume()
	waitEvent(t, evs, "a step after resuming", func(ev event.Event) bool { s, ok := ev.(event.SFTStep); return ok && s.Step > held })
	tr.Stop()
	stopped := waitEvent(t, evs, "Stopped", func(ev event.Event) bool { _, ok := ev.(event.Stopped); return ok }).(event.Stopped)
	if err := <-done; err != nil || stopped.Reason != "stopped" {
		t.Fatalf("stop during the warm start: %v, %+v", err, stopped)
	}
	s := wu.savedSteps()
	if len(s) != 2 || s[1] <= held {
		t.Fatalf("saves at %v: want the stop to save past step %d", s, held)
	}
	// Every step the warm start reported is in metrics.jsonl once.
	data, err := os.ReadFile(filepath.Join(cfg.Run.OutDir, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var l history.SFTLine
		if err := json.Unmarshal([]byte(line), &l); err != nil || l.Stage != "sft" {
			t.Fatalf("metrics line %q", line)
		}
		if seen[l.SFTStep] {
			t.Fatalf("sft step %d twice", l.SFTStep)
		}
		seen[l.SFTStep] = true
	}
	if len(seen) != s[1] {
		t.Fatalf("%d warm-start lines, want %d", len(seen), s[1])
	}
}

// TestWatchdogCountsWarmupProgress: a warm start slower than the stall
// limit in all but its steps is not stopped.
func TestWatchdogCountsWarmupProgress(t *testing.T) {
	cfg := testConfig(t, "run.max_steps=1", "watchdog.stall_s=1")
	pol := newBandit(6, 0.5, 3)
	wu := &fakeWarmup{Steps: 30, Delay: 100 * time.Millisecond} // 3 s in all, 0.1 s a step
	tr := New(cfg, Deps{Policy: pol, Tokenizer: digitTokenizer{}, Scorer: rewardOf3, Prompter: staticPrompter{},
		Tasks: fakeTasks(5), Store: pol, Warmup: wu})
	evs := drain(tr)
	if err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, ev := range <-evs {
		if s, ok := ev.(event.Stopped); ok && s.Reason != "finished" {
			t.Fatalf("stopped: %s", s.Reason)
		}
	}
	if wu.Done() != 30 {
		t.Fatalf("warm start at step %d of 30", wu.Done())
	}
}
