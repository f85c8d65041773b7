package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/reward"
)

// syncBuffer is a terminal's output as the console writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestPatchReachesConsoleAndRollouts runs `swetui run` with the console on
// a pseudo-terminal's streams and nothing faked: the embedded suite, the
// gorgonia model warmed up until it writes its task's gold patch, the real
// scorer in apply-only. The patch the scorer extracted from a sampled
// completion must be the one rollouts.jsonl records and the one the Diff
// pane draws.
func TestPatchReachesConsoleAndRollouts(t *testing.T) {
	if testing.Short() {
		t.Skip("real pipeline: a warm start of about 15 s, skipped with -short")
	}
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	out := filepath.Join(t.TempDir(), "run")
	args := []string{"run", "run.out_dir=" + out,
		"data.mini_tasks=20", "data.train_limit=1",
		"model.layers=1", "model.d_model=64", "model.d_ff=128", "model.vocab_size=512", "sample.max_new_tokens=200",
		"grpo.group_size=4", "grpo.prompts_per_step=1", "grpo.dynamic_sampling=false", // one group: 4 rollouts
		// Enough steps to learn the one gold reply by heart.
		"sft.steps=100", "sft.batch_size=1", "sft.lr=2e-2", "sft.synthetic_per_task=0", "sft.prompt_loss_weight=0", "sft.heldout_every=0",
		"curriculum.phase=apply-only", "curriculum.auto=false", "run.max_steps=1", "run.save_every=0", "watchdog.barren_epochs=0"}
	stdin, keys := io.Pipe()
	term := &syncBuffer{}
	env := Env{Stdout: term, Stderr: io.Discard, Stdin: stdin, DefaultConfig: defaultConfigForTest(t), IsTerminal: true}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	code := make(chan int, 1)
	go func() { code <- Main(ctx, env, args) }()

	// The step's completions, as the trainer recorded them.
	rollouts := filepath.Join(out, "rollouts.jsonl")
	waitUntil(t, 4*time.Minute, "the first step's rollouts", func() bool { return countLines(rollouts) == 4 })
	var valid *event.CompletionScored
	for _, c := range readRollouts(t, rollouts) {
		if c.Verdict.Patch != reward.Extract(c.Completion).Diff {
			t.Errorf("completion %d: rollouts.jsonl's patch is not the one extracted from its completion", c.Index)
		}
		if c.Verdict.SyntaxOK && valid == nil {
			valid = &c
		}
	}
	if valid == nil {
		t.Fatal("no completion of the warmed-up policy was a valid diff; the warm start no longer learns its one task")
	}
	var header string
	for _, l := range strings.Split(valid.Verdict.Patch, "\n") {
		if strings.HasPrefix(l, "+++ b/") {
			header = l
			break
		}
	}
	if header == "" || !strings.Contains(valid.Verdict.Patch, "--- a/") {
		t.Fatalf("valid patch without ---/+++ lines:\n%s", valid.Verdict.Patch)
	}
	// The console selects a completion of the newest step and draws its
	// patch in the Diff pane.
	waitUntil(t, 30*time.Second, "the Diff pane to draw "+header, func() bool { return strings.Contains(term.String(), header) })
	// On a loaded box the step may still be in flight: q then asks first.
	keys.Write([]byte("q"))
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(time.Minute)
	for answered := false; ; {
		select {
		case c := <-code:
			if c != ExitOK {
				t.Fatalf("exit %d", c)
			}
			return
		case <-tick.C:
			if !answered && strings.Contains(term.String(), "Stop the run and quit?") {
				keys.Write([]byte("y"))
				answered = true
			}
		case <-deadline:
			t.Fatal("the console did not quit on q")
		}
	}
}

func defaultConfigForTest(t *testing.T) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func waitUntil(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func countLines(path string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return strings.Count(string(data), "\n")
}

func readRollouts(t *testing.T, path string) []event.CompletionScored {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []event.CompletionScored
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var c event.CompletionScored
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatalf("rollouts.jsonl: %v", err)
		}
		out = append(out, c)
	}
	return out
}
