package train

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/history"
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
func metricsWithoutTimes(t *testing.T, lines []string) []history.MetricsLine {
	var out []history.MetricsLine
	for _, l := range lines {
		var m history.MetricsLine
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
	root := filepath.Join(cfg.Run.OutDir, history.CheckpointsDir)
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
	for _, tt := range []struct {
		name   string
		change func(*config.Config)
		want   string
	}{
		{"model", func(c *config.Config) { c.Model.DModel = 64 }, "its config.toml says model.d_model = 128, this run has 64"},
		// testConfig saves with grpo.kl_coef = 0: no reference to resume a KL term from.
		{"KL term without a reference", func(c *config.Config) { c.GRPO.KLCoef = 0.02 }, "its config.toml says grpo.kl_coef = 0, so it holds no reference"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t, "run.max_steps=1")
			pol := newBandit(6, 0.5, 3)
			tr := newTestTrainer(cfg, pol, rewardOf3)
			drain(tr)
			if err := tr.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			tt.change(&cfg)
			cfg.Run.MaxSteps = 2
			tr = newTestTrainer(cfg, newBandit(6, 0.5, 3), rewardOf3)
			drain(tr)
			err := tr.Run(context.Background())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("want a refusal containing %q, got %v", tt.want, err)
			}
		})
	}
}

// damageTests are the ways a checkpoint is found damaged: each must make an
// auto resume fall back to the checkpoint before it, naming what was wrong.
var damageTests = []struct {
	name, file string
	damage     func(path string) error
	why        string
}{
	{"empty config.toml", configFile, func(p string) error { return os.WriteFile(p, nil, 0o644) }, "config.toml is empty"},
	{"torn state.json", stateFile, func(p string) error { return os.WriteFile(p, []byte(`{"step": 3, "ep`), 0o644) }, "state.json"},
	{"missing config.toml", configFile, os.Remove, "no such file"},
}

func TestDamagedNewestCheckpointFallsBack(t *testing.T) {
	for _, tt := range damageTests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t, "run.max_steps=2", "run.save_every=1")
			tr := newTestTrainer(cfg, newBandit(6, 0.5, 3), rewardOf3)
			drain(tr)
			if err := tr.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			newest, _ := LatestCheckpoint(cfg.Run.OutDir)
			if err := tt.damage(filepath.Join(newest, tt.file)); err != nil {
				t.Fatal(err)
			}
			cfg.Run.MaxSteps = 3
			tr = newTestTrainer(cfg, newBandit(6, 0.5, 3), rewardOf3)
			evs := drain(tr)
			if err := tr.Run(context.Background()); err != nil {
				t.Fatalf("resume with a damaged newest checkpoint: %v", err)
			}
			st, msgs := lastStopped(<-evs)
			var warned, resumed bool
			for _, m := range msgs {
				warned = warned || (m.Level == event.Warn && strings.Contains(m.Text, "is damaged") && strings.Contains(m.Text, tt.why))
				resumed = resumed || strings.Contains(m.Text, "resumed from") && strings.Contains(m.Text, "step-00000001 at step 1")
			}
			if !warned || !resumed || st.Step != 3 {
				t.Fatalf("warned %v, resumed from step 1 %v, stopped at %d; messages %v", warned, resumed, st.Step, msgs)
			}
		})
	}
}

// fullDiskStore fails its first Save with ENOSPC, as a full disk would.
type fullDiskStore struct {
	Store
	fails int
}

func (f *fullDiskStore) Save(ctx context.Context, dir string) error {
	if f.fails > 0 {
		f.fails--
		return fmt.Errorf("write weights: %w", syscall.ENOSPC)
	}
	return f.Store.Save(ctx, dir)
}

func TestFullDiskPrunesOlderCheckpointsAndSays(t *testing.T) {
	cfg := testConfig(t, "run.max_steps=3", "run.save_every=1", "run.keep_last=3")
	pol := newBandit(6, 0.5, 3)
	tr := newTestTrainer(cfg, pol, rewardOf3)
	drain(tr)
	if err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	cfg.Run.MaxSteps = 4
	store := &fullDiskStore{Store: pol, fails: 1}
	tr = New(cfg, Deps{Policy: pol, Tokenizer: digitTokenizer{}, Scorer: rewardOf3, Prompter: staticPrompter{},
		Tasks: fakeTasks(5), Store: store})
	evs := drain(tr)
	if err := tr.Run(context.Background()); err != nil {
		t.Fatalf("a full disk that pruning relieved failed the run: %v", err)
	}
	_, msgs := lastStopped(<-evs)
	said := false
	for _, m := range msgs {
		said = said || strings.Contains(m.Text, "disk full while saving step 4: removed 2 older checkpoints")
	}
	steps, _ := listCheckpoints(filepath.Join(cfg.Run.OutDir, history.CheckpointsDir))
	if !said || len(steps) != 2 || filepath.Base(steps[1]) != "step-00000004" {
		t.Fatalf("said %v, checkpoints %v; messages %v", said, steps, msgs)
	}
}
