package ui

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/exp/golden"
	"github.com/swetui/swetui/event"
)

// keyMsg builds the KeyMsg the terminal sends for a key named as
// key.Binding names it.
func keyMsg(k string) tea.KeyMsg {
	types := map[string]tea.KeyType{
		"tab": tea.KeyTab, "shift+tab": tea.KeyShiftTab, "enter": tea.KeyEnter, "esc": tea.KeyEsc,
		"ctrl+c": tea.KeyCtrlC, " ": tea.KeySpace, "pgup": tea.KeyPgUp, "pgdown": tea.KeyPgDown,
		"up": tea.KeyUp, "down": tea.KeyDown, "left": tea.KeyLeft, "right": tea.KeyRight,
		"home": tea.KeyHome, "end": tea.KeyEnd, "ctrl+u": tea.KeyCtrlU, "ctrl+d": tea.KeyCtrlD,
	}
	if t, ok := types[k]; ok {
		return tea.KeyMsg{Type: t}
	}
	if r, ok := strings.CutPrefix(k, "alt+"); ok {
		return tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(r), Alt: true}
	}
	if text, ok := strings.CutPrefix(k, "paste:"); ok {
		return tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(text), Paste: true}
	}
	return tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(k)}
}

func press(m *Model, ks ...string) (cmd tea.Cmd) {
	for _, k := range ks {
		_, cmd = m.Update(keyMsg(k))
	}
	return cmd
}

// focusOn moves the focus to the named pane with tab.
func focusOn(t *testing.T, m *Model, name string) {
	t.Helper()
	for range m.panes {
		if m.panes[m.focus].Name() == name {
			return
		}
		press(m, "tab")
	}
	t.Fatalf("no pane %q", name)
}

// TestGolden draws the whole screen in each state and each pane zoomed, at
// 80x24 (the smallest supported) and 200x50, a few of them at 120x40 and
// 160x48 too, and compares with testdata/TestGolden/*.golden (go test ./ui
// -run TestGolden -update rewrites them).
func TestGolden(t *testing.T) {
	everySize := map[string]bool{"running": true, "help": true, "warm_start": true, "gpus": true}
	cases := []struct {
		name  string
		setup func(t *testing.T, m *Model)
	}{
		{"starting", func(t *testing.T, m *Model) {}},
		{"running", func(t *testing.T, m *Model) { feed(m, runEvents(40)...) }},
		{"young_run", func(t *testing.T, m *Model) { feed(m, runEvents(3)...) }},
		{"pausing", func(t *testing.T, m *Model) { feed(m, runEvents(40)...); press(m, "p") }},
		{"paused", func(t *testing.T, m *Model) {
			feed(m, runEvents(40)...)
			press(m, "p")
			feed(m, event.Paused{Step: 41})
		}},
		{"confirm_quit", func(t *testing.T, m *Model) { feed(m, runEvents(40)...); press(m, "q") }},
		{"stopping", func(t *testing.T, m *Model) { feed(m, runEvents(40)...); press(m, "q", "y") }},
		{"stopped", func(t *testing.T, m *Model) {
			feed(m, runEvents(40)...)
			feed(m, event.Stopped{Step: 41, Reason: "max_steps"})
		}},
		{"stopped_error", func(t *testing.T, m *Model) {
			feed(m, runEvents(40)...)
			feed(m, event.Message{Level: event.Error, Text: "docker: daemon unreachable"},
				event.Stopped{Step: 41, Reason: "reward pool failed", Err: errors.New("3 infra failures in a row")})
		}},
		{"help", func(t *testing.T, m *Model) { feed(m, runEvents(40)...); press(m, "?") }},
		{"warm_start", func(t *testing.T, m *Model) { feed(m, sftEvents(38, 100)...) }},
		{"warm_start_pausing", func(t *testing.T, m *Model) { feed(m, sftEvents(38, 100)...); press(m, "p") }},
		{"warm_start_paused", func(t *testing.T, m *Model) {
			feed(m, sftEvents(38, 100)...)
			press(m, "p")
			feed(m, event.Paused{})
		}},
		{"warm_start_zoom_group", func(t *testing.T, m *Model) {
			feed(m, sftEvents(38, 100)...)
			press(m, "enter")
		}},
		{"warm_start_quit", func(t *testing.T, m *Model) { feed(m, sftEvents(38, 100)...); press(m, "q") }},
		{"warm_start_charts_after_grpo", func(t *testing.T, m *Model) {
			feed(m, sftEvents(100, 100)...)
			feed(m, runEvents(40)[1:]...)
			focusOn(t, m, "Rewards")
			press(m, "enter")
		}},
		{"zoom_rewards", zoomOn("Rewards")},
		{"zoom_group", zoomOn("Group")},
		{"zoom_diff", zoomOn("Diff")},
		{"zoom_containers", zoomOn("Containers")},
		{"zoom_events", zoomOn("Events")},
		{"diff_raw", func(t *testing.T, m *Model) { zoomOn("Diff")(t, m); press(m, "c") }},
		{"diff_issue", func(t *testing.T, m *Model) { zoomOn("Diff")(t, m); press(m, "i") }},
		{"group_older_step", func(t *testing.T, m *Model) {
			feed(m, runEvents(40)...)
			press(m, "h", "h", "j", "j", "j")
		}},
		{"logs_scrolled", func(t *testing.T, m *Model) {
			zoomOn("Containers")(t, m)
			press(m, "pgup", "k")
		}},
		{"gpus", func(t *testing.T, m *Model) { feed(m, runEvents(40)...); feed(m, gpuEvents(39, 40)...) }},
		{"verifier_gate", func(t *testing.T, m *Model) { feed(m, gatedEvents(40)...) }},
		{"verifier_gate_zoom_group", func(t *testing.T, m *Model) {
			feed(m, gatedEvents(40)...)
			focusOn(t, m, "Group")
			press(m, "enter")
		}},
		{"second_worker", func(t *testing.T, m *Model) {
			zoomOn("Containers")(t, m)
			press(m, "l")
		}},
	}
	for _, c := range cases {
		sizes := [][2]int{{80, 24}, {200, 50}}
		if everySize[c.name] {
			sizes = [][2]int{{80, 24}, {120, 40}, {160, 48}, {200, 50}}
		}
		for _, size := range sizes {
			t.Run(fmt.Sprintf("%dx%d_%s", size[0], size[1], c.name), func(t *testing.T) {
				m := newTestModel(&fakeCtrl{}, size[0], size[1])
				c.setup(t, m)
				view := m.View()
				checkFrame(t, view, size[0], size[1])
				golden.RequireEqual(t, []byte(view))
			})
		}
	}
}

