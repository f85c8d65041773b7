package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// TestGRPOLearns is the trainer's learning check on the real stack: the
// embedded suite, the tokenizer trained on it, the gorgonia model, the reward
// engine. A short warm start (SFT) leaves a weak policy; GRPO then has to
// raise the rate its phase rewards (well-formed diffs in syntax, applying
// ones in apply-only) on that task, by more than sampling noise explains
// (two-proportion z >= 2 between steps 1-20 and 41-60). One task and G=16
// keep it to minutes on two cores.
func TestGRPOLearns(t *testing.T) {
	if testing.Short() {
		t.Skip("learning check: minutes of training, skipped with -short")
	}
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	shared := t.TempDir() // the warm start and tokenizer, made once for both phases
	common := []string{
		"data.mini_tasks=20", "data.train_limit=1",
		"model.layers=2", "model.d_model=64", "model.d_ff=192", "model.vocab_size=1024",
		"sample.max_new_tokens=200", "grpo.group_size=16", "grpo.prompts_per_step=1",
		"sft.steps=70", "sft.lr=3e-3", "sft.out=" + filepath.Join(shared, "sft"),
		// The warm start this test was calibrated on: gold replies only.
		"sft.synthetic_per_task=0", "sft.prompt_loss_weight=0",
		"model.tokenizer=" + filepath.Join(shared, "tokenizer.json"),
		"optim.lr=1e-3", "optim.warmup_steps=10",
		"curriculum.auto=false", "watchdog.barren_epochs=0", "run.max_steps=60", "run.save_every=0",
		// Calibrated on the plain reward and one group a step: the shaping
		// terms and dynamic sampling are tested in train and reward.
		"grpo.dynamic_sampling=false", "reward.similarity_weight=0", "reward.hunk_credit=0",
	}
	tests := []struct {
		phase  string
		metric func(metricsLine) float64
	}{
		{"syntax", func(m metricsLine) float64 { return m.Syntax }},
		{"apply-only", func(m metricsLine) float64 { return m.Apply }},
	}
	for _, tt := range tests {
		t.Run(tt.phase, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "run")
			args := append([]string{"run", "--headless", "run.out_dir=" + out, "curriculum.phase=" + tt.phase}, common...)
			if _, err := os.Stat(filepath.Join(shared, "tokenizer.json")); err != nil {
				// The first run trains the tokenizer into its out_dir; keep it for the next.
				args = append(args[:len(args):len(args)], "model.tokenizer=")
			}
			code, stdout, stderr := runCLI(t, args...)
			if code != ExitOK {
				t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
			}
			if _, err := os.Stat(filepath.Join(shared, "tokenizer.json")); err != nil {
				data, err := os.ReadFile(filepath.Join(out, "tokenizer.json"))
				if err != nil {
					t.Fatal(err)
				}
				os.WriteFile(filepath.Join(shared, "tokenizer.json"), data, 0o644)
			}
			lines := readMetrics(t, filepath.Join(out, "metrics.jsonl"))
			if len(lines) != 60 {
				t.Fatalf("%d steps, want 60", len(lines))
			}
			first, last := meanOf(lines[:20], tt.metric), meanOf(lines[40:], tt.metric)
			z := riseZ(first, last, 20*16)
			t.Logf("%s rate: steps 1-20 %.3f, steps 41-60 %.3f (z = %.2f)", tt.phase, first, last, z)
			if z < 2 {
				t.Fatalf("GRPO did not raise the %s rate significantly: %.3f over steps 1-20, %.3f over steps 41-60, z = %.2f < 2",
					tt.phase, first, last, z)
			}
		})
	}
}

type metricsLine struct {
	Stage  string  `json:"stage"`
	Step   int     `json:"step"`
	Syntax float64 `json:"reward/syntax_valid_rate"`
	Apply  float64 `json:"reward/apply_rate"`
}

func readMetrics(t *testing.T, path string) []metricsLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []metricsLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m metricsLine
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatal(fmt.Errorf("%s: %w", path, err))
		}
		if m.Stage == "grpo" { // the warm start's lines are sft/*
			out = append(out, m)
		}
	}
	return out
}

// riseZ is the two-proportion z statistic of a rate rising from first to
// last, each measured over n completions: the rise in standard errors of
// the pooled rate. z >= 2 is a rise that sampling noise alone gives about
// 2% of the time.
func riseZ(first, last float64, n int) float64 {
	p := (first + last) / 2
	se := math.Sqrt(p * (1 - p) * 2 / float64(n))
	if se == 0 {
		return 0
	}
	return (last - first) / se
}

func meanOf(lines []metricsLine, f func(metricsLine) float64) float64 {
	s := 0.0
	for _, l := range lines {
		s += f(l)
	}
	return s / float64(len(lines))
}

func TestRiseZ(t *testing.T) {
	// 0.166 -> 0.334 over 320 each: pooled 0.25, se = sqrt(0.25*0.75*2/320) = 0.03423; z = 0.168/0.03423 = 4.908.
	if z := riseZ(0.166, 0.334, 320); math.Abs(z-4.908) > 0.001 {
		t.Fatalf("z = %.4f, want 4.908", z)
	}
	if z := riseZ(0.3, 0.3, 320); z != 0 {
		t.Fatalf("no rise: z = %v", z)
	}
	if z := riseZ(0, 0, 320); z != 0 {
		t.Fatalf("degenerate: z = %v", z)
	}
}
