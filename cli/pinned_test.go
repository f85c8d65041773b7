package cli

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/cpu"

	"github.com/swetui/swetui/history"
	"github.com/swetui/swetui/model"
	"github.com/swetui/swetui/task"
)

var updatePinned = flag.Bool("update-pinned", false, "TestRunsArePinned writes the runs' metrics to testdata/pinned/ instead of comparing")

// pinnedKeys are the metrics a pinned run must reproduce: what the
// rollouts earned and what the update made of them.
var pinnedKeys = []string{"reward/mean", "reward/std", "reward/max", "reward/syntax_valid_rate", "reward/apply_rate",
	"reward/resolved_rate", "grpo/loss", "grpo/kl", "grpo/clip_frac", "policy/entropy", "optim/grad_norm", "perf/tokens",
	"agent/submitted", "agent/turns"}

// pinned is a golden file of testdata/pinned: each step's pinned metrics
// and the kernels that computed them (another CPU's rounding draws other
// tokens: the case skips there).
type pinned struct {
	Kernels string               `json:"kernels"`
	Steps   []map[string]float64 `json:"steps"`
}

func kernels() string {
	return fmt.Sprintf("%s/%s avx2+fma=%v blas=%s", runtime.GOOS, runtime.GOARCH, cpu.X86.HasAVX2 && cpu.X86.HasFMA, model.BLASName())
}

// checkPinned compares the run in out with testdata/pinned/name.json
// (with -update-pinned, writes it).
func checkPinned(t *testing.T, name, out string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(out, history.MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	got := pinned{Kernels: kernels()}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		if m["stage"] != nil && m["stage"] != "grpo" {
			continue
		}
		step := map[string]float64{}
		for _, k := range pinnedKeys {
			if v, ok := m[k].(float64); ok {
				step[k] = v
			}
		}
		got.Steps = append(got.Steps, step)
	}
	path := filepath.Join("testdata", "pinned", name+".json")
	if *updatePinned {
		b, _ := json.MarshalIndent(got, "", "  ")
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, err = os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var want pinned
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	if want.Kernels != got.Kernels {
		t.Skipf("%s was pinned with kernels %q, this build runs %q: their rounding draws other tokens", path, want.Kernels, got.Kernels)
	}
	if len(got.Steps) != len(want.Steps) {
		t.Fatalf("%d steps, %s pins %d", len(got.Steps), path, len(want.Steps))
	}
	for i := range want.Steps {
		for _, k := range pinnedKeys {
			w, inWant := want.Steps[i][k]
			g, inGot := got.Steps[i][k]
			// Sums in another order (trajectories graded as they end) may
			// round apart in the last bits.
			if inWant != inGot || math.Abs(g-w) > 1e-9*max(1, math.Abs(w)) {
				t.Errorf("step %d %s = %v (present %v), %s pins %v (present %v)", i+1, k, g, inGot, path, w, inWant)
			}
		}
	}
}

// TestRunsArePinned: a short single-shot run and a short agent run give
// the metrics they gave before rollouts moved behind one port (issue 46):
// the pins in testdata/pinned were written by the code before the move
// (-update-pinned), and a change that means to change what a run computes
// writes them again, saying why. The single-shot run is the README's on
// the CPU (the shipped warm start, two steps in the syntax phase); the
// agent run's policy is scripted (an agent run's own sampling interleaves
// its trajectories' turns as they come), its trajectories real, in
// Docker sessions, graded in fresh sandboxes.
func TestRunsArePinned(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		out := t.TempDir()
		if code, stdout, stderr := runCLI(t, "run", "--headless", "run.out_dir="+out, "run.max_steps=2", "curriculum.phase=syntax",
			"curriculum.auto=false"); code != ExitOK {
			t.Fatalf("run: exit %d\n%s%s", code, stdout, stderr)
		}
		checkPinned(t, "single", out)
	})
	t.Run("agent", func(t *testing.T) {
		serveDocker(t)
		out, _, _ := scriptedAgentRun(t, "agent-pinned", func(_ *task.Instance, expert []string) [][]string {
			return [][]string{expert, {"```bash\ngit status --short\n```", "I am not sure what to run."}}
		}, "agent.turns=6", "agent.unfinished=graded")
		checkPinned(t, "agent", out)
	})
}
