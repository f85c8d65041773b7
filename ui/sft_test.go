package ui

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/swetui/swetui/event"
)

// logged is the event log's lines, oldest first.
func logged(m *Model) []string {
	var out []string
	for i := 0; i < m.st.events.Len(); i++ {
		out = append(out, m.st.events.At(i).Text)
	}
	return out
}

// countLogged is how many event-log lines contain text.
func countLogged(m *Model, text string) int {
	n := 0
	for _, l := range logged(m) {
		if strings.Contains(l, text) {
			n++
		}
	}
	return n
}

func firstLineOf(view string) string { l, _, _ := strings.Cut(view, "\n"); return l }

// TestWarmStart: during the warm start (stage "sft") the header, charts and
// panes show it, and the controls say what they do then; table-driven over
// keys and the trainer's answers, as TestKeys.
func TestWarmStart(t *testing.T) {
	sft := sftEvents(38, 100)
	cases := []struct {
		name   string
		events []event.Event
		keys   []string
		ack    []event.Event
		calls  []call
		state  runState
		logs   map[string]int // event-log text -> how many lines hold it
		screen []string       // on screen
	}{
		{name: "header and panes", events: sft, state: stateRunning,
			screen: []string{"warm start 38/100", "eta 0:02:04", "loss 0.951", "held-out 2.000", "0.50 steps/s",
				"Rewards · warm start 1–38/100", "held-out loss", "Group · none until GRPO starts",
				"Diff · none until GRPO starts", "when GRPO starts, in about 0:02:04"}},
		{name: "before the first step", events: sft[:2], state: stateRunning,
			screen: []string{"RUNNING  warm start", "Rewards · warm start · no step yet"}},
		{name: "p pauses after the step", events: sft, keys: []string{"p"}, calls: []call{{"Pause", ""}},
			state: statePausing, logs: map[string]int{"asked: pause the warm start": 1}, screen: []string{"PAUSING"}},
		{name: "Paused shows PAUSED", events: sft, keys: []string{"p"}, ack: []event.Event{event.Paused{}},
			calls: []call{{"Pause", ""}}, state: statePaused,
			logs: map[string]int{"paused the warm start at step 38/100": 1}, screen: []string{"PAUSED", "space resume"}},
		{name: "p again while PAUSING cancels the pause", events: sft, keys: []string{"p", "p"},
			calls: []call{{"Pause", ""}, {"Resume", ""}}, state: stateRunning,
			logs: map[string]int{"asked: cancel the pause": 1}, screen: []string{"RUNNING", "space pause"}},
		{name: "a cancelled pause that took hold resumes", events: sft, keys: []string{"p", "p"},
			ack: []event.Event{event.Paused{}, event.Resumed{}}, calls: []call{{"Pause", ""}, {"Resume", ""}},
			state: stateRunning, logs: map[string]int{"paused the warm start": 1, "resumed the warm start": 1}},
		{name: "a cancelled pause, Paused not yet Resumed", events: sft, keys: []string{"p", "p"},
			ack: []event.Event{event.Paused{}}, calls: []call{{"Pause", ""}, {"Resume", ""}}, state: stateResuming},
		{name: "a cancelled pause the trainer never took", events: sft, keys: []string{"p", "p"},
			ack:   []event.Event{event.SFTStep{Step: 39, Steps: 100, Loss: 0.9, Elapsed: 78 * time.Second}},
			calls: []call{{"Pause", ""}, {"Resume", ""}}, state: stateRunning},
		{name: "p three times pauses again", events: sft, keys: []string{"p", "p", "p"},
			calls: []call{{"Pause", ""}, {"Resume", ""}, {"Pause", ""}}, state: statePausing},
		{name: "phase keys take effect when GRPO starts", events: sft, keys: []string{"2", "3"},
			calls: []call{{"SetPhase", "apply-only"}, {"SetPhase", "docker"}}, state: stateRunning,
			logs: map[string]int{"asked: phase apply-only (takes effect when GRPO starts)": 1,
				"asked: phase docker (takes effect when GRPO starts)": 1}},
		{name: "a asks once, the answer is logged once", events: sft, keys: []string{"a"},
			ack:   []event.Event{event.AutoChanged{Auto: false}, event.AutoChanged{Auto: false}},
			calls: []call{{"SetAuto", "false"}}, state: stateRunning,
			logs: map[string]int{"asked: auto-curriculum off (takes effect when GRPO starts)": 1,
				"auto-curriculum off": 2}}, // the question and one answer
		{name: "a twice before an answer is off then on", events: sft, keys: []string{"a", "a"},
			calls: []call{{"SetAuto", "false"}, {"SetAuto", "true"}}, state: stateRunning,
			logs: map[string]int{"asked: auto-curriculum off": 1, "asked: auto-curriculum on": 1}},
		{name: "q asks while the warm start runs", events: sft, keys: []string{"q"}, state: stateRunning,
			screen: []string{"The warm start is at step 38/100. Stop the run and quit? y/n"}},
		{name: "q then n carries on", events: sft, keys: []string{"q", "n"}, state: stateRunning,
			screen: []string{"? help"}},
		{name: "q then y stops", events: sft, keys: []string{"q", "y"}, calls: []call{{"Stop", ""}}, state: stateStopping},
		{name: "q when paused stops without asking", events: append(append([]event.Event(nil), sft...), event.Paused{}),
			keys: []string{"q"}, calls: []call{{"Stop", ""}}, state: stateStopping},
		{name: "r has nothing to replay", events: sft, keys: []string{"r"}, state: stateRunning,
			logs: map[string]int{"replay: no completion selected": 1}},
		{name: "GRPO starts", events: append(append([]event.Event(nil), sft...), event.StageChanged{Stage: "grpo"},
			event.StepStarted{Step: 1, Phase: "syntax"}), state: stateRunning,
			screen: []string{"step 1/200*", "weights v0", "reward mean", "Group · waiting for the first completions"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctrl := &fakeCtrl{}
			m := newTestModel(ctrl, 120, 40)
			feed(m, c.events...)
			press(m, c.keys...)
			if len(c.ack) > 0 {
				feed(m, c.ack...)
			}
			if got := ctrl.Calls(); !reflect.DeepEqual(got, c.calls) {
				t.Errorf("calls %v, want %v", got, c.calls)
			}
			view := m.View()
			checkFrame(t, view, 120, 40)
			if got := m.st.runState(); got != c.state {
				t.Errorf("state %s, want %s", got, c.state)
			}
			if !strings.Contains(firstLineOf(view), c.state.String()) {
				t.Errorf("header lacks %s: %q", c.state, firstLineOf(view))
			}
			for text, n := range c.logs {
				if got := countLogged(m, text); got != n {
					t.Errorf("%d log lines hold %q, want %d: %q", got, text, n, logged(m))
				}
			}
			for _, s := range c.screen {
				contains(t, view, s)
			}
		})
	}
}

