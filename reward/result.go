package reward

import (
	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
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

// Compose computes the reward of r from its components in its phase:
//
//	syntax:     apply_bonus if the diff is well formed and non-empty
//	apply-only: apply_bonus if it applies
//	docker:     apply_bonus·applied + test_weight·f2p_passed/f2p_total
//	            − p2p_penalty·p2p_broken/p2p_total
//
// minus hack_penalty when a hack flag is raised (the default 1 leaves a
// flagged patch nothing), clamped to [0, 1]. An infra
// failure scores 0 and is masked by the trainer. With no FAIL_TO_PASS tests
// the F2P term counts in full when resolved, as the harness counts an empty
// category as passing.
func (w Weights) Compose(r *event.Verdict) float64 {
	if r.Infra {
		return 0
	}
	var v float64
	switch r.Phase {
	case config.PhaseSyntax:
		if r.SyntaxOK {
			v = w.ApplyBonus
		}
	case config.PhaseApplyOnly:
		if r.Applied {
			v = w.ApplyBonus
		}
	case config.PhaseDocker:
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
