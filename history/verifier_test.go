package history

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/swetui/swetui/event"
)

// verifier= selects by the verifier's part: sure and contradicted, spared,
// audited, or scored at all.
func TestFilterVerifier(t *testing.T) {
	dir := t.TempDir()
	p := func(x float64) *float64 { return &x }
	writeLines(t, filepath.Join(dir, RolloutsFile),
		trajectory(1, 0, "a__x-1", 0, event.Verdict{Phase: "docker"}, nil),                                                                  // no verifier
		trajectory(1, 1, "a__x-1", 0, event.Verdict{Phase: "docker", VerifierScore: p(0.95)}, nil),                                          // sure yes, not resolved
		trajectory(1, 2, "a__x-1", 1, event.Verdict{Phase: "docker", Resolved: true, VerifierScore: p(0.05), Gate: event.GateAudited}, nil), // a miss
		trajectory(1, 3, "a__x-1", 0, event.Verdict{Phase: "docker", VerifierScore: p(0.02), Gate: event.GateSpared}, nil),
		trajectory(1, 4, "a__x-1", 1, event.Verdict{Phase: "docker", Resolved: true, VerifierScore: p(0.6)}, nil))
	ix, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		filter string
		want   []int
	}{
		{"verifier=disagree", []int{1, 2}},
		{"verifier=spared", []int{3}},
		{"verifier=audited", []int{2}},
		{"verifier=scored", []int{1, 2, 3, 4}},
	} {
		f, err := ParseFilter(tt.filter)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := ix.SelectIn(dir, f); err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("%s: %v (%v), want %v", tt.filter, got, err, tt.want)
		}
	}
	if _, err := ParseFilter("verifier=maybe"); err == nil {
		t.Error("verifier=maybe: no error")
	}
}
