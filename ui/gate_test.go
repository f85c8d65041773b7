package ui

import (
	"strings"
	"testing"
	"time"

	"github.com/swetui/swetui/event"
)

// The header says what the verifier gate did over the run: docker runs
// spared, audits and the audited miss rate; nothing without a gate.
func TestHeaderShowsTheGate(t *testing.T) {
	st := newState(Options{}, time.Now)
	h := &header{st: st, w: 200}
	st.apply(event.StepFinished{Step: 1})
	if strings.Contains(h.line2(), "verifier") {
		t.Errorf("no gate, yet: %q", h.line2())
	}
	st.apply(event.StepFinished{Step: 2, Metrics: event.Metrics{VerifierSpared: 6, VerifierAudits: 1}})
	st.apply(event.StepFinished{Step: 3, Metrics: event.Metrics{VerifierSpared: 4, VerifierAudits: 3, VerifierMisses: 1}})
	if want := "verifier spared 10, audited 4, missed 25%"; !strings.Contains(h.line2(), want) {
		t.Errorf("header %q lacks %q", h.line2(), want)
	}
}
