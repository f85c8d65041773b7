package reward

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/task"
)

// TestLiteInstances decodes the 30 real SWE-bench Lite instances (lists as
// JSON-encoded strings, as on the hub) and scores their gold patches in
// syntax mode: every one is valid, every repository has a harness parser,
// no gold patch raises a hack flag and every test patch does (one the
// evaluation's reset undoes).
func TestLiteInstances(t *testing.T) {
	f, err := os.Open(filepath.Join(realdataDir(t), "swebench_lite_sample30.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := &Scorer{Weights: WeightsFrom(config.Default().Reward)}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	n := 0
	for line := 1; sc.Scan(); line++ {
		var in task.Instance
		if err := json.Unmarshal(sc.Bytes(), &in); err != nil {
			t.Fatalf("line %d: %v", line, err)
		}
		n++
		if len(in.FailToPass) == 0 {
			t.Errorf("%s: no FAIL_TO_PASS tests decoded", in.InstanceID)
		}
		if _, err := parserOf(&in); err != nil {
			t.Errorf("%s: %v", in.InstanceID, err)
		}
		rs, err := s.ScoreDiffs(context.Background(), &in, []string{in.Patch, in.TestPatch}, config.PhaseSyntax)
		if err != nil {
			t.Fatal(err)
		}
		if gold := rs[0]; !gold.SyntaxOK || gold.Reward != 0.3 || len(gold.Hacks) != 0 {
			t.Errorf("%s gold: syntax %v (%s) reward %v hacks %v", in.InstanceID, gold.SyntaxOK, gold.SyntaxError, gold.Reward, gold.Hacks)
		}
		// Offered as a fix, the test patch touches only files the evaluation
		// resets before applying it: flagged, free, and a no-op.
		if tp := rs[1]; !contains(tp.HacksUndone, HackTouchesTests) || !tp.Noop {
			t.Errorf("%s test patch: undone flags %v lack %s, or noop %v", in.InstanceID, tp.HacksUndone, HackTouchesTests, tp.Noop)
		}
	}
	if n != 30 {
		t.Errorf("decoded %d instances, want 30", n)
	}
}
