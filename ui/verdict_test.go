package ui

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/swetui/swetui/event"
)

// TestVerdictMarks: a no-op patch and flags the reset undid are named, in
// the Group row and in the selected completion's summary.
func TestVerdictMarks(t *testing.T) {
	c := &event.CompletionScored{Verdict: event.Verdict{InstanceID: "a__b-1", SyntaxOK: true, Applied: true, ApplyMethod: "git-apply",
		Noop: true, HacksUndone: []string{"touches_test_config"}, Hacks: []string{"escapes_repo"}}}
	p := &groupPane{}
	p.SetSize(140, 10)
	for _, got := range []string{p.row(c), verdict(c.Verdict)} {
		for _, want := range []string{"no-op", "touches_test_config", "escapes_repo"} {
			if !strings.Contains(got, want) {
				t.Errorf("%q lacks %q", got, want)
			}
		}
	}
}

func TestGroupSizeText(t *testing.T) {
	info := event.RunInfo{GroupSize: 4, GroupSizes: map[string]int{"apply-only": 8}}
	for phase, want := range map[string]string{"syntax": "G=4", "apply-only": "G=8 (apply-only)"} {
		if got := groupSizeText(info, phase); got != want {
			t.Errorf("%s: %q, want %q", phase, got, want)
		}
	}
}

// TestHistoryFromTheConsole: v opens the run's whole history over the
// console, the trainer's events keep arriving underneath, and q returns.
func TestHistoryFromTheConsole(t *testing.T) {
	dir := t.TempDir()
	line, _ := json.Marshal(event.CompletionScored{Step: 1, Completion: "x", Verdict: event.Verdict{InstanceID: "acme__a-1", Phase: "syntax"}})
	if err := os.WriteFile(filepath.Join(dir, "rollouts.jsonl"), append(line, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	m := newTestModel(&fakeCtrl{}, 120, 40)
	evs := runEvents(2)
	info := evs[0].(event.RunInfo)
	info.OutDir = dir
	evs[0] = info
	feed(m, evs...)
	press(m, "v")
	if !strings.Contains(m.View(), "swetui view") || !strings.Contains(m.View(), "acme__a-1") {
		t.Fatalf("v did not open the history:\n%s", m.View())
	}
	feed(m, event.StepStarted{Step: 9, Phase: "apply-only"})
	press(m, "q")
	if m.history != nil || !strings.Contains(m.View(), "step 9") {
		t.Fatalf("q did not return to the console, or the events stopped:\n%s", m.View())
	}
}