// TestWarmStartChartsReachable: once GRPO runs, the Rewards pane shows its
// charts, and zoomed, the warm start's below them.
func TestWarmStartChartsReachable(t *testing.T) {
	m := newTestModel(&fakeCtrl{}, 120, 40)
	feed(m, sftEvents(100, 100)...)
	feed(m, runEvents(10)[1:]...) // GRPO, without a second RunInfo
	if m.st.inSFT() {
		t.Fatal("still in the warm start")
	}
	view := m.View()
	if strings.Contains(view, "sft loss") {
		t.Fatalf("the warm start's charts are in the unzoomed pane:\n%s", view)
	}
	focusOn(t, m, "Rewards")
	press(m, "enter")
	view = m.View()
	checkFrame(t, view, 120, 40)
	for _, s := range []string{"reward mean", "sft loss", "sft held-out"} {
		contains(t, view, s)
	}
	press(m, "G")
	for range m.rewards.charts() {
		press(m, "j")
	}
	if m.rewards.sel != len(m.rewards.charts())-1 {
		t.Fatalf("j stops at chart %d of %d", m.rewards.sel, len(m.rewards.charts()))
	}
}

// TestWarmStartRate: steps/s and the ETA come from the newest steps; a
// resumed warm start counts only the steps this process ran.
func TestWarmStartRate(t *testing.T) {
	cases := []struct {
		name     string
		steps    []event.SFTStep
		rate     float64
		eta      time.Duration
		haveRate bool
	}{
		{"none", nil, 0, 0, false},
		{"one step", []event.SFTStep{{Step: 1, Steps: 11, Elapsed: 2 * time.Second}}, 0.5, 20 * time.Second, true},
		{"resumed", []event.SFTStep{{Step: 51, Steps: 100, Resumed: 50, Elapsed: 4 * time.Second}}, 0.25, 196 * time.Second, true},
		{"window", []event.SFTStep{{Step: 1, Steps: 10, Elapsed: 100 * time.Second}, {Step: 2, Steps: 10, Elapsed: 101 * time.Second},
			{Step: 3, Steps: 10, Elapsed: 102 * time.Second}}, 1, 7 * time.Second, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := newTestModel(&fakeCtrl{}, 80, 24)
			feed(m, sftEvents(0, 0)...)
			for _, s := range c.steps {
				feed(m, s)
			}
			rate, ok := m.st.sftRate()
			eta, _ := m.st.sftETA()
			if ok != c.haveRate || fmt.Sprintf("%.3f", rate) != fmt.Sprintf("%.3f", c.rate) || eta.Round(time.Second) != c.eta {
				t.Fatalf("rate %v (%v), eta %v; want %v, %v", rate, ok, eta, c.rate, c.eta)
			}
		})
	}
}

