package train

import (
	"math"
	"testing"

	"github.com/swetui/swetui/event"
)

// TestRewardMetricsShaping: similarity and the no-op rate are means over
// the completions that were not infrastructure failures; the hunk rate is
// over the hunks counted.
func TestRewardMetricsShaping(t *testing.T) {
	groups := []*group{
		{verdicts: []event.Verdict{
			{Reward: 0.65, Applied: true, Similarity: 1, HunksApplied: 1, HunksTotal: 1},
			{Reward: 0, Applied: true, Noop: true, HunksApplied: 1, HunksTotal: 1},
		}},
		{verdicts: []event.Verdict{
			{Reward: 0.1, Similarity: 0.2, HunksApplied: 1, HunksTotal: 4},
			{Infra: true, Similarity: 1, Noop: true, HunksTotal: 9},
		}},
	}
	m, _ := rewardMetrics(groups, 1e-6)
	for name, c := range map[string][2]float64{
		"similarity": {m.Similarity, 1.2 / 3},
		"noop rate":  {m.NoopRate, 1.0 / 3},
		"hunk rate":  {m.HunkRate, 3.0 / 6},
		"infra":      {float64(m.InfraFailures), 1},
	} {
		if math.Abs(c[0]-c[1]) > 1e-12 {
			t.Errorf("%s = %v, want %v", name, c[0], c[1])
		}
	}
}

// The verifier gate's counts: spared, audited, and audited ones that
// resolved (its misses).
func TestRewardMetricsGate(t *testing.T) {
	groups := []*group{{verdicts: []event.Verdict{{Gate: event.GateSpared}, {Gate: event.GateSpared}, {Gate: event.GateAudited, Resolved: true},
		{Gate: event.GateAudited}, {Resolved: true}}}}
	m, _ := rewardMetrics(groups, 1e-6)
	if m.VerifierSpared != 2 || m.VerifierAudits != 2 || m.VerifierMisses != 1 {
		t.Errorf("spared %d audits %d misses %d, want 2 2 1", m.VerifierSpared, m.VerifierAudits, m.VerifierMisses)
	}
}
