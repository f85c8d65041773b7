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

// The Group pane shows each completion's verifier score beside its
// reward, what the gate did, and flags a sure verifier the grader
// contradicted.
func TestGroupRowShowsTheVerifier(t *testing.T) {
	p := &groupPane{frame: frame{w: 160}}
	score := func(x float64) *float64 { return &x }
	for _, tt := range []struct {
		v    event.Verdict
		want []string
		not  []string
	}{
		{event.Verdict{InstanceID: "a__x-1"}, nil, []string{"v=", "DISAGREES"}},
		{event.Verdict{InstanceID: "a__x-1", VerifierScore: score(0.95)}, []string{"DISAGREES v=0.95"}, nil},
		{event.Verdict{InstanceID: "a__x-1", Resolved: true, VerifierScore: score(0.95)}, []string{"v=0.95"}, []string{"DISAGREES"}},
		{event.Verdict{InstanceID: "a__x-1", VerifierScore: score(0.03), Gate: event.GateSpared}, []string{"v=0.03 spared"}, []string{"DISAGREES"}},
		{event.Verdict{InstanceID: "a__x-1", Resolved: true, VerifierScore: score(0.03), Gate: event.GateAudited},
			[]string{"DISAGREES v=0.03 audited"}, nil},
	} {
		row := p.row(&event.CompletionScored{Verdict: tt.v})
		for _, w := range tt.want {
			if !strings.Contains(row, w) {
				t.Errorf("%+v: row %q lacks %q", tt.v, row, w)
			}
		}
		for _, w := range tt.not {
			if strings.Contains(row, w) {
				t.Errorf("%+v: row %q holds %q", tt.v, row, w)
			}
		}
	}
}
