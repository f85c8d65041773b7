package ui

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/swetui/swetui/event"
)

// junk is what a byte-level model samples before it has learnt anything:
// invalid UTF-8, controls, escape sequences, zero-width and combining runes,
// emoji sequences, wide text and overlong lines.
func junk(rng *rand.Rand, n int) string {
	tricky := []string{"\r", "\n", "\t", "\x1b[2J", "\x1b[31m", "\x1b]0;title\a", "\u00ad", "\u200b", "\u200d",
		"\u0301", "\ufe0f", "\u2028", "\u202e", "\ufeff", "👍🏻", "🇫🇷", "👨‍👩‍👧", "中文", "\xff", "\xe2\x80", "\x85",
		"\u1100\u1161\u11a8", "\x00", strings.Repeat("x", 300)}
	var b strings.Builder
	for b.Len() < n {
		if rng.IntN(3) == 0 {
			b.WriteString(tricky[rng.IntN(len(tricky))])
		} else {
			b.WriteByte(byte(rng.IntN(256)))
		}
	}
	return b.String()
}

// junkEvents is a run whose every free-text field is junk.
func junkEvents(rng *rand.Rand) []event.Event {
	j := func(n int) string { return junk(rng, n) }
	evs := []event.Event{
		event.RunInfo{Name: j(20), OutDir: j(30), MaxSteps: 100, Phase: "syntax", Build: j(10), Device: j(10), Mode: j(10), Hosts: []string{j(20), j(20)},
			GroupSize: 4, Started: t0},
		event.StageChanged{Stage: "sft", Progress: 0.5, Detail: j(40)},
		event.SFTStep{Step: 1, Steps: 10, Loss: 2, Elapsed: time.Second},
		event.StageChanged{Stage: "grpo", Detail: j(40)},
	}
	for s := 1; s <= 3; s++ {
		evs = append(evs, event.StepStarted{Step: s, Phase: "syntax"})
		for i := 0; i < 4; i++ {
			evs = append(evs, event.CompletionScored{Step: s, Group: 0, Index: i, Completion: j(2000), IssueText: j(500),
				Verdict: event.Verdict{InstanceID: j(30), Patch: j(600), Form: j(8), ApplyMethod: j(10), Applied: true,
					Hacks: []string{j(10)}, SyntaxError: j(20)}})
		}
		evs = append(evs, event.StepFinished{Step: s, Version: s, Duration: time.Second})
	}
	evs = append(evs,
		event.LogBatch{EvalID: j(10), Worker: 0, InstanceID: j(20), Lines: []string{j(200), j(200), j(200)}},
		event.PoolState{Workers: []event.WorkerState{{ID: 0, Busy: true, InstanceID: j(20), ContainerID: j(20), Status: j(30), EvalID: j(10)}},
			Hosts: []event.HostState{{Endpoint: j(20), Err: j(40)}, {Endpoint: j(20), Up: true, Err: j(40)}}},
		event.Message{Level: event.Warn, Text: j(100)},
		event.PhaseChanged{Step: 3, From: "syntax", To: "apply-only", Reason: j(30)},
		event.CheckpointSaved{Step: 3, Path: j(40)},
		event.StepStarted{Step: 4, Phase: "apply-only"},
		// Agent mode's trajectories in flight (the step started: they
		// come after it).
		event.TurnPlayed{Session: j(70), InstanceID: j(30), Turn: 3, Command: j(300), ExitCode: 1, Duration: time.Second, Output: j(400)},
		event.TurnPlayed{Session: j(70), InstanceID: j(30), Turn: 2, Output: j(400)},
		event.TurnPlayed{Session: j(70), InstanceID: j(30), Turn: 9, End: event.End(j(20)), Detail: j(300), DiffBytes: 10},
	)
	return evs
}

// TestUntrustedText: junk in any text the trainer forwards (completions,
// patches, issue texts, logs, messages, names) never changes the frame: in
// every pane and mode the view is the terminal's size, drawn only with runes
// every terminal counts as the console does. (Before clean vetted each rune,
// pressing c a dozen times on a young run's raw completions shifted the
// screen in tmux.)
func TestUntrustedText(t *testing.T) {
	modes := map[string][]string{
		"plain": nil, "raw": {"c"}, "issue": {"i"}, "zoom_diff": {"tab", "enter"}, "zoom_raw": {"tab", "enter", "c"},
		"zoom_group": {"enter"}, "containers": {"tab", "tab", "enter"}, "events": {"shift+tab", "enter"},
		"help": {"?"}, "stopped": nil,
	}
	for _, size := range [][2]int{{80, 24}, {120, 40}, {160, 48}, {200, 50}} {
		for name, ks := range modes {
			t.Run(fmt.Sprintf("%dx%d_%s", size[0], size[1], name), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(size[0]), 7))
				m := newTestModel(&fakeCtrl{}, size[0], size[1])
				feed(m, junkEvents(rng)...)
				if name == "stopped" {
					feed(m, event.Stopped{Step: 4, Reason: junk(rng, 30), Err: errors.New(junk(rng, 30))})
				}
				press(m, ks...)
				checkFrame(t, m.View(), size[0], size[1])
				// Page through every completion in every mode, as the
				// operator pressing c, i, j and pgdown would.
				for k := 0; k < 13; k++ {
					press(m, []string{"c", "j", "i", "pgdown", "k"}[k%5])
					checkFrame(t, m.View(), size[0], size[1])
				}
				m.Update(tea.WindowSizeMsg{Width: size[0] - 1, Height: size[1] - 1})
				checkFrame(t, m.View(), size[0]-1, size[1]-1)
			})
		}
	}
}
