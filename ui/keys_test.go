package ui

import (
	"reflect"
	"strings"
	"testing"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/swetui/swetui/event"
)

// isQuit runs cmd and reports whether it quits the program.
func isQuit(cmd tea.Cmd) bool {
	if cmd == nil {
		return false
	}
	_, ok := cmd().(tea.QuitMsg)
	return ok
}

// TestKeys: each key, from a given situation, sends the expected controls
// and leaves the console in the expected state.
func TestKeys(t *testing.T) {
	completion := "I will fix the division.\n```diff\n" + sampleDiff + "```\n"
	running := runEvents(40) // step 41 in flight, auto on, phase apply-only
	between := append(runEvents(40)[:0:0], runEvents(40)...)
	between = append(between, event.StepFinished{Step: 41, Version: 41}) // no step in flight
	stopped := append(append([]event.Event(nil), running...), event.Stopped{Step: 41, Reason: "max_steps"})
	cases := []struct {
		name   string
		events []event.Event
		keys   []string
		ack    []event.Event // events after the keys (the trainer's answer)
		close  bool          // then the trainer closes its channel
		calls  []call
		quit   bool
		check  func(t *testing.T, m *Model)
	}{
		{name: "space pauses", events: running, keys: []string{" "}, calls: []call{{"Pause", ""}},
			check: wantState(statePausing)},
		{name: "p pauses, ack shows PAUSED", events: running, keys: []string{"p"}, ack: []event.Event{event.Paused{Step: 41}},
			calls: []call{{"Pause", ""}}, check: wantState(statePaused)},
		{name: "p resumes when paused", events: append(append([]event.Event(nil), running...), event.Paused{Step: 41}),
			keys: []string{"p"}, calls: []call{{"Resume", ""}}, check: wantState(stateResuming)},
		{name: "resume ack shows RUNNING", events: append(append([]event.Event(nil), running...), event.Paused{Step: 41}),
			keys: []string{" "}, ack: []event.Event{event.Resumed{Step: 41}}, calls: []call{{"Resume", ""}},
			check: wantState(stateRunning)},
		{name: "1 syntax", events: running, keys: []string{"1"}, calls: []call{{"SetPhase", "syntax"}}},
		{name: "2 apply-only", events: running, keys: []string{"2"}, calls: []call{{"SetPhase", "apply-only"}}},
		{name: "3 docker, ack in header", events: running, keys: []string{"3"},
			ack:   []event.Event{event.PhaseChanged{Step: 41, From: "apply-only", To: "docker"}},
			calls: []call{{"SetPhase", "docker"}},
			check: func(t *testing.T, m *Model) { contains(t, m.View(), "DOCKER") }},
		{name: "a turns auto off", events: running, keys: []string{"a"}, calls: []call{{"SetAuto", "false"}}},
		{name: "a turns auto on", events: append(append([]event.Event(nil), running...), event.AutoChanged{Auto: false}),
			keys: []string{"a"}, calls: []call{{"SetAuto", "true"}}},
		{name: "s saves", events: running, keys: []string{"s"}, calls: []call{{"SaveNow", ""}}},
		{name: "r replays the selection", events: running, keys: []string{"j", "r"},
			calls: []call{{"Replay", "mini__calc-12|" + completion}}},
		{name: "r without a selection", keys: []string{"r"}, calls: nil,
			check: func(t *testing.T, m *Model) { contains(t, m.View(), "replay: no completion selected") }},
		{name: "replay result is logged", events: running, keys: []string{"r"},
			ack: []event.Event{event.CompletionScored{Step: -1,
				Verdict: event.Verdict{InstanceID: "mini__calc-12", Reward: 1, SyntaxOK: true, Applied: true, Resolved: true}}},
			calls: []call{{"Replay", "mini__calc-12|" + completion}},
			check: func(t *testing.T, m *Model) {
				contains(t, m.View(), "replay mini__calc-12: reward 1.000 (resolved)")
			}},
		{name: "tab focuses next", events: running, keys: []string{"tab"},
			check: func(t *testing.T, m *Model) { wantFocus(t, m, "Diff") }},
		{name: "shift+tab focuses previous", events: running, keys: []string{"shift+tab"},
			check: func(t *testing.T, m *Model) { wantFocus(t, m, "Rewards") }},
		{name: "tab wraps", events: running, keys: []string{"tab", "tab", "tab", "tab"},
			check: func(t *testing.T, m *Model) { wantFocus(t, m, "Rewards") }},
		{name: "enter zooms, enter unzooms", events: running, keys: []string{"enter"},
			check: func(t *testing.T, m *Model) {
				if !m.zoomed {
					t.Fatal("not zoomed")
				}
				press(m, "enter")
				if m.zoomed {
					t.Fatal("still zoomed")
				}
			}},
		{name: "esc unzooms", events: running, keys: []string{"enter", "esc"},
			check: func(t *testing.T, m *Model) {
				if m.zoomed {
					t.Fatal("still zoomed")
				}
			}},
		{name: "? shows help, ? hides it", events: running, keys: []string{"?"},
			check: func(t *testing.T, m *Model) {
				contains(t, m.View(), "Help · every key")
				press(m, "?")
				if m.help {
					t.Fatal("help still shown")
				}
			}},
		{name: "j selects the next completion, diff follows", events: running, keys: []string{"j", "j", "j"},
			check: func(t *testing.T, m *Model) {
				if c := m.group.Selected(); c.Index != 3 || m.diff.cur != c {
					t.Fatalf("selected %d.%d, diff shows %v", c.Group, c.Index, m.diff.cur)
				}
			}},
		{name: "down and k", events: running, keys: []string{"down", "down", "k"},
			check: func(t *testing.T, m *Model) { wantSel(t, m, 40, 0, 1) }},
		{name: "pgdown, G, g, home", events: running, keys: []string{"pgdown"},
			check: func(t *testing.T, m *Model) {
				wantSel(t, m, 40, 1, 3) // page of 8 rows at 80x24 from row 0 is the last row
				press(m, "g")
				wantSel(t, m, 40, 0, 0)
				press(m, "G")
				wantSel(t, m, 40, 1, 3)
				press(m, "home")
				wantSel(t, m, 40, 0, 0)
			}},
		{name: "h older step, l newer, f follows", events: running, keys: []string{"h", "left"},
			check: func(t *testing.T, m *Model) {
				wantSel(t, m, 38, 0, 0)
				press(m, "l")
				wantSel(t, m, 39, 0, 0)
				feed(m, groupEvents(41)...)
				wantSel(t, m, 39, 0, 0) // held while new steps arrive
				press(m, "f")
				wantSel(t, m, 41, 0, 0)
			}},
		{name: "j while following holds the step", events: running, keys: []string{"j"},
			check: func(t *testing.T, m *Model) {
				feed(m, groupEvents(41)...)
				feed(m, event.StepStarted{Step: 42})
				feed(m, groupEvents(42)[:3]...)
				wantSel(t, m, 40, 0, 1) // not back to row 0 of the newest
				contains(t, m.View(), "Group · step 40 · held · 2 tasks")
			}},
		{name: "f after j follows, keeping the row", events: running, keys: []string{"j", "j", "f"},
			check: func(t *testing.T, m *Model) {
				feed(m, groupEvents(41)[:1]...)
				wantSel(t, m, 41, 0, 0) // the row has not arrived yet
				feed(m, groupEvents(41)[1:]...)
				wantSel(t, m, 41, 0, 2)
			}},
		{name: "runes read together are keys each", events: running, keys: []string{"a2s"},
			calls: []call{{"SetAuto", "false"}, {"SetPhase", "apply-only"}, {"SaveNow", ""}}},
		{name: "esc read with the next key is esc, then the key", events: running, keys: []string{"enter", "alt+p"},
			calls: []call{{"Pause", ""}}, check: func(t *testing.T, m *Model) {
				if m.zoomed {
					t.Fatal("still zoomed")
				}
			}},
		{name: "a paste is not keys", events: running, keys: []string{"paste:q2"}, calls: nil,
			check: wantState(stateRunning)},
		{name: "c toggles the raw completion", events: running, keys: []string{"c"},
			check: func(t *testing.T, m *Model) {
				if m.diff.mode != modeRaw {
					t.Fatal("not raw")
				}
				press(m, "c")
				if m.diff.mode != modeDiff {
					t.Fatal("not back to the patch")
				}
			}},
		{name: "i shows the issue", events: running, keys: []string{"i"},
			check: func(t *testing.T, m *Model) { contains(t, m.View(), "divide(a, 0) returns 0") }},
		{name: "diff scrolls", events: running, keys: []string{"tab", "j", "j"},
			check: func(t *testing.T, m *Model) {
				if m.diff.scroll.top != 2 {
					t.Fatalf("top %d", m.diff.scroll.top)
				}
			}},
		{name: "logs: pgup leaves follow, G follows", events: running, keys: []string{"tab", "tab", "pgup"},
			check: func(t *testing.T, m *Model) {
				if m.containers.follow {
					t.Fatal("still following")
				}
				feed(m, event.LogBatch{EvalID: "e-0042", Lines: []string{"NEW LINE"}})
				if strings.Contains(m.View(), "NEW LINE") {
					t.Fatal("a scrolled log moved to a new line")
				}
				contains(t, m.View(), "scrolled +4") // a page (3, below the hosts line) back, then one new line
				press(m, "G")
				if !m.containers.follow {
					t.Fatal("not following")
				}
				contains(t, m.View(), "NEW LINE")
			}},
		{name: "logs: l shows the next worker's log", events: running, keys: []string{"tab", "tab", "l"},
			check: func(t *testing.T, m *Model) { contains(t, m.View(), "3 passed in 0.41s") }},
		{name: "rewards: j selects the next chart", events: running, keys: []string{"shift+tab", "j", "j"},
			check: func(t *testing.T, m *Model) {
				if m.rewards.sel != 2 {
					t.Fatalf("sel %d", m.rewards.sel)
				}
			}},

		// Quitting.
		{name: "q with a step in flight asks", events: running, keys: []string{"q"},
			check: func(t *testing.T, m *Model) {
				if !m.confirm {
					t.Fatal("no question")
				}
				contains(t, m.View(), "Step 41 is in flight. Stop the run and quit? y/n")
			}},
		{name: "q then n carries on", events: running, keys: []string{"q", "n"},
			check: func(t *testing.T, m *Model) {
				if m.confirm || m.quitting {
					t.Fatal("still asking or quitting")
				}
			}},
		{name: "q then y stops, quits on Stopped", events: running, keys: []string{"q", "y"},
			ack: []event.Event{event.Stopped{Step: 41, Reason: "stopped"}}, calls: []call{{"Stop", ""}}, quit: true},
		{name: "ctrl+c twice stops and waits", events: running, keys: []string{"ctrl+c", "ctrl+c"},
			calls: []call{{"Stop", ""}}, check: wantState(stateStopping)},
		{name: "ctrl+c while stopping quits now", events: running, keys: []string{"q", "y", "ctrl+c"},
			calls: []call{{"Stop", ""}}, quit: true},
		{name: "q while stopping waits", events: running, keys: []string{"q", "y", "q"},
			calls: []call{{"Stop", ""}}, check: wantState(stateStopping)},
		{name: "q between steps stops without asking", events: between, keys: []string{"q"},
			calls: []call{{"Stop", ""}}, check: wantState(stateStopping)},
		{name: "q when stopped quits at once", events: stopped, keys: []string{"q"}, quit: true},
		{name: "q before the run starts stops and quits", keys: []string{"q"}, calls: []call{{"Stop", ""}}, quit: true},
		{name: "closed stream while stopping quits", events: running, keys: []string{"q", "y"},
			close: true, calls: []call{{"Stop", ""}}, quit: true},
		{name: "no controls once stopped", events: stopped, keys: []string{"p", "1", "a", "s", "r"},
			check: func(t *testing.T, m *Model) { contains(t, m.View(), "the run has stopped") }},
		{name: "no controls while stopping", events: between, keys: []string{"q", "p", "2"},
			calls: []call{{"Stop", ""}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctrl := &fakeCtrl{}
			m := newTestModel(ctrl, 80, 24)
			if len(c.events) > 0 {
				feed(m, c.events...)
			}
			cmd := press(m, c.keys...)
			quit := isQuit(cmd)
			if len(c.ack) > 0 {
				_, cmd = m.Update(eventsMsg{events: c.ack})
				quit = quit || isQuit(cmd)
			}
			if c.close {
				_, cmd = m.Update(eventsMsg{closed: true})
				quit = quit || isQuit(cmd)
			}
			if got := ctrl.Calls(); !reflect.DeepEqual(got, c.calls) {
				t.Errorf("calls %v, want %v", got, c.calls)
			}
			if quit != c.quit {
				t.Errorf("quit %v, want %v", quit, c.quit)
			}
			if c.check != nil {
				c.check(t, m)
			}
			checkFrame(t, m.View(), 80, 24)
		})
	}
}

