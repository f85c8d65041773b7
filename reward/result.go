package reward

import (
	"time"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/train"
)

// Modes are the curriculum's phases (config.PhaseSyntax, PhaseApplyOnly,
// PhaseDocker): how far a completion is taken before it is rewarded.
const (
	ModeSyntax    = config.PhaseSyntax
	ModeApplyOnly = config.PhaseApplyOnly
	ModeDocker    = config.PhaseDocker
)

// Weights are the reward's knobs (config [reward]).
type Weights struct {
	ApplyBonus  float64 `json:"apply_bonus"`
	TestWeight  float64 `json:"test_weight"`
	P2PPenalty  float64 `json:"p2p_penalty"`
	HackPenalty float64 `json:"hack_penalty"`
}

// WeightsFrom reads the weights of a config.
func WeightsFrom(c config.Reward) Weights {
	return Weights{ApplyBonus: c.ApplyBonus, TestWeight: c.TestWeight, P2PPenalty: c.P2PPenalty, HackPenalty: c.HackPenalty}
}

// Durations are the time each stage of a score took.
type Durations struct {
	Extract time.Duration `json:"extract_ns"`
	Apply   time.Duration `json:"apply_ns,omitempty"`
	Eval    time.Duration `json:"eval_ns,omitempty"`
	Total   time.Duration `json:"total_ns"`
}

// Result is one completion's score with every component that led to it, so
// a reward can always be explained.
type Result struct {
	InstanceID string  `json:"instance_id"`
	Mode       string  `json:"mode"`
	Reward     float64 `json:"reward"`

	NonEmpty    bool   `json:"nonempty"`       // the completion had any text
	Form        string `json:"form"`           // FormFenced, FormTagged, FormBare, FormNone
	Diff        string `json:"diff,omitempty"` // the extracted, normalised diff
	SyntaxOK    bool   `json:"syntax_ok"`      // well-formed, non-empty diff
	SyntaxError string `json:"syntax_error,omitempty"`
	Files       int    `json:"files"` // files the diff touches

	// Apply check (modes apply-only and docker).
	ApplyChecked bool   `json:"apply_checked"`
	Applied      bool   `json:"applied"`
	ApplyMethod  string `json:"apply_method,omitempty"`
	ApplyOutput  string `json:"apply_output,omitempty"`
	ApplyOnHost  bool   `json:"apply_on_host,omitempty"`
	// ApplyMismatch: the host and the container disagreed (the container's
	// verdict is kept). It should never happen; it is counted if it does.
	ApplyMismatch bool `json:"apply_mismatch,omitempty"`

	// Tests (mode docker).
	TestsRun    bool         `json:"tests_run"`
	F2PPassed   int          `json:"f2p_passed"`
	F2PTotal    int          `json:"f2p_total"`
	P2PPassed   int          `json:"p2p_passed"`
	P2PBroken   int          `json:"p2p_broken"`
	P2PTotal    int          `json:"p2p_total"`
	Resolved    bool         `json:"resolved"`
	TestsStatus *TestsStatus `json:"tests_status,omitempty"`
	Statuses    StatusMap    `json:"statuses,omitempty"`
	ExitStatus  *int         `json:"exit_status,omitempty"` // the test runner's
	TestsError  string       `json:"tests_error,omitempty"` // why tests gave no verdict (timeout, incomplete output)

	// Infra failures are not the model's: masked out of the advantage.
	Infra      bool   `json:"infra_failure"`
	InfraCause string `json:"infra_cause,omitempty"`

	Hacks     []string  `json:"hacks,omitempty"`
	Durations Durations `json:"durations"`
}

// Compose computes the reward of r from its components in its mode:
//
//	syntax:     apply_bonus if the diff is well formed and non-empty
//	apply-only: apply_bonus if it applies
//	docker:     apply_bonus·applied + test_weight·f2p_passed/f2p_total
//	            − p2p_penalty·p2p_broken/p2p_total
//
// minus hack_penalty when a hack flag is raised, clamped to [0, 1]. An infra
// failure scores 0 and is masked by the trainer. With no FAIL_TO_PASS tests
// the F2P term counts in full when resolved, as the harness counts an empty
// category as passing.
func (w Weights) Compose(r *Result) float64 {
	if r.Infra {
		return 0
	}
	var v float64
	switch r.Mode {
	case ModeSyntax:
		if r.SyntaxOK {
			v = w.ApplyBonus
		}
	case ModeApplyOnly:
		if r.Applied {
			v = w.ApplyBonus
		}
	case ModeDocker:
		if !r.Applied {
			break
		}
		v = w.ApplyBonus
		switch {
		case r.F2PTotal > 0:
			v += w.TestWeight * float64(r.F2PPassed) / float64(r.F2PTotal)
		case r.Resolved:
			v += w.TestWeight
		}
		if r.P2PTotal > 0 {
			v -= w.P2PPenalty * float64(r.P2PBroken) / float64(r.P2PTotal)
		}
	}
	if len(r.Hacks) > 0 {
		v -= w.HackPenalty
	}
	return min(max(v, 0), 1)
}

// Breakdown is the result as the trainer and the console show it.
func (r *Result) Breakdown() train.Breakdown {
	b := train.Breakdown{
		Total:       r.Reward,
		Valid:       r.SyntaxOK,
		DiffForm:    r.Form,
		Applied:     r.Applied,
		ApplyMethod: r.ApplyMethod,
		F2PPassed:   r.F2PPassed,
		F2PTotal:    r.F2PTotal,
		P2PPassed:   r.P2PPassed,
		P2PTotal:    r.P2PTotal,
		Resolved:    r.Resolved,
		Infra:       r.Infra,
		Hacks:       append([]string(nil), r.Hacks...),
	}
	switch {
	case r.Infra:
		b.Error = r.InfraCause
	case r.SyntaxError != "":
		b.Error = r.SyntaxError
	case r.TestsError != "":
		b.Error = r.TestsError
	}
	return b
}
