package reward

import (
	"slices"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
)

// Weights are the reward's knobs (config [reward]).
type Weights struct {
	ApplyBonus  float64 `json:"apply_bonus"`
	TestWeight  float64 `json:"test_weight"`
	P2PPenalty  float64 `json:"p2p_penalty"`
	HackPenalty float64 `json:"hack_penalty"`
	// SimilarityWeight is the share of the test reward not earned that
	// patch similarity stands in for; below 1, so that no unresolved patch
	// reaches a resolved one.
	SimilarityWeight float64 `json:"similarity_weight"`
	// HunkCredit is the share of apply_bonus that a patch not applying as a
	// whole gets, pro rata to its hunks that apply on their own.
	HunkCredit float64 `json:"hunk_credit"`
	// RejectNoop gives a no-op patch no apply bonus, hunk credit or
	// similarity.
	RejectNoop bool `json:"reject_noop"`
}

// WeightsFrom reads the weights of a config.
func WeightsFrom(c config.Reward) Weights {
	return Weights{ApplyBonus: c.ApplyBonus, TestWeight: c.TestWeight, P2PPenalty: c.P2PPenalty, HackPenalty: c.HackPenalty,
		SimilarityWeight: c.SimilarityWeight, HunkCredit: c.HunkCredit, RejectNoop: c.RejectNoop}
}

// Compose computes the reward of r from its components in its phase:
//
//	syntax:     apply_bonus if the diff is well formed and non-empty
//	apply-only: apply_bonus·A + test_weight·similarity_weight·S·A
//	docker:     apply_bonus·A + test_weight·(F + (1−F)·similarity_weight·S·A)
//	            − p2p_penalty·p2p_broken/p2p_total
//
// where A is 1 if the patch applies, else hunk_credit·hunks_applied/
// hunks_total (the hunks that apply on their own), S the patch similarity
// to the gold patch, counted as far as the patch applies (S·A), and F = f2p_passed/f2p_total (1 when resolved with no
// FAIL_TO_PASS tests, as the harness counts an empty category as passing;
// 0 when no tests ran). Apply-only is thus docker with no test passed. With
// similarity_weight < 1 only a resolved patch earns the whole test weight.
// A no-op patch (reward.reject_noop) gets no A and no S; a hack-flagged one
// no hunk credit and no S, and loses hack_penalty (the default 1 leaves it
// nothing). The sum is clamped to [0, 1]. An infra failure scores 0 and is
// masked by the trainer; an escape from the repository (escapes_repo)
// scores 0 whatever the penalty. Flags the evaluation's reset undid
// (r.HacksUndone) cost nothing.
func (w Weights) Compose(r *event.Verdict) float64 {
	if r.Infra || slices.Contains(r.Hacks, HackEscapesRepo) {
		return 0 // an escape is the sandbox's concern, not a weight to study
	}
	flagged := len(r.Hacks) > 0
	var v float64
	switch r.Phase {
	case config.PhaseSyntax:
		if r.SyntaxOK {
			v = w.ApplyBonus
		}
	case config.PhaseApplyOnly, config.PhaseDocker:
		var a, s, f float64
		switch {
		case r.Applied:
			a = 1
		case r.HunksTotal > 0 && !flagged:
			a = w.HunkCredit * float64(r.HunksApplied) / float64(r.HunksTotal)
		}
		if r.Noop && w.RejectNoop {
			a = 0
		}
		// Similarity counts as far as the patch applies: paid for a patch
		// that does not apply at all, it outweighed applying (measured: the
		// held-out apply rate fell from 38-44% to 13-21%).
		if r.SyntaxOK && !flagged {
			s = r.Similarity * a
		}
		if r.Phase == config.PhaseDocker && r.Applied {
			switch {
			case r.F2PTotal > 0:
				f = float64(r.F2PPassed) / float64(r.F2PTotal)
			case r.Resolved:
				f = 1
			}
			if r.P2PTotal > 0 {
				v -= w.P2PPenalty * float64(r.P2PBroken) / float64(r.P2PTotal)
			}
		}
		v += w.ApplyBonus*a + w.TestWeight*(f+(1-f)*w.SimilarityWeight*s)
	}
	if flagged {
		v -= w.HackPenalty
	}
	return min(max(v, 0), 1)
}