func wantState(s runState) func(t *testing.T, m *Model) {
	return func(t *testing.T, m *Model) {
		t.Helper()
		if got := m.st.runState(); got != s {
			t.Fatalf("state %s, want %s", got, s)
		}
		contains(t, m.View(), s.String())
	}
}

func wantFocus(t *testing.T, m *Model, name string) {
	t.Helper()
	if got := m.panes[m.focus].Name(); got != name {
		t.Fatalf("focus on %s, want %s", got, name)
	}
}

func wantSel(t *testing.T, m *Model, step, group, index int) {
	t.Helper()
	c := m.group.Selected()
	if c == nil || c.Step != step || c.Group != group || c.Index != index {
		t.Fatalf("selected %+v, want step %d %d.%d", c, step, group, index)
	}
}

// TestDiffScrollKept: a completion that is rescored keeps the diff's scroll
// position; selecting another completion starts at the top.
func TestDiffScrollKept(t *testing.T) {
	m := newTestModel(&fakeCtrl{}, 80, 24)
	feed(m, runEvents(40)...)
	focusOn(t, m, "Diff")
	press(m, "j", "j", "j")
	if m.diff.scroll.top != 3 {
		t.Fatalf("top %d", m.diff.scroll.top)
	}
	again := groupEvents(40)[0].(event.CompletionScored)
	again.Verdict.Reward = 0.9
	feed(m, again)
	if m.diff.scroll.top != 3 || m.diff.cur.Verdict.Reward != 0.9 {
		t.Fatalf("rescored: top %d, reward %v", m.diff.scroll.top, m.diff.cur.Verdict.Reward)
	}
	focusOn(t, m, "Group")
	press(m, "j")
	if m.diff.scroll.top != 0 {
		t.Fatalf("another completion kept top %d", m.diff.scroll.top)
	}
}
