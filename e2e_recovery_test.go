package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/swetui/swetui/history"
)

// After kill -9 mid-run (checkpoints being written every step), the newest
// complete checkpoint loads and the run goes on from it.
func TestKill9LeavesALoadableCheckpoint(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	dir := t.TempDir()
	bin := buildBinary(t)
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

// TestKill9HistoryHoldsEachStepOnce kills a docker-phase run with -9 at
// several points, in the warm start and in GRPO, resuming each time: every
// history file then holds each warm-start and GRPO step exactly once, and
// no container of the run is left.
func TestKill9HistoryHoldsEachStepOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	if err := exec.Command("docker", "image", "inspect", "swetui/mini:latest").Run(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("the embedded suite's image is missing (make setup builds it)")
		}
		t.Skip("the embedded suite's image is missing: make setup builds it")
	}
	dir := t.TempDir()
	bin := buildBinary(t)
	out := filepath.Join(dir, "run")
	runName := "kill9h-" + strconv.Itoa(os.Getpid())
	cfgPath := writeSmallConfig(t, dir, runName, out, 1, true)
	const steps = 5
	args := []string{"run", "--headless", "--config", cfgPath, "curriculum.phase=docker", "sft.save_every=10",
		"run.max_steps=" + strconv.Itoa(steps), "watchdog.stall_s=0"}
	// Kill once the history shows these points: mid warm start, then in
	// GRPO twice.
	kills := []func() bool{
		func() bool { return maxStep(t, filepath.Join(out, "metrics.jsonl"), "sft_step") >= 27 },
		func() bool { return maxStep(t, filepath.Join(out, "metrics.jsonl"), "step") >= 2 },
		func() bool { return maxStep(t, filepath.Join(out, "rollouts.jsonl"), "step") >= 4 },
	}
	for i, reached := range kills {
		cmd := exec.Command(bin, args...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(3 * time.Minute)
		for !reached() {
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				t.Fatalf("kill %d: the run never got there", i+1)
			}
			time.Sleep(20 * time.Millisecond)
		}
		cmd.Process.Kill() // SIGKILL: no cleanup runs
		cmd.Wait()
	}
	if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
		t.Fatalf("final resume: %v\n%s", err, out)
	}
	metrics := readJSONL(t, filepath.Join(out, "metrics.jsonl"))
	onceEach(t, "metrics.jsonl warm-start steps", fieldOf(metrics, "sft_step"), 100)
	onceEach(t, "metrics.jsonl GRPO steps", fieldOf(metrics, "step"), steps)
	rollouts := readJSONL(t, filepath.Join(out, "rollouts.jsonl"))
	perStep := map[int]int{}
	for _, r := range rollouts {
		perStep[int(r["step"].(float64))]++
	}
	groups := map[int]int{} // dynamic sampling may draw the one task again
	for _, m := range metrics {
		if st, ok := m["step"].(float64); ok {
			groups[int(st)] = int(m["grpo/groups"].(float64))
		}
	}
	for s := 1; s <= steps; s++ {
		if want := 4 * groups[s]; want == 0 || perStep[s] != want { // G=4
			t.Errorf("rollouts.jsonl has %d completions of step %d, want %d (%d groups)", perStep[s], s, want, groups[s])
		}
	}
	var finished []any
	for _, e := range readJSONL(t, filepath.Join(out, "events.jsonl")) {
		if e["kind"] == "step_finished" {
			finished = append(finished, e["step"])
		}
	}
	onceEach(t, "events.jsonl step_finished", finished, steps)
	tb, err := history.ReadTensorBoard(filepath.Join(out, "tb"))
	if err != nil {
		t.Fatal(err)
	}
	for tag, want := range map[string]int{"reward/mean": steps, "sft/loss": 100} {
		var got []any
		for _, s := range tb[tag] {
			got = append(got, float64(s))
		}
		onceEach(t, "TensorBoard "+tag, got, want)
	}
	if left := leftoverContainers(t, runName); left != "" {
		t.Fatalf("containers of the run left behind: %s", left)
	}
}

func maxStep(t *testing.T, path, field string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	best := 0
	for _, line := range strings.Split(string(data), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil {
			if v, ok := m[field].(float64); ok && int(v) > best {
				best = int(v)
			}
		}
	}
	return best
}

func readJSONL(t *testing.T, path string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for i, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("%s:%d is not whole JSON: %v", path, i+1, err)
		}
		out = append(out, m)
	}
	return out
}

func fieldOf(lines []map[string]any, field string) []any {
	var out []any
	for _, l := range lines {
		if v, ok := l[field]; ok {
			out = append(out, v)
		}
	}
	return out
}

// onceEach asserts vals are 1..n, each once.
func onceEach(t *testing.T, what string, vals []any, n int) {
	t.Helper()
	seen := map[int]int{}
	for _, v := range vals {
		f, ok := v.(float64)
		if !ok {
			t.Fatalf("%s: %v is not a step", what, v)
		}
		seen[int(f)]++
	}
	for s := 1; s <= n; s++ {
		if seen[s] != 1 {
			t.Errorf("%s: step %d appears %d times, want once", what, s, seen[s])
		}
	}
	if len(seen) != n {
		t.Errorf("%s: steps %v, want 1..%d", what, seen, n)
	}
}

