package ui

import (
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
