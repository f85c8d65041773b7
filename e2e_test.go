package main

// An end-to-end test of the real binary in tmux, as an operator drives it:
// the console draws, p pauses (and the step counter stops), 2 switches to
// apply-only (header and metrics.jsonl), s writes a checkpoint, q exits 0,
// and no container is left behind.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

type tmuxSession struct {
	t      *testing.T
	socket string
	name   string
}

func (s *tmuxSession) cmd(args ...string) string {
	s.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-L", s.socket}, args...)...).CombinedOutput()
	if err != nil {
		s.t.Fatalf("tmux %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func (s *tmuxSession) screen() string {
	out, err := exec.Command("tmux", "-L", s.socket, "capture-pane", "-p", "-t", s.name).CombinedOutput()
	if err != nil {
		return ""
	}
	return string(out)
}

func (s *tmuxSession) keys(k ...string) { s.cmd(append([]string{"send-keys", "-t", s.name}, k...)...) }

// waitFor polls the screen until cond holds.
func (s *tmuxSession) waitFor(what string, timeout time.Duration, cond func(screen string) bool) string {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	var screen string
	for time.Now().Before(deadline) {
		screen = s.screen()
		if cond(screen) {
			return screen
		}
		time.Sleep(200 * time.Millisecond)
	}
	s.t.Fatalf("timed out waiting for %s; screen:\n%s", what, screen)
	return ""
}

var stepRe = regexp.MustCompile(`step (\d+)`)

func headerStep(screen string) int {
	first, _, _ := strings.Cut(screen, "\n")
	m := stepRe.FindStringSubmatch(first)
	if m == nil {
		return -1
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

func firstLine(screen string) string {
	line, _, _ := strings.Cut(screen, "\n")
	return line
}

// leftoverContainers lists the run's containers; other tests may be running
// their own beside this one, so the filter is the run's label.
func leftoverContainers(t *testing.T, run string) string {
	out, err := exec.Command("docker", "ps", "-aq", "--filter", "label=swetui.managed=true", "--filter", "label=swetui.run="+run).CombinedOutput()
	if err != nil {
		t.Fatalf("docker ps: %v\n%s", err, out)
	}
	return strings.TrimSpace(string(out))
}

func TestConsoleInTmux(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end console test: skipped with -short")
	}
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux is not installed (make setup installs it)")
	}
	if err := exec.Command("docker", "info").Run(); err != nil {
		t.Skip("no Docker daemon: the console test checks for leaked containers")
	}
	dir := t.TempDir()
	bin := buildBinary(t, dir)
	out := filepath.Join(dir, "run")
	runName := "e2e-" + strconv.Itoa(os.Getpid())
	cfgPath := writeSmallConfig(t, dir, runName, out, 0, true)
	exitFile := filepath.Join(dir, "exit")
	s := &tmuxSession{t: t, socket: "swetui-e2e-" + strconv.Itoa(os.Getpid()), name: "e2e"}
	s.cmd("new-session", "-d", "-s", s.name, "-x", "120", "-y", "36",
		fmt.Sprintf("%s run --config %s; echo $? > %s; sleep 30", bin, cfgPath, exitFile))
	defer exec.Command("tmux", "-L", s.socket, "kill-server").Run()

	first := s.waitFor("the console to draw and train", 3*time.Minute, func(sc string) bool {
		return strings.Contains(firstLine(sc), "STOPPED") || (strings.Contains(firstLine(sc), "RUNNING") && headerStep(sc) >= 1)
	})
	if strings.Contains(firstLine(first), "STOPPED") {
		t.Fatalf("the run stopped by itself:\n%s", first)
	}
	// The warm start learnt its one task's gold patch: the first step's
	// completions are valid diffs, and the Diff pane draws the selected one.
	s.waitFor("the Diff pane to draw a patch", 30*time.Second, func(sc string) bool {
		return strings.Contains(sc, "--- a/") && strings.Contains(sc, "+++ b/") && !strings.Contains(sc, "no diff extracted")
	})

	s.keys("p")
	paused := s.waitFor("PAUSED", time.Minute, func(sc string) bool { return strings.Contains(firstLine(sc), "PAUSED") })
	at := headerStep(paused)
	time.Sleep(3 * time.Second)
	if now := headerStep(s.screen()); now != at {
		t.Fatalf("step counter moved from %d to %d while paused", at, now)
	}

	s.keys("2")
	s.waitFor("APPLY-ONLY in the header", 30*time.Second, func(sc string) bool { return strings.Contains(firstLine(sc), "APPLY-ONLY") })
	s.keys("p")
	s.waitFor("a step in apply-only", 2*time.Minute, func(sc string) bool {
		return strings.Contains(firstLine(sc), "RUNNING") && headerStep(sc) > at
	})
	if !metricsHavePhase(t, filepath.Join(out, "metrics.jsonl"), "apply-only") {
		// The step shown may not be flushed yet; one more step settles it.
		time.Sleep(3 * time.Second)
		if !metricsHavePhase(t, filepath.Join(out, "metrics.jsonl"), "apply-only") {
			t.Fatal("metrics.jsonl has no apply-only step after switching with 2")
		}
	}

	s.keys("s")
	deadline := time.Now().Add(time.Minute)
	for {
		matches, _ := filepath.Glob(filepath.Join(out, "checkpoints", "step-*", "state.json"))
		if len(matches) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("s wrote no checkpoint; screen:\n%s", s.screen())
		}
		time.Sleep(200 * time.Millisecond)
	}

	s.keys("q")
	deadline = time.Now().Add(2 * time.Minute)
	for {
		if data, err := os.ReadFile(exitFile); err == nil {
			if code := strings.TrimSpace(string(data)); code != "0" {
				t.Fatalf("swetui exited %s; screen:\n%s", code, s.screen())
			}
			break
		}
		if strings.Contains(s.screen(), "y/n") {
			s.keys("y")
		}
		if time.Now().After(deadline) {
			t.Fatalf("q did not quit; screen:\n%s", s.screen())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if left := leftoverContainers(t, runName); left != "" {
		t.Fatalf("containers left behind: %s", left)
	}
}

func metricsHavePhase(t *testing.T, path, phase string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line struct {
			Phase string `json:"phase"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Phase == phase {
			return true
		}
	}
	return false
}

func buildBinary(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "swetui")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// writeSmallConfig writes a small, fast configuration: a tiny model and a
// run that goes on until stopped. Without warm, there is no warm start and
// replies are short; with it, a warm start of about 15 s on one task teaches
// the policy that task's gold patch, so its replies are real diffs.
func writeSmallConfig(t *testing.T, dir, runName, out string, saveEvery int, warm bool) string {
	t.Helper()
	model := `[data]
mini_tasks = 20
[model]
layers = 1
d_model = 32
heads = 2
kv_heads = 1
d_ff = 64
context = 256
vocab_size = 400
[sample]
max_new_tokens = 24
`
	if warm {
		model = `[data]
mini_tasks = 20
train_limit = 1
[model]
layers = 1
d_model = 64
d_ff = 128
vocab_size = 512
[sample]
max_new_tokens = 200
[sft]
steps = 100
batch_size = 1
lr = 2e-2
synthetic_per_task = 0
prompt_loss_weight = 0
heldout_every = 0
`
	}
	cfg := fmt.Sprintf(`[run]
name = %q
out_dir = %q
max_steps = 0
save_every = %d
sft_first = %v
%s[grpo]
prompts_per_step = 1
[curriculum]
auto = false
[watchdog]
barren_epochs = 0
`, runName, out, saveEvery, warm, model)
	path := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// After kill -9 mid-run (checkpoints being written every step), the newest
// complete checkpoint loads and the run goes on from it.
func TestKill9LeavesALoadableCheckpoint(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	dir := t.TempDir()
	bin := buildBinary(t, dir)
	out := filepath.Join(dir, "run")
	cfgPath := writeSmallConfig(t, dir, "kill9-"+strconv.Itoa(os.Getpid()), out, 1, false)
	cmd := exec.Command(bin, "run", "--headless", "--config", cfgPath)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		matches, _ := filepath.Glob(filepath.Join(out, "checkpoints", "step-*"))
		if len(matches) >= 3 {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("no checkpoints written")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL: no cleanup runs
		t.Fatal(err)
	}
	cmd.Wait()
	latest := newestCheckpoint(t, out)
	n, _ := strconv.Atoi(strings.TrimPrefix(filepath.Base(latest), "step-"))
	resumed, err := exec.Command(bin, "run", "--headless", "--config", cfgPath, fmt.Sprintf("run.max_steps=%d", n+2)).CombinedOutput()
	if err != nil {
		t.Fatalf("resume after kill -9: %v\n%s", err, resumed)
	}
	want := fmt.Sprintf("resumed from %s at step %d", latest, n)
	if !strings.Contains(string(resumed), want) || !strings.Contains(string(resumed), fmt.Sprintf("stopped at step %d: finished", n+2)) {
		t.Fatalf("want %q and a finish at step %d:\n%s", want, n+2, resumed)
	}
}

// newestCheckpoint is the newest checkpoint folder with a state.json: the
// trainer's own rule, restated so the test does not lean on it.
func newestCheckpoint(t *testing.T, out string) string {
	t.Helper()
	matches, _ := filepath.Glob(filepath.Join(out, "checkpoints", "step-*", "state.json"))
	if len(matches) == 0 {
		t.Fatal("no complete checkpoint after kill -9")
	}
	newest := ""
	for _, m := range matches {
		if d := filepath.Dir(m); d > newest {
			newest = d
		}
	}
	return newest
}
