package train

import (
	"context"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/history"
	"github.com/swetui/swetui/task"
)

func TestAsyncWithAgeZeroMatchesSync(t *testing.T) {
	run := func(async bool) ([]float64, []history.MetricsLine) {
		cfg := testConfig(t, "run.max_steps=10", "grpo.is_correction=truncated", "grpo.kl_coef=0.02")
		cfg.GRPO.Async.Enabled = async
		cfg.GRPO.Async.MaxTrajectoryAgeSteps = 0
		pol := newBandit(6, 0.5, 5)
		ref := newBandit(6, 0, 5)
		tr := New(cfg, Deps{Policy: pol, Reference: ref, Tokenizer: digitTokenizer{}, Scorer: rewardOf3,
			Prompter: staticPrompter{}, Tasks: fakeTasks(5), Store: pol, DockerOK: true})
		drain(tr)
		if err := tr.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		return pol.Theta, metricsWithoutTimes(t, readLines(t, filepath.Join(cfg.Run.OutDir, "metrics.jsonl")))
	}
	syncTheta, syncMetrics := run(false)
	asyncTheta, asyncMetrics := run(true)
	if !reflect.DeepEqual(syncTheta, asyncTheta) {
		t.Fatalf("θ: sync %v, async %v", syncTheta, asyncTheta)
	}
	if !reflect.DeepEqual(syncMetrics, asyncMetrics) {
		t.Fatalf("metrics differ:\nsync  %+v\nasync %+v", syncMetrics, asyncMetrics)
	}
}

// slowScorer takes d per group, as containers do.
type slowScorer struct{ d time.Duration }

func (s slowScorer) Score(ctx context.Context, inst *task.Instance, c []string, phase string) ([]event.Verdict, error) {
	select {
	case <-time.After(s.d):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return rewardOf3.Score(ctx, inst, c, phase)
}

func TestAsyncLearnsWithStaleGroupsAndStopsCleanly(t *testing.T) {
	cfg := testConfig(t, "run.max_steps=40", "grpo.is_correction=truncated", "grpo.async.enabled=true",
		"grpo.async.max_trajectory_age_steps=2", "grpo.async.buffer_groups=6")
	pol := newBandit(6, 0.5, 9)
	tr := New(cfg, Deps{Policy: pol, Tokenizer: digitTokenizer{}, Scorer: slowScorer{time.Millisecond},
		Prompter: staticPrompter{}, Tasks: fakeTasks(5), Store: pol})
	evs := drain(tr)
	if err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	maxAge := 0
	for _, ev := range <-evs {
		if sf, ok := ev.(event.StepFinished); ok {
			maxAge = max(maxAge, sf.Metrics.MaxAge)
		}
	}
	if maxAge > 2 {
		t.Fatalf("trained on a group %d versions old, bound is 2", maxAge)
	}
	if p := pol.probs(); p[3] < 0.8 {
		t.Fatalf("async did not learn: p = %v", p)
	}
}
