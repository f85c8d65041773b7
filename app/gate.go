package app

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/task"
)

// Grader grades a group's replies and diffs in a phase (reward.Scorer, or
// a Gate over it).
type Grader interface {
	Score(ctx context.Context, inst *task.Instance, completions []string, phase string) ([]event.Verdict, error)
	ScoreDiffs(ctx context.Context, inst *task.Instance, diffs []string, phase string) ([]event.Verdict, error)
}

// PatchVerifier scores patches without running them (Verifier).
type PatchVerifier interface {
	Verify(ctx context.Context, inst *task.Instance, patches []string) ([]float64, error)
}

// minAudits is how many audits the miss rate waits for before it may turn
// the gate off: one miss in the first few says little.
const minAudits = 20

// Gate is the verifier in front of Docker (reward.verifier): in the docker
// phase a group is first graded apply-only (on the host); a patch that
// applies and that the verifier puts below SkipBelow is not run in Docker
// and keeps its apply-only verdict, which is what the docker phase pays an
// applied patch that resolves nothing and breaks nothing (never more),
// marked spared; an Audit share of them, chosen at random, runs all the
// same, marked audited: an audited patch that resolves is a miss. Once
// minAudits are in and misses pass MaxMiss of them, the gate is off for the
// rest of the run (said once through Warn): a bad verifier costs speed,
// never learning. Other phases pass through.
type Gate struct {
	Grader                    Grader
	Verifier                  PatchVerifier
	SkipBelow, Audit, MaxMiss float64
	Warn                      func(string)

	mu             sync.Mutex
	rng            *rand.Rand
	audits, misses int
	off            bool
}

// NewGate is reward's gate with its config, its audits drawn from seed.
func NewGate(g Grader, v PatchVerifier, c config.Reward, seed int64, warn func(string)) *Gate {
	return &Gate{Grader: g, Verifier: v, SkipBelow: c.VerifierSkipBelow, Audit: c.VerifierAudit, MaxMiss: c.VerifierMaxMiss, Warn: warn,
		rng: rand.New(rand.NewPCG(uint64(seed), 0x9a7e))}
}

// Score implements Grader.
func (g *Gate) Score(ctx context.Context, inst *task.Instance, completions []string, phase string) ([]event.Verdict, error) {
	return g.grade(ctx, inst, completions, phase, g.Grader.Score)
}

// ScoreDiffs implements Grader.
func (g *Gate) ScoreDiffs(ctx context.Context, inst *task.Instance, diffs []string, phase string) ([]event.Verdict, error) {
	return g.grade(ctx, inst, diffs, phase, g.Grader.ScoreDiffs)
}

// Swap puts v in the old verifier's place (a refreshed one) for the
// groups graded from now on.
func (g *Gate) Swap(v PatchVerifier) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.Verifier = v
}

// Off reports whether the miss rate turned the gate off.
func (g *Gate) Off() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.off
}

type gradeFunc func(ctx context.Context, inst *task.Instance, texts []string, phase string) ([]event.Verdict, error)

func (g *Gate) grade(ctx context.Context, inst *task.Instance, texts []string, phase string, grade gradeFunc) ([]event.Verdict, error) {
	if phase != config.PhaseDocker || g.Off() {
		return grade(ctx, inst, texts, phase)
	}
	pre, err := grade(ctx, inst, texts, config.PhaseApplyOnly)
	if err != nil {
		return nil, err
	}
	var applied []int
	var patches []string
	for i, v := range pre {
		if v.Applied && !v.Infra {
			applied, patches = append(applied, i), append(patches, v.Patch)
		}
	}
	g.mu.Lock()
	v := g.Verifier
	g.mu.Unlock()
	scores, err := v.Verify(ctx, inst, patches)
	if err != nil {
		return nil, fmt.Errorf("verifier gate %s: %w", inst.InstanceID, err)
	}
	out := make([]event.Verdict, len(texts))
	gates := make([]string, len(texts))
	score := make([]*float64, len(texts))
	spared := map[int]bool{}
	g.mu.Lock()
	for j, i := range applied {
		s := scores[j]
		score[i] = &s
		if s >= g.SkipBelow {
			continue
		}
		if g.rng.Float64() < g.Audit {
			gates[i] = event.GateAudited
		} else {
			spared[i] = true
		}
	}
	g.mu.Unlock()
	var run []int
	var runTexts []string
	for i := range texts {
		if !spared[i] {
			run, runTexts = append(run, i), append(runTexts, texts[i])
		}
	}
	if len(run) > 0 {
		vs, err := grade(ctx, inst, runTexts, phase)
		if err != nil {
			return nil, err
		}
		for j, i := range run {
			out[i] = vs[j]
		}
	}
	for i := range out {
		if spared[i] {
			out[i] = pre[i]
			out[i].Phase, gates[i] = phase, event.GateSpared
		}
		out[i].Gate, out[i].VerifierScore = gates[i], score[i]
	}
	g.count(out)
	return out, nil
}

// count takes the audits' outcomes and turns the gate off past MaxMiss.
func (g *Gate) count(vs []event.Verdict) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, v := range vs {
		if v.Gate == event.GateAudited && !v.Infra {
			g.audits++
			if v.Resolved {
				g.misses++
			}
		}
	}
	if !g.off && g.audits >= minAudits && float64(g.misses) > g.MaxMiss*float64(g.audits) {
		g.off = true
		if g.Warn != nil {
			g.Warn(fmt.Sprintf("verifier gate off for the rest of the run: %d of %d audited patches it would have spared resolved (%.0f%%, past reward.verifier_max_miss = %.0f%%)",
				g.misses, g.audits, 100*float64(g.misses)/float64(g.audits), 100*g.MaxMiss))
		}
	}
}