// TestPauseRequestsAlternate: however the trainer's answers interleave with
// presses of p (the trainer answers each request in order), the console's
// requests alternate Pause, Resume, ... and, once all are answered, the
// header says what the last press asked for. (An answer to an older request
// once cleared the newer one's, and the next p repeated a Pause.)
func TestPauseRequestsAlternate(t *testing.T) {
	const presses = 5
	var walk func(m *Model, ctrl *fakeCtrl, pressed, answered int, trace string)
	n := 0
	walk = func(m *Model, ctrl *fakeCtrl, pressed, answered int, trace string) {
		calls := ctrl.Calls()
		if pressed < presses {
			m2, c2 := cloneModel(t, trace+"p")
			walk(m2, c2, pressed+1, answered, trace+"p")
		}
		if answered < len(calls) {
			m2, c2 := cloneModel(t, trace+"a")
			walk(m2, c2, pressed, answered+1, trace+"a")
		}
		if pressed < presses || answered < len(calls) {
			return
		}
		n++
		for i, c := range calls {
			if want := []string{"Pause", "Resume"}[i%2]; c.Method != want {
				t.Fatalf("%s: request %d is %s, want %s (%v)", trace, i+1, c.Method, want, calls)
			}
		}
		want := stateRunning
		if presses%2 == 1 {
			want = statePaused
		}
		if got := m.st.runState(); got != want || m.st.asked != 0 {
			t.Fatalf("%s: %s with %d unanswered, want %s", trace, got, m.st.asked, want)
		}
	}
	m, ctrl := cloneModel(t, "")
	walk(m, ctrl, 0, 0, "")
	if n < 40 {
		t.Fatalf("only %d interleavings", n)
	}
}

// cloneModel replays trace (p: press p; a: the trainer answers its oldest
// unanswered request) on a fresh console in its warm start.
func cloneModel(t *testing.T, trace string) (*Model, *fakeCtrl) {
	ctrl := &fakeCtrl{}
	m := newTestModel(ctrl, 80, 24)
	feed(m, sftEvents(5, 100)...)
	answered := 0
	for _, c := range trace {
		switch c {
		case 'p':
			press(m, "p")
		case 'a':
			if ctrl.Calls()[answered].Method == "Pause" {
				feed(m, event.Paused{}, event.SFTStep{Step: 6, Steps: 100, Elapsed: 12 * time.Second})
			} else {
				feed(m, event.Resumed{}, event.SFTStep{Step: 7, Steps: 100, Elapsed: 14 * time.Second})
			}
			answered++
		}
	}
	return m, ctrl
}
