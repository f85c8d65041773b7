package train

import (
	"math"
	"time"

	"github.com/swetui/swetui/event"
)

// rewardMetrics are a step's reward rates over its completions that were
// not infrastructure failures, and the batch's reward statistics (the std
// that batch-scaled advantages use).
func rewardMetrics(groups []*group, stdEps float64) (event.Metrics, GroupStats) {
	var m event.Metrics
	var all []float64
	n, hunks, hunksApplied := 0, 0, 0
	for _, gr := range groups {
		for _, v := range gr.verdicts {
			if v.Infra {
				m.InfraFailures++
				continue
			}
			all = append(all, v.Reward)
			m.RewardMax = math.Max(m.RewardMax, v.Reward)
			m.SyntaxRate += b2f(v.SyntaxOK)
			m.ApplyRate += b2f(v.Applied)
			m.ResolvedRate += b2f(v.Resolved)
			m.HackRate += b2f(len(v.Hacks) > 0)
			m.Similarity += v.Similarity
			m.NoopRate += b2f(v.Noop)
			hunks += v.HunksTotal
			hunksApplied += v.HunksApplied
			m.PatchesNonEmpty += int(b2f(v.Patch != ""))
			m.PatchesApplied += int(b2f(v.Applied))
			m.TestsPassed += v.F2PPassed + v.P2PPassed
			switch v.Gate {
			case event.GateSpared:
				m.VerifierSpared++
			case event.GateAudited:
				m.VerifierAudits++
				m.VerifierMisses += int(b2f(v.Resolved))
			}
			n++
		}
	}
	batch := RewardStats(all, nil, stdEps)
	if n > 0 {
		m.RewardMean, m.RewardStd = batch.Mean, batch.Std
		m.SyntaxRate /= float64(n)
		m.ApplyRate /= float64(n)
		m.ResolvedRate /= float64(n)
		m.HackRate /= float64(n)
		m.Similarity /= float64(n)
		m.NoopRate /= float64(n)
	}
	if hunks > 0 {
		m.HunkRate = float64(hunksApplied) / float64(hunks)
	}
	return m, batch
}

// stepTimes fills the perf/* metrics of a step that began at begin, had its
// groups at collected and finished training at trained.
func stepTimes(m *event.Metrics, tm timing, begin, collected, trained time.Time) {
	m.SampleSeconds, m.RewardSeconds = tm.sample.Seconds(), tm.reward.Seconds()
	m.WaitSeconds = collected.Sub(begin).Seconds()
	m.TrainSeconds = trained.Sub(collected).Seconds()
	m.StepSeconds = trained.Sub(begin).Seconds()
}

// maxAge is how many updates old the step's stalest group was.
func maxAge(groups []*group, version int) int {
	age := 0
	for _, gr := range groups {
		age = max(age, version-1-gr.version)
	}
	return age
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
