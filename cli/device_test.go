package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/swetui/swetui/app"
	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/model/cuda"
)

// TestSFTThenEvalOnTheDevicePath: with model.device set, `swetui sft`
// trains on the device engine and `swetui eval` samples there, through the
// one opener run uses too. The engine runs on its CPU kernels here (the
// same orchestration a GPU runs): the loss falls, the checkpoint written
// from the device's weights loads, and eval scores its replies.
func TestSFTThenEvalOnTheDevicePath(t *testing.T) {
	useCPUKernels(t)
	out := t.TempDir()
	common := []string{"run.out_dir=" + out, "model.device=cuda", "data.mini_tasks=20", "data.train_limit=1", "model.layers=1",
		"model.d_model=32", "model.heads=2", "model.kv_heads=1", "model.d_ff=64", "model.vocab_size=400", "sample.max_new_tokens=160"}
	code, stdout, stderr := runCLI(t, append([]string{"sft", "sft.steps=30", "sft.lr=2e-2", "sft.synthetic_per_task=0",
		"sft.batch_size=1", "sft.heldout_every=0"}, common...)...)
	if code != ExitOK {
		t.Fatalf("sft: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "trains on the device engine on its CPU kernels") {
		t.Errorf("sft does not say it trains on the device:\n%s", stderr)
	}
	m := regexp.MustCompile(`loss: 1:(\d+\.\d+) .* 30:(\d+\.\d+)`).FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("no loss curve:\n%s", stdout)
	}
	first, _ := strconv.ParseFloat(m[1], 64)
	last, _ := strconv.ParseFloat(m[2], 64)
	t.Logf("warm start on the device engine: loss %.3f -> %.3f", first, last)
	if last > first/2 {
		t.Errorf("loss %v -> %v on the device path: it did not learn", first, last)
	}
	preds := filepath.Join(out, "preds.jsonl")
	code, stdout, stderr = runCLI(t, append([]string{"eval", "--ckpt", filepath.Join(out, "sft"), "--phase", "syntax", "--samples", "2",
		"--split", "train", "--out", preds}, common...)...)
	if code != ExitOK {
		t.Fatalf("eval: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "eval: sampling on the device engine on its CPU kernels") || !strings.Contains(stdout, "syntax-valid") {
		t.Errorf("eval on the device:\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
	}
	// Eval only samples: its plan (and engine) holds no training state.
	if strings.Contains(stderr, "AdamW moments") || !strings.Contains(stderr, "activations (a prompt's prefill") {
		t.Errorf("eval's memory plan counts training state:\n%s", stderr)
	}
	if b, err := os.ReadFile(preds); err != nil || !strings.Contains(string(b), "mini__") {
		t.Errorf("predictions: %v\n%s", err, b)
	}
}

// TestRunWarmStartOnTheDevicePath: a run's warm start trains on GRPO's
// device policy (its own optimiser and schedule swapped in), and GRPO then
// starts from the warmed-up weights with a fresh optimiser.
func TestRunWarmStartOnTheDevicePath(t *testing.T) {
	if testing.Short() {
		t.Skip("a warm start and GRPO steps on the device engine's CPU kernels")
	}
	useCPUKernels(t)
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	out := t.TempDir()
	code, stdout, stderr := runCLI(t, "run", "--headless", "run.out_dir="+out, "model.device=cuda", "data.mini_tasks=20", "data.train_limit=1",
		"model.layers=1", "model.d_model=32", "model.heads=2", "model.kv_heads=1", "model.d_ff=64", "model.vocab_size=400",
		"sample.max_new_tokens=160", "sft.shipped=false", "sft.steps=30", "sft.lr=2e-2", "sft.synthetic_per_task=0", "sft.batch_size=1",
		"sft.heldout_every=0", "run.max_steps=2", "curriculum.phase=syntax", "curriculum.auto=false", "grpo.dynamic_sampling=false",
		"watchdog.barren_epochs=0")
	if code != ExitOK {
		t.Fatalf("run: exit %d\n%s\n%s", code, stdout, stderr)
	}
	all := stdout + stderr
	if !strings.Contains(all, "warm start: trains on the device engine on its CPU kernels") {
		t.Errorf("the warm start does not say it trains on the device:\n%s", all)
	}
	m := regexp.MustCompile(`sft: 30 steps .* loss (\d+\.\d+) -> (\d+\.\d+)`).FindStringSubmatch(all)
	if m == nil {
		t.Fatalf("no warm start summary:\n%s", all)
	}
	first, _ := strconv.ParseFloat(m[1], 64)
	last, _ := strconv.ParseFloat(m[2], 64)
	if last > first/2 {
		t.Errorf("warm start on the device: loss %v -> %v", first, last)
	}
	raw, err := os.ReadFile(filepath.Join(out, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var grpo []struct {
		Stage   string `json:"stage"`
		Version int    `json:"version"`
	}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var l struct {
			Stage   string `json:"stage"`
			Version int    `json:"version"`
		}
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatal(err)
		}
		if l.Stage == "grpo" {
			grpo = append(grpo, l)
		}
	}
	// GRPO's first step samples from version 0 of its own optimiser, not
	// from the warm start's 30 steps.
	if len(grpo) != 2 || grpo[0].Version != 0 {
		t.Errorf("GRPO steps after the warm start: %+v, want 2 starting at version 0", grpo)
	}
}

// smallDevice is the CPU kernels on a device that says it has little free
// memory.
type smallDevice struct {
	cuda.Device
	free uint64
}

func (d smallDevice) Info() cuda.Info {
	i := d.Device.Info()
	i.FreeBytes = d.free
	return i
}

// TestMemoryPlanRefusesARunThatCannotFit: on a device with less free
// memory than the plan, sft stops before allocating, with the plan and
// the settings that would fit.
func TestMemoryPlanRefusesARunThatCannotFit(t *testing.T) {
	saved := app.OpenDevice
	t.Cleanup(func() { app.OpenDevice = saved })
	out := t.TempDir()
	hf := filepath.Join(out, "hf")
	tinyPretrained(t, hf)
	common := []string{"model.device=cuda", "model.init_ckpt=" + hf, "run.out_dir=" + out, "data.mini_tasks=20",
		"data.train_limit=1", "sample.max_new_tokens=400", "sft.steps=1"}
	// Full fine-tuning needs about 100 MiB here (mostly activations of a
	// 16,384-token micro-batch); with 60 MiB free, smaller micro-batches fit.
	app.OpenDevice = func(context.Context, config.Config) (cuda.Device, error) {
		return smallDevice{cuda.NewCPU(), 60 << 20}, nil
	}
	code, stdout, stderr := runCLI(t, append([]string{"sft"}, common...)...)
	if code != ExitFailure {
		t.Fatalf("sft on a small device: exit %d, want %d\n%s\n%s", code, ExitFailure, stdout, stderr)
	}
	for _, want := range []string{"memory plan: the run needs", "which has 60.0 MiB free", "activations (one micro-batch of 16384 tokens)",
		"it would fit with", "model.micro_tokens="} {
		if !strings.Contains(stderr, want) {
			t.Errorf("refusal lacks %q:\n%s", want, stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "sft", "config.json")); err == nil {
		t.Error("a refused warm start wrote a checkpoint")
	}
}

// useCPUKernels makes model.device's engine run on its CPU kernels for
// the test: the device path without a GPU.
func useCPUKernels(t *testing.T) {
	saved := app.OpenDevice
	app.OpenDevice = func(context.Context, config.Config) (cuda.Device, error) { return cuda.NewCPU(), nil }
	t.Cleanup(func() { app.OpenDevice = saved })
}

// TestRecomputeWhenThePlanNeedsIt: model.recompute=auto turns recomputed
// activations on for a device whose free memory holds the run only with
// them (and trains), and leaves them off where the run fits without.
func TestRecomputeWhenThePlanNeedsIt(t *testing.T) {
	saved := app.OpenDevice
	t.Cleanup(func() { app.OpenDevice = saved })
	out := t.TempDir()
	common := []string{"run.out_dir=" + out, "model.device=cuda", "data.mini_tasks=20", "data.train_limit=1", "model.layers=4",
		"model.d_model=32", "model.heads=2", "model.kv_heads=1", "model.d_ff=64", "model.vocab_size=300",
		"sample.max_new_tokens=400", "sft.steps=2", "sft.synthetic_per_task=0", "sft.batch_size=1", "sft.heldout_every=0"}
	sft := func(free uint64, args ...string) (string, string) {
		t.Helper()
		app.OpenDevice = func(context.Context, config.Config) (cuda.Device, error) {
			return smallDevice{cuda.NewCPU(), free}, nil
		}
		os.RemoveAll(filepath.Join(out, "sft"))
		code, stdout, stderr := runCLI(t, append(append([]string{"sft"}, common...), args...)...)
		if code != ExitOK {
			t.Fatalf("sft %v with %d bytes free: exit %d\n%s\n%s", args, free, code, stdout, stderr)
		}
		return stdout, stderr
	}
	total := func(stderr string) float64 {
		t.Helper()
		m := regexp.MustCompile(`total\s+([0-9.]+) MiB`).FindStringSubmatch(stderr)
		if m == nil {
			t.Fatalf("no plan total in MiB:\n%s", stderr)
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}
	_, kept := sft(1<<40, "model.recompute=off")
	_, again := sft(1<<40, "model.recompute=on")
	keptMiB, againMiB := total(kept), total(again)
	if againMiB >= keptMiB || !strings.Contains(again, "recomputed") {
		t.Fatalf("recomputing holds %.1f MiB, keeping %.1f:\n%s", againMiB, keptMiB, again)
	}
	between := uint64((keptMiB + againMiB) / 2 * (1 << 20))
	if _, stderr := sft(between); !strings.Contains(stderr, "recomputed") || total(stderr) != againMiB {
		t.Errorf("auto with %.1f MiB free (kept %.1f, recomputed %.1f) does not recompute:\n%s", float64(between)/(1<<20), keptMiB, againMiB, stderr)
	}
	if _, stderr := sft(1 << 40); strings.Contains(stderr, "recomputed") {
		t.Errorf("auto recomputes on a device that holds the run without:\n%s", stderr)
	}
}
