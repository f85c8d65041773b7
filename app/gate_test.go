package app

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/reward"
	"github.com/swetui/swetui/task"
)

// phaseGrader grades as reward's weights would: a patch "ok..." applies,
// and in the docker phase "ok-fix..." resolves; it counts docker runs.
type phaseGrader struct{ docker atomic.Int64 }

func (g *phaseGrader) verdict(text, phase string) event.Verdict {
	v := event.Verdict{Phase: phase, Patch: text, SyntaxOK: true, Applied: strings.HasPrefix(text, "ok"), Similarity: 0.5}
	if phase == config.PhaseDocker && v.Applied {
		v.Resolved = strings.HasPrefix(text, "ok-fix")
		if v.Resolved {
			v.F2PPassed, v.F2PTotal = 1, 1
		} else {
			v.F2PTotal = 1
		}
	}
	v.Reward = reward.WeightsFrom(config.Default().Reward).Compose(&v)
	return v
}

func (g *phaseGrader) Score(_ context.Context, _ *task.Instance, texts []string, phase string) ([]event.Verdict, error) {
	out := make([]event.Verdict, len(texts))
	for i, t := range texts {
		out[i] = g.verdict(t, phase)
	}
	if phase == config.PhaseDocker {
		g.docker.Add(int64(len(texts)))
	}
	return out, nil
}

func (g *phaseGrader) ScoreDiffs(ctx context.Context, inst *task.Instance, diffs []string, phase string) ([]event.Verdict, error) {
	return g.Score(ctx, inst, diffs, phase)
}

// fixedVerifier gives every patch the same score.
type fixedVerifier float64

func (f fixedVerifier) Verify(_ context.Context, _ *task.Instance, patches []string) ([]float64, error) {
	out := make([]float64, len(patches))
	for i := range out {
		out[i] = float64(f)
	}
	return out, nil
}

func gateConfig(audit, maxMiss float64) config.Reward {
	c := config.Default().Reward
	c.VerifierSkipBelow, c.VerifierAudit, c.VerifierMaxMiss = 0.5, audit, maxMiss
	return c
}

// A spared patch is not run in Docker and earns what the docker phase
// pays a patch that applies and resolves nothing, never more (here less
// than its true, resolving verdict); one that does not apply, or that the
// verifier rates above the bar, runs; other phases pass through.
func TestGateSparesAndNeverPaysMore(t *testing.T) {
	g := &phaseGrader{}
	gate := NewGate(g, fixedVerifier(0.1), gateConfig(0, 1), 1, nil)
	in := &task.Instance{InstanceID: "a__x-1"}
	vs, err := gate.Score(context.Background(), in, []string{"ok-fix", "ok-nope", "broken"}, config.PhaseDocker)
	if err != nil {
		t.Fatal(err)
	}
	if n := g.docker.Load(); n != 1 {
		t.Errorf("%d docker runs, want 1 (the patch that does not apply)", n)
	}
	applied := g.verdict("ok-nope", config.PhaseDocker) // applied, resolving nothing
	for i, v := range vs[:2] {
		if v.Gate != event.GateSpared || v.Phase != config.PhaseDocker || v.Resolved || v.VerifierScore == nil || *v.VerifierScore != 0.1 {
			t.Errorf("patch %d: %+v, want spared in the docker phase with its score", i, v)
		}
		if v.Reward > applied.Reward+1e-12 {
			t.Errorf("patch %d: a spared patch earns %.3f, above an applied, unresolved one's %.3f", i, v.Reward, applied.Reward)
		}
	}
	if vs[2].Gate != "" || vs[2].VerifierScore != nil || vs[2].Applied {
		t.Errorf("the patch that does not apply: %+v", vs[2])
	}
	high := NewGate(&phaseGrader{}, fixedVerifier(0.9), gateConfig(0, 1), 1, nil)
	if vs, _ := high.Score(context.Background(), in, []string{"ok-fix"}, config.PhaseDocker); vs[0].Gate != "" || !vs[0].Resolved {
		t.Errorf("a patch the verifier rates high: %+v, want run and resolved", vs[0])
	}
	g2 := &phaseGrader{}
	if vs, _ := NewGate(g2, fixedVerifier(0.1), gateConfig(0, 1), 1, nil).Score(context.Background(), in, []string{"ok-fix"}, config.PhaseApplyOnly); vs[0].Gate != "" || vs[0].Phase != config.PhaseApplyOnly {
		t.Errorf("apply-only through the gate: %+v", vs[0])
	}
}

// The audit is a share of the spared-to-be, drawn at random from the run's
// seed: about audit of them over many, the same draws for the same seed,
// others for another.
func TestGateAuditIsRandom(t *testing.T) {
	draw := func(seed int64) []string {
		gate := NewGate(&phaseGrader{}, fixedVerifier(0.1), gateConfig(0.2, 1), seed, nil)
		var gates []string
		for range 100 {
			vs, err := gate.Score(context.Background(), &task.Instance{InstanceID: "a__x-1"}, []string{"ok-a", "ok-b", "ok-c", "ok-d", "ok-e"}, config.PhaseDocker)
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range vs {
				gates = append(gates, v.Gate)
			}
		}
		return gates
	}
	a, b, c := draw(1), draw(1), draw(2)
	audited := 0
	for _, g := range a {
		if g == event.GateAudited {
			audited++
		}
	}
	if audited < 70 || audited > 130 { // 500 draws at 0.2: 100 ± 3σ (27)
		t.Errorf("%d of 500 audited at a share of 0.2", audited)
	}
	if strings.Join(a, ",") != strings.Join(b, ",") || strings.Join(a, ",") == strings.Join(c, ",") {
		t.Error("the audits are not the seed's: the same seed drew otherwise, or another seed the same")
	}
}

// Audited patches that resolve are misses: past verifier_max_miss of them
// (after minAudits), the gate turns off for the rest of the run, says so
// once, and every docker patch runs again.
func TestGateMissRateShutsOff(t *testing.T) {
	g := &phaseGrader{}
	var warned []string
	gate := NewGate(g, fixedVerifier(0.1), gateConfig(1, 0.05), 1, func(s string) { warned = append(warned, s) })
	in := &task.Instance{InstanceID: "a__x-1"}
	for range 5 { // 20 audits, every one a miss
		if _, err := gate.Score(context.Background(), in, []string{"ok-fix-1", "ok-fix-2", "ok-fix-3", "ok-fix-4"}, config.PhaseDocker); err != nil {
			t.Fatal(err)
		}
	}
	if !gate.Off() || len(warned) != 1 || !strings.Contains(warned[0], "20 of 20 audited") {
		t.Fatalf("off %v, warnings %q", gate.Off(), warned)
	}
	vs, _ := gate.Score(context.Background(), in, []string{"ok-fix"}, config.PhaseDocker)
	if vs[0].Gate != "" || !vs[0].Resolved || len(warned) != 1 {
		t.Errorf("after the shut-off: %+v, %d warnings", vs[0], len(warned))
	}
}