func zoomOn(name string) func(t *testing.T, m *Model) {
	return func(t *testing.T, m *Model) {
		feed(m, runEvents(40)...)
		focusOn(t, m, name)
		press(m, "enter")
	}
}

// TestViewFitsAnySize: whatever the terminal's size and the console's mode,
// the view is exactly the terminal's size (no spill, no panic), down to
// sizes too small to be useful.
func TestViewFitsAnySize(t *testing.T) {
	modes := map[string][]string{
		"plain": nil, "help": {"?"}, "zoom": {"enter"}, "events": {"shift+tab", "enter"},
		"raw": {"tab", "c"}, "issue": {"i"}, "quit": {"q"}, "containers": {"tab", "tab"},
	}
	for _, size := range [][2]int{{1, 1}, {10, 3}, {20, 5}, {40, 12}, {69, 20}, {79, 23}, {100, 30}, {120, 40}, {300, 80}} {
		for name, ks := range modes {
			m := newTestModel(&fakeCtrl{}, 80, 24)
			feed(m, runEvents(12)...)
			// Agent mode's trajectories in flight: rows of their own.
			feed(m, event.PlayedTurn("s0", "mini__calc-12", 3, event.Turn{Command: "ls", Observation: "exit code 0\na.py\n"}, false),
				event.TurnPlayed{Session: "s1", InstanceID: "mini__calc-12", Turn: 9, End: "turn_limit"})
			feed(m, gpuEvents(11, 12)...)
			press(m, ks...)
			m.Update(tea.WindowSizeMsg{Width: size[0], Height: size[1]})
			t.Run(fmt.Sprintf("%dx%d_%s", size[0], size[1], name), func(t *testing.T) {
				checkFrame(t, m.View(), size[0], size[1])
			})
		}
	}
}

// TestGoldenNarrow: below 70 columns the body shows the focused pane alone.
func TestGoldenNarrow(t *testing.T) {
	m := newTestModel(&fakeCtrl{}, 60, 20)
	feed(m, runEvents(40)...)
	view := m.View()
	checkFrame(t, view, 60, 20)
	golden.RequireEqual(t, []byte(view))
}
