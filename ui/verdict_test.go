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

// TestGroupShowsWhatTrained (issue 45, item 10): an unfinished trajectory
// that trained on 0 (agent.unfinished = zero) shows 0 with its graded
// reward beside it, narrow and wide; a masked one says it was not trained
// on; the title's resolved count says it counts graded verdicts, and how
// many of them trained as resolved.
func TestGroupShowsWhatTrained(t *testing.T) {
	zero := 0.0
	v := event.Verdict{InstanceID: "a__b-1", SyntaxOK: true, Applied: true, ApplyMethod: "git-apply", Resolved: true, Reward: 1,
		F2PPassed: 1, F2PTotal: 1}
	rows := []event.CompletionScored{
		{Index: 0, Verdict: v, Advantage: 0.707, Agent: &event.Trajectory{End: "submitted", Turns: make([]event.Turn, 3)}},
		{Index: 1, Verdict: v, Advantage: -0.707, Trained: &zero, Agent: &event.Trajectory{End: "turn_limit", Turns: make([]event.Turn, 10)}},
		{Index: 2, Verdict: v, Masked: true, Agent: &event.Trajectory{End: "turn_limit", Turns: make([]event.Turn, 10)}},
	}
	p := &groupPane{}
	p.SetSize(80, 10)
	if got := p.row(&rows[0]); !strings.Contains(got, "  1.000 ") {
		t.Errorf("narrow, submitted: %q, want the graded 1.000", got)
	}
	if got := p.row(&rows[1]); !strings.Contains(got, "0 (1.0)  -0.707") {
		t.Errorf("narrow, unfinished: %q, want 0 (1.0): trained on 0, graded 1", got)
	}
	p.SetSize(160, 10)
	if got := p.row(&rows[1]); !strings.Contains(got, "0 (1.0)") || !strings.Contains(got, "trained on 0.000, graded 1.000") {
		t.Errorf("wide, unfinished: %q", got)
	}
	if got := p.row(&rows[2]); !strings.Contains(got, "masked: not trained on") {
		t.Errorf("wide, masked: %q", got)
	}
	if got, want := resolvedInfo(rows), " · resolved 3/3 graded, 1 trained as such"; got != want {
		t.Errorf("title %q, want %q", got, want)
	}
	if got, want := resolvedInfo(rows[:1]), " · resolved 1/1 graded"; got != want {
		t.Errorf("title %q, want %q", got, want)
	}
	single := []event.CompletionScored{{Verdict: v}}
	if got := resolvedInfo(single); got != "" {
		t.Errorf("single-shot title %q, want nothing new", got)
	}
}
