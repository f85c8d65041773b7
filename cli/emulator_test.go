package cli

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/swetui/swetui/app"
	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/model/cuda"
)

// TestRunOnTheEmulatedGPU: `swetui run model.device=cuda` on the CUDA
// emulator (model/cuda/emu, make cuda-emu) is the GPU engine's whole real
// path: NVRTC compiles the kernels, the driver runs them, cuBLAS does the
// products. The warm start trains there with the losses the engine has on
// its CPU kernels, GRPO samples and steps, a checkpoint is saved, and the
// run resumes from it for one more step.
func TestRunOnTheEmulatedGPU(t *testing.T) {
	libs := emulatorLibs(t, "libcuda.so.1")
	// Nobody mistakes it for a GPU.
	code, stdout, stderr := runCLI(t, "version", "model.device=cuda", "model.cuda_libs="+libs)
	if code != ExitOK || !strings.Contains(stdout, "device cuda:0 cudaemu 0 (CPU emulation, not a GPU; sm_80)") {
		t.Errorf("swetui version on the emulator: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if testing.Short() {
		t.Skip("a warm start and GRPO steps on the emulated GPU (about a minute)")
	}
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	args := func(out string, steps int) []string {
		return []string{"run", "--headless", "run.out_dir=" + out, "model.device=cuda", "model.cuda_libs=" + libs,
			"data.mini_tasks=20", "data.train_limit=1", "model.layers=1", "model.d_model=32", "model.heads=2",
			"model.kv_heads=1", "model.d_ff=64", "model.vocab_size=400", "model.context=384", "sample.max_new_tokens=128",
			"sft.shipped=false", "sft.steps=8", "sft.lr=2e-2", "sft.synthetic_per_task=0", "sft.batch_size=1",
			"sft.heldout_every=0", "run.max_steps=" + strconv.Itoa(steps), "curriculum.phase=syntax", "curriculum.auto=false",
			"grpo.dynamic_sampling=false", "watchdog.barren_epochs=0"}
	}
	emu := t.TempDir()
	code, stdout, stderr = runCLI(t, args(emu, 2)...)
	if code != ExitOK {
		t.Fatalf("run on the emulator: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if all := stdout + stderr; !strings.Contains(all, "warm start: trains on cuda:0 cudaemu 0 (CPU emulation, not a GPU") {
		t.Errorf("the run does not name the emulated device:\n%s", all)
	}
	// The same run on the engine's CPU kernels.
	saved := app.OpenDevice
	app.OpenDevice = func(context.Context, config.Config) (cuda.Device, error) { return cuda.NewCPU(), nil }
	ref := t.TempDir()
	code, stdout, stderr = runCLI(t, args(ref, 2)...)
	app.OpenDevice = saved
	if code != ExitOK {
		t.Fatalf("run on the CPU kernels: exit %d\n%s\n%s", code, stdout, stderr)
	}
	got, want := sftLosses(t, emu), sftLosses(t, ref)
	if len(got) != 8 || len(want) != 8 {
		t.Fatalf("warm start losses: %d on the emulator, %d on the CPU kernels, want 8", len(got), len(want))
	}
	for i := range got {
		if d := got[i] - want[i]; d > 1e-3*want[i] || d < -1e-3*want[i] {
			t.Errorf("warm start step %d: loss %.6f on the emulator, %.6f on the CPU kernels", i+1, got[i], want[i])
		}
	}
	if got[7] >= got[0] {
		t.Errorf("the warm start on the emulator did not learn: %v", got)
	}
	t.Logf("warm start losses, emulator %.4f -> %.4f, CPU kernels %.4f -> %.4f", got[0], got[7], want[0], want[7])
	// Resumed on the emulator: its checkpoint loads and one more step runs.
	code, stdout, stderr = runCLI(t, args(emu, 3)...)
	if code != ExitOK {
		t.Fatalf("resumed run on the emulator: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if all := stdout + stderr; !strings.Contains(all, "resum") {
		t.Errorf("the second run did not resume:\n%s", all)
	}
	if steps := grpoSteps(t, emu); len(steps) != 3 || steps[2] != 3 {
		t.Errorf("GRPO steps after the resume: %v, want 1, 2, 3", steps)
	}
	if _, err := os.Stat(filepath.Join(emu, "checkpoints", "step-00000003")); err != nil {
		t.Errorf("the resumed run saved no checkpoint: %v", err)
	}
}

func metricsLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(out, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("metrics.jsonl: %v", err)
		}
		lines = append(lines, m)
	}
	return lines
}

func sftLosses(t *testing.T, out string) []float64 {
	var ls []float64
	for _, m := range metricsLines(t, out) {
		if m["stage"] == "sft" {
			if v, ok := m["sft/loss"].(float64); ok {
				ls = append(ls, v)
			}
		}
	}
	return ls
}

func grpoSteps(t *testing.T, out string) []int {
	var steps []int
	for _, m := range metricsLines(t, out) {
		if m["stage"] == "grpo" {
			if v, ok := m["step"].(float64); ok {
				steps = append(steps, int(v))
			}
		}
	}
	return steps
}

// TestRunOnEmulatedGPUs runs TestRunDataParallel in a child process with
// four emulated GPUs (the emulator reads its device count once, at cuInit).
func TestRunOnEmulatedGPUs(t *testing.T) {
	libs := emulatorLibs(t, "libnccl.so.2")
	if testing.Short() {
		t.Skip("runs on one and two emulated GPUs (about a minute)")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestRunDataParallel$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "SWETUI_TEST_DP="+libs, "CUDAEMU_DEVICES=4", "CUDAEMU_RACECHECK=0", "XDG_CACHE_HOME="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestRunDataParallel") {
		t.Fatalf("%v:\n%s", err, string(out)[max(0, len(out)-8000):])
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "emulator_test.go") {
			t.Log(strings.TrimSpace(l))
		}
	}
}

// TestRunDataParallel: `swetui run model.device=cuda:0,1` on two emulated
// GPUs warms up with the losses one GPU has, runs GRPO with the optimiser
// sharded, saves, and the run resumes from that checkpoint on one GPU.
func TestRunDataParallel(t *testing.T) {
	libs := os.Getenv("SWETUI_TEST_DP")
	if libs == "" {
		t.Skip("run by TestRunOnEmulatedGPUs (two emulated GPUs)")
	}
	args := func(out, device string, steps int) []string {
		return []string{"run", "--headless", "run.out_dir=" + out, "model.device=" + device, "model.cuda_libs=" + libs,
			"data.mini_tasks=20", "data.train_limit=2", "model.layers=1", "model.d_model=32", "model.heads=2",
			"model.kv_heads=1", "model.d_ff=64", "model.vocab_size=400", "model.context=384", "sample.max_new_tokens=128",
			"sft.shipped=false", "sft.steps=8", "sft.lr=2e-2", "sft.synthetic_per_task=0", "sft.batch_size=1",
			"sft.heldout_every=0", "run.max_steps=" + strconv.Itoa(steps), "curriculum.phase=syntax", "curriculum.auto=false",
			"grpo.dynamic_sampling=false", "watchdog.barren_epochs=0"}
	}
	code, stdout, stderr := runCLI(t, "version", "model.device=cuda:0,1", "model.cuda_libs="+libs)
	if code != ExitOK || !strings.Contains(stdout, "2 GPUs, data-parallel: cuda:0 cudaemu 0") || !strings.Contains(stdout, "cuda:1 cudaemu 1") {
		t.Errorf("swetui version on two emulated GPUs: exit %d\n%s\n%s", code, stdout, stderr)
	}
	two, one := t.TempDir(), t.TempDir()
	code, stdout, stderr = runCLI(t, args(two, "cuda:0,1", 2)...)
	if code != ExitOK {
		t.Fatalf("run on two GPUs: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if all := stdout + stderr; !strings.Contains(all, "2 GPUs, data-parallel, optimiser sharded (ZeRO-1): cuda:0 cudaemu 0") {
		t.Errorf("the run does not name its two GPUs:\n%s", all)
	}
	// Each GPU's share after each step: both trained and took part in
	// the collectives.
	share := regexp.MustCompile(`gpus after step 2: cuda:0 \d+ sampled, sample [\d.]+s, train [\d.]+s, collective [\d.]+s, [\d.]+/[\d.]+ GiB; cuda:1 \d+ sampled`)
	if !share.MatchString(stdout) {
		t.Errorf("no share of each GPU after step 2:\n%s", stdout)
	}
	code, stdout, stderr = runCLI(t, args(one, "cuda:0", 2)...)
	if code != ExitOK {
		t.Fatalf("run on one GPU: exit %d\n%s\n%s", code, stdout, stderr)
	}
	got, want := sftLosses(t, two), sftLosses(t, one)
	if len(got) != 8 || len(want) != 8 {
		t.Fatalf("warm start losses: %d on two GPUs, %d on one, want 8", len(got), len(want))
	}
	for i := range got {
		if d := got[i] - want[i]; d > 1e-4*want[i] || d < -1e-4*want[i] {
			t.Errorf("warm start step %d: loss %.6f on two GPUs, %.6f on one", i+1, got[i], want[i])
		}
	}
	t.Logf("warm start losses, two GPUs %.5f -> %.5f, one %.5f -> %.5f", got[0], got[7], want[0], want[7])
	if steps := grpoSteps(t, two); len(steps) != 2 {
		t.Errorf("GRPO steps on two GPUs: %v", steps)
	}
	// The same run resumed on device until step steps: its stdout.
	resume := func(device string, steps int, extra ...string) string {
		code, stdout, stderr := runCLI(t, append(args(two, device, steps), extra...)...)
		if code != ExitOK {
			t.Fatalf("resumed on %s: exit %d\n%s\n%s", device, code, stdout, stderr)
		}
		if got := grpoSteps(t, two); len(got) != steps || got[steps-1] != steps {
			t.Errorf("GRPO steps after resuming on %s: %v, want 1 to %d", device, got, steps)
		}
		return stdout
	}
	// Saved on two GPUs (moments gathered from both), resumed on one;
	// then on four with the async loop (sampling on each rank's snapshots
	// while the step trains); then from four on two.
	resume("cuda:0", 3)
	stdout = resume("cuda:0,1,2,3", 5, "grpo.async.enabled=true", "grpo.is_correction=truncated")
	if !regexp.MustCompile(`gpus after step 5: cuda:0 .*; cuda:3 \d+ sampled`).MatchString(stdout) {
		t.Errorf("no share of four GPUs after step 5:\n%s", stdout)
	}
	resume("cuda:0,1", 6)
}

// emulatorLibs is the built CUDA emulator's folder, holding lib: CI must
// have it; elsewhere the test skips.
func emulatorLibs(t *testing.T, lib string) string {
	t.Helper()
	libs, err := filepath.Abs(filepath.Join("..", "build", "cudaemu"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(libs, lib)); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the CUDA emulator is not built (%v): make cuda-emu (make test builds it)", err)
		}
		t.Skip("the CUDA emulator is not built: make cuda-emu (make test builds it)")
	}
	return libs
}
