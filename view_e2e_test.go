package main

import (
	"bufio"
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

var shownRe = regexp.MustCompile(`(\d+) completions, (\d+) tasks`)

// shownCount is how many completions the viewer's header says the run has.
func shownCount(screen string) int {
	m := shownRe.FindStringSubmatch(firstLine(screen))
	if m == nil {
		return -1
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// TestViewInTmux drives `swetui view` in tmux over a real run made by the
// real trainer: it follows the run while it trains, filters by steps, shows
// one task across the run, opens a completion with its patch and verdict,
// shows its tokens by the sampler's probability, exports the patch and the
// selection, and charts a metric.
func TestViewInTmux(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end viewer test: skipped with -short")
	}
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux is not installed (make setup installs it)")
	}
	dir := t.TempDir()
	bin := buildBinary(t)
	out := filepath.Join(dir, "run")
	cfgPath := writeSmallConfig(t, dir, "view-"+strconv.Itoa(os.Getpid()), out, 0, true)
	editFile(t, cfgPath, "max_steps = 0", "max_steps = 6")
	// With Docker, the docker phase: the evaluations' container logs are kept.
	docker := exec.Command("docker", "info").Run() == nil
	if !docker && os.Getenv("CI") == "true" {
		t.Fatal("no Docker daemon under CI=true")
	}
	if docker {
		editFile(t, cfgPath, "[curriculum]\nauto = false", "[curriculum]\nauto = false\nphase = \"docker\"")
	}
	run := exec.Command(bin, "run", "--headless", "--config", cfgPath)
	runLog, err := os.Create(filepath.Join(dir, "run.log"))
	if err != nil {
		t.Fatal(err)
	}
	run.Stdout, run.Stderr = runLog, runLog
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	defer run.Process.Kill()
	// The viewer starts as soon as the run has a folder, before its first step.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if _, err := os.Stat(filepath.Join(out, "rollouts.jsonl")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the run wrote no rollouts.jsonl")
		}
		time.Sleep(200 * time.Millisecond)
	}
	s := &tmuxSession{t: t, socket: "swetui-view-" + strconv.Itoa(os.Getpid()), name: "view"}
	s.cmd("new-session", "-d", "-s", s.name, "-x", "140", "-y", "36", fmt.Sprintf("%s view %s --follow 300ms; sleep 30", bin, out))
	defer exec.Command("tmux", "-L", s.socket, "kill-server").Run()

	first := s.waitFor("the first completions", 3*time.Minute, func(sc string) bool { return shownCount(sc) > 0 })
	n0 := shownCount(first)
	s.waitFor("new steps as they land", 3*time.Minute, func(sc string) bool { return shownCount(sc) > n0 })
	if err := run.Wait(); err != nil {
		b, _ := os.ReadFile(runLog.Name())
		t.Fatalf("run: %v\n%s", err, b)
	}
	total := countLines(t, filepath.Join(out, "rollouts.jsonl"))
	s.waitFor("every completion of the finished run", time.Minute, func(sc string) bool { return shownCount(sc) == total })

	// Steps 2-3 only.
	// Each key waits for the screen (30 s: a loaded 2-core box took more
	// than 10 to redraw once): keys that reach a loaded program in
	// one read arrive as one message ("/step=2-3"), which no binding takes.
	s.keys("/")
	s.waitFor("the filter prompt", 30*time.Second, func(sc string) bool { return hasLinePrefix(sc, "filter: ") })
	s.keys("-l", "step=2-3")
	s.waitFor("the typed filter", 30*time.Second, func(sc string) bool { return hasLinePrefix(sc, "filter: step=2-3_") })
	s.keys("Enter")
	sc := s.waitFor("the step filter", 30*time.Second, func(sc string) bool { return strings.Contains(firstLine(sc), "filter: step=2-3") })
	for _, l := range strings.Split(sc, "\n")[2:] {
		if f := strings.Fields(l); len(f) > 2 && regexp.MustCompile(`^\d+\.\d+$`).MatchString(f[1]) && f[0] != "2" && f[0] != "3" {
			t.Fatalf("a row of step %s under step=2-3:\n%s", f[0], sc)
		}
	}
	// One task across the run, in step order. (After Escape, wait for the
	// screen: a key sent at once would arrive as Alt+key.)
	s.keys("Escape")
	s.waitFor("the filter cleared", 30*time.Second, func(sc string) bool { return strings.Contains(firstLine(sc), "filter: all, by step") })
	s.keys("t")
	sc = s.waitFor("one task across the run", 30*time.Second, func(sc string) bool { return strings.Contains(firstLine(sc), "filter: task=") })
	// One completion: its verdict and patch; export it.
	s.keys("Enter")
	sc = s.waitFor("a completion", 30*time.Second, func(sc string) bool {
		return strings.Contains(sc, "verdict (") && strings.Contains(sc, "-- patch")
	})
	if strings.Contains(sc, "--- a/") {
		s.keys("e")
		sc = s.waitFor("the patch export", 30*time.Second, func(sc string) bool { return strings.Contains(sc, "wrote ") })
		patches, _ := filepath.Glob(filepath.Join(out, "exports", "*.patch"))
		if len(patches) != 1 {
			t.Fatalf("exported patches %v\n%s", patches, sc)
		}
		if b, _ := os.ReadFile(patches[0]); !strings.Contains(string(b), "+++ b/") {
			t.Errorf("exported patch:\n%s", b)
		}
	}
	if docker {
		// The patch applied, so its tests ran in a container: its log is kept.
		s.keys("L")
		sc = s.waitFor("the container log", 20*time.Second, func(sc string) bool { return strings.Contains(sc, "-- the evaluation's container log") })
		if !strings.Contains(sc, "from logs/step-") || !strings.Contains(sc, "SWETUI-START") {
			t.Errorf("no kept container log:\n%s", sc)
		}
		s.keys("L")
		s.waitFor("the log closed", 30*time.Second, func(sc string) bool { return !strings.Contains(sc, "-- the evaluation's container log") })
	}
	// The exact prompt it answered.
	s.keys("P")
	sc = s.waitFor("the prompt", 30*time.Second, func(sc string) bool { return strings.Contains(sc, "-- the exact prompt") })
	if !strings.Contains(sc, "<|im_start|>") {
		t.Errorf("no prompt:\n%s", sc)
	}
	s.keys("P")
	s.waitFor("the prompt closed", 30*time.Second, func(sc string) bool { return !strings.Contains(sc, "-- the exact prompt") })
	s.keys("c")
	s.waitFor("the raw completion", 30*time.Second, func(sc string) bool { return strings.Contains(sc, "-- completion (c: the patch)") })
	// Its tokens, by the sampler's probability, named by the run's tokenizer.
	s.keys("t")
	sc = s.waitFor("the tokens", 30*time.Second, func(sc string) bool { return strings.Contains(sc, "mean logprob") })
	if !strings.Contains(sc, "least likely: \"") || regexp.MustCompile(`least likely: "<\d+>"`).MatchString(sc) {
		t.Errorf("the tokens are not named by the run's tokenizer:\n%s", sc)
	}
	// Back to the list; export the selection.
	s.keys("Escape")
	s.waitFor("the list", 30*time.Second, func(sc string) bool { return strings.Contains(firstLine(sc), "filter: task=") })
	s.keys("E")
	sc = s.waitFor("the selection export", 30*time.Second, func(sc string) bool { return strings.Contains(sc, "completions to ") })
	sets, _ := filepath.Glob(filepath.Join(out, "exports", "selection-*.jsonl"))
	if len(sets) != 1 || countLines(t, sets[0]) == 0 {
		t.Fatalf("exported selections %v\n%s", sets, sc)
	}
	// A metric's chart.
	s.keys("m")
	s.waitFor("the reward chart", 30*time.Second, func(sc string) bool { return strings.Contains(firstLine(sc), ": reward/mean") })
	s.keys("q")
}

func countLines(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		n++
	}
	return n
}

// hasLinePrefix reports whether a line of screen starts with prefix.
func hasLinePrefix(screen, prefix string) bool {
	for _, l := range strings.Split(screen, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), prefix) {
			return true
		}
	}
	return false
}
