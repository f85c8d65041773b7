package ui

import (
	"fmt"
	"testing"
	"time"

	"github.com/swetui/swetui/event"
)

// benchModel is a console with 1,000 steps of history, 100 steps of groups
// and 10,000 lines in the followed evaluation's log.
func benchModel(b testing.TB, w, h int) *Model {
	m := newTestModel(&fakeCtrl{}, w, h)
	evs := runEvents(1000)
	lines := make([]string, 10000)
	for i := range lines {
		lines[i] = fmt.Sprintf("tests/test_ops.py::test_case_%05d PASSED                                    [ %3d%%]", i, i/100)
	}
	evs = append(evs, event.LogBatch{EvalID: "e-0042", Worker: 0, InstanceID: "mini__calc-12", Lines: lines})
	feed(m, evs...)
	if n := m.st.logs.get("e-0042").Lines.Len(); n != 10000 {
		b.Fatalf("log holds %d lines", n)
	}
	return m
}

// BenchmarkView: go test ./ui -run '^$' -bench View -benchmem
// The goal is under 5 ms a frame.
func BenchmarkView(b *testing.B) {
	for _, c := range []struct {
		name string
		w, h int
		zoom string
	}{
		{"200x50", 200, 50, ""},
		{"80x24", 80, 24, ""},
		{"200x50_containers", 200, 50, "Containers"},
		{"200x50_rewards", 200, 50, "Rewards"},
	} {
		b.Run(c.name, func(b *testing.B) {
			m := benchModel(b, c.w, c.h)
			if c.zoom != "" {
				focusOn(&testing.T{}, m, c.zoom)
				press(m, "enter")
			}
			b.ResetTimer()
			for b.Loop() {
				_ = m.View()
			}
		})
	}
}

// TestViewBudget keeps the benchmark's promise in the ordinary test run, with
// a wide margin for a loaded machine: a frame of the full screen with 10,000
// log lines and 1,000 steps must take well under 50 ms.
func TestViewBudget(t *testing.T) {
	m := benchModel(t, 200, 50)
	start := time.Now()
	const frames = 20
	for range frames {
		_ = m.View()
	}
	if per := time.Since(start) / frames; per > 50*time.Millisecond {
		t.Fatalf("View took %s a frame", per)
	}
}

// TestBoundedMemory runs 10,000 steps (with groups, logs of many evaluations
// and messages) through a console with small bounds and checks that every
// buffer stays within them.
func TestBoundedMemory(t *testing.T) {
	m := New(&fakeCtrl{}, nil, Options{UI: uiOpts(100, 50, 300), Groups: 20})
	m.resize(200, 50)
	feed(m, event.RunInfo{Name: "long", MaxSteps: 10000})
	for s := 1; s <= 10000; s++ {
		evs := []event.Event{event.StepStarted{Step: s}}
		evs = append(evs, groupEvents(s)...)
		evs = append(evs,
			event.LogBatch{EvalID: fmt.Sprintf("e-%d", s), Lines: []string{"a", "b", "c"}},
			event.LogBatch{EvalID: "long", Lines: []string{fmt.Sprint(s)}},
			event.Message{Text: "note"},
			event.StepFinished{Step: s, Metrics: event.Metrics{RewardMean: float64(s)}})
		feed(m, evs...)
		if s%1000 == 0 {
			_ = m.View()
		}
	}
	st := m.st
	if st.history.Len() != 300 || st.groups.Len() != 20 || st.events.Len() != keptEvents {
		t.Fatalf("history %d, groups %d, events %d", st.history.Len(), st.groups.Len(), st.events.Len())
	}
	if len(st.logs.evals) != keptEvals {
		t.Fatalf("%d evaluation logs kept, want %d", len(st.logs.evals), keptEvals)
	}
	long := st.logs.get("long")
	if long == nil || long.Lines.Len() != 50 || long.Lines.At(49) != "10000" {
		t.Fatalf("the long log is %+v", long)
	}
	if g, _ := st.groups.Last(); g.Step != 10000 || len(g.Rows) != 8 {
		t.Fatalf("last group: step %d, %d rows", g.Step, len(g.Rows))
	}
	contains(t, m.View(), "steps 9701–10000")
}
