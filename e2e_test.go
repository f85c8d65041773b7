package main

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
	"sync"
	"testing"
	"time"
	"unicode/utf8"
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
	bin := buildBinary(t)
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

// The binary every end-to-end test runs, built once (TestMain removes it).
var built struct {
	once      sync.Once
	dir, path string
	err       error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

func buildBinary(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "swetui-e2e-"); built.err != nil {
			return
		}
		built.path = filepath.Join(built.dir, "swetui")
		if out, err := exec.Command("go", "build", "-o", built.path, ".").CombinedOutput(); err != nil {
			built.err = fmt.Errorf("build: %v\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.path
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

var stateWord = regexp.MustCompile(`\b(STARTING|RUNNING|PAUSING|PAUSED|RESUMING|STOPPING|STOPPED)\b`)

// frameProblem says what is wrong with a screen captured from a console of
// w x h cells running the run name, "" when nothing is: it has exactly h
// rows none wider than w, the header on the first (the run's name and its
// state), the key bar on the last (its keys, the quit question or the
// stopping notice), and no pane drawn twice.
func frameProblem(screen, name string, w, h int) string {
	lines := strings.Split(strings.TrimSuffix(screen, "\n"), "\n")
	if len(lines) != h {
		return fmt.Sprintf("%d rows, want %d", len(lines), h)
	}
	for i, l := range lines {
		if n := utf8.RuneCountInString(l); n > w {
			return fmt.Sprintf("row %d is %d cells, wider than %d", i, n, w)
		}
	}
	if head := lines[0]; !strings.HasPrefix(head, name[:min(len(name), 8)]) || !stateWord.MatchString(head) {
		return "the first row is not the header"
	}
	foot := strings.TrimSpace(lines[h-1])
	if !(strings.HasPrefix(foot, "? help") && strings.HasSuffix(foot, "q quit")) && !strings.HasSuffix(foot, "y/n") &&
		!strings.HasPrefix(foot, "STOPPING:") && !strings.HasPrefix(foot, "STOPPED:") {
		return "the last row is not the key bar"
	}
	for _, title := range []string{"Rewards ·", "Group ·", "Diff ·", "Containers ·", "Events ·", "Help ·"} {
		if n := strings.Count(screen, title); n > 1 {
			return fmt.Sprintf("%q is drawn %d times", title, n)
		}
	}
	return ""
}

// frame captures the screen until it is a whole frame (a capture may fall
// between two writes of one redraw: the broken frame this looks for stays
// until the next resize) and returns it; the test fails after 3 seconds (a
// loaded CI machine may hold the console back for a while).
func (s *tmuxSession) frame(name string, w, h int, after string) string {
	s.t.Helper()
	var screen, problem string
	for i := 0; i < 60; i++ {
		screen = s.screen()
		if problem = frameProblem(screen, name, w, h); problem == "" {
			return screen
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.t.Fatalf("at %dx%d after %s: %s:\n%s", w, h, after, problem, screen)
	return ""
}

// resize sets the window's size and waits for the console to redraw in it.
func (s *tmuxSession) resize(name string, w, h int) {
	s.t.Helper()
	s.cmd("resize-window", "-t", s.name, "-x", strconv.Itoa(w), "-y", strconv.Itoa(h))
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if frameProblem(s.screen(), name, w, h) == "" {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.frame(name, w, h, "a resize")
}

// keySizes are the terminal sizes every key is pressed at.
var keySizes = [][2]int{{80, 24}, {120, 40}, {160, 48}, {200, 50}}

// Every key of the key map (tmux's names): the run's controls, the screen's,
// and each pane's navigation, pressed in every pane.
var (
	runKeys    = []string{"?", "?", "1", "2", "3", "2", "a", "a", "s", "r", "p", "p", "Space", "Space"}
	screenKeys = []string{"c", "c", "i", "i", "c", "Enter", "c", "i", "Escape", "Enter", "?", "Escape", "Enter", "Enter"}
	paneKeys   = []string{"j", "k", "Down", "Up", "j", "j", "NPage", "PPage", "C-d", "C-u", "G", "g", "End", "Home",
		"h", "l", "Left", "Right", "f", "f", "j", "c", "j", "c", "Enter", "j", "k", "Escape"}
)

// pressEveryKey presses the key map at each size, checking the frame after
// every key, that the run goes on (the keys stop nothing) and that the
// header shows the stage (stage) throughout; events is the run's
// events.jsonl, shown if it stops.
func (s *tmuxSession) pressEveryKey(name, stage, events string) {
	s.t.Helper()
	for _, size := range keySizes {
		w, h := size[0], size[1]
		s.resize(name, w, h)
		press := func(k string) string {
			s.keys(k)
			time.Sleep(15 * time.Millisecond)
			sc := s.frame(name, w, h, k)
			if state := stateWord.FindString(firstLine(sc)); state == "STOPPING" || state == "STOPPED" {
				log, _ := os.ReadFile(events)
				s.t.Fatalf("at %dx%d after %s the run is %s:\n%s\nevents.jsonl:\n%s", w, h, k, state, sc, log)
			}
			return sc
		}
		for _, k := range runKeys {
			press(k)
		}
		for pane := 0; pane < 5; pane++ {
			for _, k := range screenKeys {
				press(k)
			}
			for _, k := range paneKeys {
				press(k)
			}
			press("Tab")
		}
		press("BTab")
		if sc := press("Tab"); !strings.Contains(firstLine(sc), stage) {
			s.t.Fatalf("at %dx%d the header does not show %q:\n%s", w, h, stage, sc)
		}
	}
}

// TestConsoleKeysInTmux presses every key of the key map, several times in
// every pane, at 80x24, 120x40, 160x48 and 200x50, in the warm start of one
// run (then quits it with q and y) and in the GRPO steps of another, whose
// untrained policy writes the junk a byte-level model samples (invalid
// UTF-8, control bytes), and checks each screen: exactly the terminal's
// rows, the header on the first and the key bar on the last. Both runs use
// one tmux session, resized between sizes, and one binary.
func TestConsoleKeysInTmux(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end console test: skipped with -short")
	}
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux is not installed (make setup installs it)")
	}
	start := time.Now()
	bin := buildBinary(t)
	dir := t.TempDir()
	pid := strconv.Itoa(os.Getpid())
	sftName, grpoName := "keys-sft-"+pid, "keys-grpo-"+pid
	for _, d := range []string{"sft", "grpo"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sftCfg := writeSmallConfig(t, filepath.Join(dir, "sft"), sftName, filepath.Join(dir, "sft", "run"), 0, true)
	// A warm start far longer than the test: it is stopped in the middle.
	editFile(t, sftCfg, "[sft]\nsteps = 100\n", "[sft]\nsteps = 100000\n", "heldout_every = 0", "heldout_every = 10")
	grpoCfg := writeSmallConfig(t, filepath.Join(dir, "grpo"), grpoName, filepath.Join(dir, "grpo", "run"), 0, false)
	editFile(t, grpoCfg, "max_new_tokens = 24", "max_new_tokens = 96") // longer junk for the raw view
	exitSFT, exitGRPO := filepath.Join(dir, "exit-sft"), filepath.Join(dir, "exit-grpo")
	s := &tmuxSession{t: t, socket: "swetui-keys-" + pid, name: "keys"}
	s.cmd("new-session", "-d", "-s", s.name, "-x", "80", "-y", "24",
		fmt.Sprintf("%s run --config %s; echo $? > %s; %s run --config %s; echo $? > %s; sleep 30",
			bin, sftCfg, exitSFT, bin, grpoCfg, exitGRPO))
	defer exec.Command("tmux", "-L", s.socket, "kill-server").Run()

	warm := regexp.MustCompile(`warm start \d+/100000`)
	s.waitFor("the warm start's first steps", 2*time.Minute, func(sc string) bool { return warm.MatchString(firstLine(sc)) })
	s.pressEveryKey(sftName, "warm start", filepath.Join(dir, "sft", "run", "events.jsonl"))
	// Quitting asks while the warm start runs; n carries on, y stops it.
	for _, k := range []string{"q", "n", "C-c", "n", "q"} {
		before := s.screen()
		s.keys(k)
		want := k == "q" || k == "C-c"
		deadline := time.Now().Add(5 * time.Second)
		for {
			sc := s.screen()
			if frameProblem(sc, sftName, 200, 50) == "" && strings.Contains(sc, "Stop the run and quit? y/n") == want {
				break
			}
			if time.Now().After(deadline) {
				events, _ := os.ReadFile(filepath.Join(dir, "sft", "run", "events.jsonl"))
				t.Fatalf("after %s the quit question is not %v; before:\n%s\nafter:\n%s\nevents.jsonl:\n%s", k, want, before, sc, events)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	s.keys("y")
	waitExit(t, s, exitSFT)

	s.waitFor("the GRPO run's first steps", 2*time.Minute, func(sc string) bool {
		return strings.HasPrefix(sc, grpoName[:11]) && headerStep(sc) >= 1
	})
	s.pressEveryKey(grpoName, "step ", filepath.Join(dir, "grpo", "run", "events.jsonl"))
	s.keys("q") // asks when a step is in flight, stops at once between steps
	time.Sleep(100 * time.Millisecond)
	if strings.Contains(s.frame(grpoName, 200, 50, "q"), "y/n") {
		s.keys("y")
	}
	waitExit(t, s, exitGRPO)
	if err := exec.Command("docker", "info").Run(); err == nil {
		for _, name := range []string{sftName, grpoName} {
			if left := leftoverContainers(t, name); left != "" {
				t.Fatalf("containers of %s left behind: %s", name, left)
			}
		}
	}
	t.Logf("every key at %d sizes in both stages: %s", len(keySizes), time.Since(start).Round(time.Second))
}

// waitExit waits for the shell in the tmux session to write the binary's
// exit code to file, and fails unless it is 0.
func waitExit(t *testing.T, s *tmuxSession, file string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if data, err := os.ReadFile(file); err == nil {
			if code := strings.TrimSpace(string(data)); code != "0" {
				t.Fatalf("swetui exited %s; screen:\n%s", code, s.screen())
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("swetui did not exit; screen:\n%s", s.screen())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// editFile replaces each old string (which must be there) with its new one.
func editFile(t *testing.T, path string, oldNew ...string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	for i := 0; i+1 < len(oldNew); i += 2 {
		if !strings.Contains(s, oldNew[i]) {
			t.Fatalf("%s lacks %q", path, oldNew[i])
		}
		s = strings.Replace(s, oldNew[i], oldNew[i+1], 1)
	}
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}
