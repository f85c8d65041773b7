package train

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func readLines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

// metricsWithoutTimes drops the fields that differ between two equal runs.
func metricsWithoutTimes(t *testing.T, lines []string) []MetricsLine {
	var out []MetricsLine
	for _, l := range lines {
		var m MetricsLine
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		m.Time = time.Time{}
		m.SampleSeconds, m.RewardSeconds, m.TrainSeconds, m.StepSeconds, m.WaitSeconds = 0, 0, 0, 0, 0
		out = append(out, m)
	}
	return out
}

func TestResumeFollowsTheUninterruptedTrajectory(t *testing.T) {
	straightCfg := testConfig(t, "run.max_steps=12", "grpo.kl_coef=0")
	straight := newBandit(6, 0.5, 11)
	tr := newTestTrainer(straightCfg, straight, rewardOf3)
	drain(tr)
	if err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}

	// The same run in two legs: stop at 5 (checkpoint), then resume to 12 in a new process' worth of objects.
	legCfg := testConfig(t, "run.max_steps=5", "grpo.kl_coef=0")
	first := newBandit(6, 0.5, 11)
	tr = newTestTrainer(legCfg, first, rewardOf3)
	drain(tr)
	if err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	legCfg.Run.MaxSteps = 12
	second := newBandit(6, 0.5, 999) // different seed: everything must come from the checkpoint
	tr = newTestTrainer(legCfg, second, rewardOf3)
	drain(tr)
	if err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(straight.Theta, second.Theta) {
		t.Fatalf("resumed θ %v != uninterrupted θ %v", second.Theta, straight.Theta)
	}
	a := metricsWithoutTimes(t, readLines(t, filepath.Join(straightCfg.Run.OutDir, "metrics.jsonl")))
	b := metricsWithoutTimes(t, readLines(t, filepath.Join(legCfg.Run.OutDir, "metrics.jsonl")))
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("metrics differ:\n%v\n%v", a, b)
	}
}

func TestCheckpointsAreAtomicAndPruned(t *testing.T) {
	cfg := testConfig(t, "run.max_steps=7", "run.save_every=2", "run.keep_last=2")
	pol := newBandit(6, 0.5, 3)
	tr := newTestTrainer(cfg, pol, rewardOf3)
	drain(tr)
	if err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(cfg.Run.OutDir, checkpointsDir)
	// A save killed half-way leaves a temporary folder and no state.json: ignored.
	if err := os.MkdirAll(filepath.Join(root, ".tmp-123"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "step-00000099"), 0o755); err != nil {
		t.Fatal(err)
	}
	steps, err := listCheckpoints(root)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range steps {
		names = append(names, filepath.Base(s))
	}
	if want := []string{"step-00000006", "step-00000007"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("checkpoints %v, want %v", names, want)
	}
	latest, _ := LatestCheckpoint(cfg.Run.OutDir)
	if filepath.Base(latest) != "step-00000007" {
		t.Fatalf("latest %s", latest)
	}
}

func TestMismatchedCheckpointIsRefused(t *testing.T) {
	cfg := testConfig(t, "run.max_steps=1")
	pol := newBandit(6, 0.5, 3)
	tr := newTestTrainer(cfg, pol, rewardOf3)
	drain(tr)
	if err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	cfg.Model.DModel = 64
	cfg.Run.MaxSteps = 2
	tr = newTestTrainer(cfg, newBandit(6, 0.5, 3), rewardOf3)
	drain(tr)
	err := tr.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "model.d_model is 128 there and 64 here") {
		t.Fatalf("want a refusal naming model.d_model, got %v", err)
	}
}