// TestInterruptSavesTheWarmStart: ctrl-c during the warm start saves it at
// the step it reached (even with no periodic saves), and the next run
// continues from there. A closed terminal (SIGHUP) stops it as ctrl-c does.
func TestInterruptSavesTheWarmStart(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	for _, sig := range []os.Signal{os.Interrupt, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) { interruptWarmStart(t, sig) })
	}
}

func interruptWarmStart(t *testing.T, sig os.Signal) {
	dir := t.TempDir()
	bin := buildBinary(t)
	out := filepath.Join(dir, "run")
	cfgPath := writeSmallConfig(t, dir, "sigint-"+strconv.Itoa(os.Getpid())+"-"+strconv.Itoa(int(sig.(syscall.Signal))), out, 0, true)
	args := []string{"run", "--headless", "--config", cfgPath, "sft.save_every=0", "run.max_steps=1"}
	cmd := exec.Command(bin, args...)
	var stdout strings.Builder
	cmd.Stdout = &stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	metrics := filepath.Join(out, "metrics.jsonl")
	deadline := time.Now().Add(2 * time.Minute)
	for maxStep(t, metrics, "sft_step") < 20 {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("the warm start never reached step 20")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Signal(sig)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%v: %v\n%s", sig, err, stdout.String())
	}
	if sig == syscall.SIGHUP && signal.Ignored(syscall.SIGHUP) {
		// Started under nohup (this test's process was), the binary
		// inherits the ignored SIGHUP and keeps it so: the run goes on.
		if !strings.Contains(stdout.String(), "stopped at step 1: finished") {
			t.Errorf("an ignored SIGHUP stopped the run:\n%s", stdout.String())
		}
		return
	}
	reached := maxStep(t, metrics, "sft_step")
	data, err := os.ReadFile(filepath.Join(out, "sft-partial", "state.json"))
	if err != nil {
		t.Fatalf("no saved warm start after ctrl-c: %v\n%s", err, stdout.String())
	}
	var st struct{ Step int }
	if err := json.Unmarshal(data, &st); err != nil || st.Step != reached {
		t.Fatalf("saved at step %d (%v), the warm start had reached %d", st.Step, err, reached)
	}
	if !strings.Contains(stdout.String(), fmt.Sprintf("warm start at step %d of 100", reached)) {
		t.Errorf("the exit summary does not say where the warm start stands:\n%s", stdout.String())
	}
	if sig != os.Interrupt {
		return // the restart is the same as after ctrl-c
	}
	again, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("restart: %v\n%s", err, again)
	}
	if want := fmt.Sprintf("continuing from step %d of 100", reached); !strings.Contains(string(again), want) {
		t.Fatalf("restart lacks %q:\n%s", want, again)
	}
}

// Ctrl-C during `swetui sft` keeps the steps it made: the warm start is
// saved beside its checkpoint folder, the message says so, and the same
// command continues it to the end.
func TestInterruptSavesTheSFTCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	dir := t.TempDir()
	bin := buildBinary(t)
	out := filepath.Join(dir, "run")
	cfgPath := writeSmallConfig(t, dir, "sft-sigint-"+strconv.Itoa(os.Getpid()), out, 0, true)
	sftDir := filepath.Join(dir, "warm")
	args := []string{"sft", "--config", cfgPath, "sft.steps=400", "sft.save_every=10", "sft.out=" + sftDir}
	cmd := exec.Command(bin, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(sftDir+"-partial", "state.json")
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if _, err := os.Stat(state); err == nil {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("no periodic save of the warm start:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Signal(os.Interrupt)
	if err := cmd.Wait(); err == nil {
		t.Fatalf("an interrupted sft exited 0:\n%s", stderr.String())
	}
	data, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	var st struct{ Step, Steps int }
	if err := json.Unmarshal(data, &st); err != nil || st.Step < 10 || st.Steps != 400 {
		t.Fatalf("saved %s (%v)", data, err)
	}
	if want := fmt.Sprintf("step %d of 400 saved in %s-partial: the same command continues it", st.Step, sftDir); !strings.Contains(stderr.String(), want) {
		t.Errorf("ctrl-c's message lacks %q:\n%s", want, stderr.String())
	}
	again, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("continue: %v\n%s", err, again)
	}
	if want := fmt.Sprintf("continuing from step %d of 400", st.Step); !strings.Contains(string(again), want) {
		t.Errorf("the second sft lacks %q:\n%s", want, again)
	}
	if want := fmt.Sprintf("sft: %d steps on", 400-st.Step); !strings.Contains(string(again), want) {
		t.Errorf("the second sft did not train the remaining steps (%q):\n%s", want, again)
	}
	if _, err := os.Stat(filepath.Join(sftDir, "config.json")); err != nil {
		t.Errorf("no checkpoint after the warm start finished: %v", err)
	}
	if _, err := os.Stat(sftDir + "-partial"); !os.IsNotExist(err) {
		t.Errorf("the partial warm start outlived the finished one: %v", err)
	}
}
