package reward

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
)

// manyFiles is a diff creating n new one-line files.
func manyFiles(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "diff --git a/gen/f%d.py b/gen/f%d.py\nnew file mode 100644\n--- /dev/null\n+++ b/gen/f%d.py\n@@ -0,0 +1 @@\n+x = %d\n", i, i, i, i)
	}
	return b.String()
}

// manyHunks is a diff of one file with n one-line hunks.
func manyHunks(n int) string {
	var b strings.Builder
	b.WriteString("--- a/pkg/calc.py\n+++ b/pkg/calc.py\n")
	for i := range n {
		fmt.Fprintf(&b, "@@ -%d,1 +%d,1 @@\n-a%d\n+b%d\n", 10*i+1, 10*i+1, i, i)
	}
	return b.String()
}

func TestPatchLimitsCheck(t *testing.T) {
	l := PatchLimits{Bytes: 1 << 10, Files: 3, Hunks: 5}
	tests := []struct {
		name string
		diff string
		says string // "" for within the limits
	}{
		{"within", manyFiles(3), ""},
		{"files", manyFiles(4), "4 files, over reward.max_patch_files = 3"},
		{"hunks", manyHunks(6), "6 hunks, over reward.max_patch_hunks = 5"},
		{"five hunks", manyHunks(5), ""},
		{"bytes", "--- a/pkg/calc.py\n+++ b/pkg/calc.py\n@@ -1 +1 @@\n-x\n+" + strings.Repeat("y", 2<<10) + "\n", "over reward.max_patch_kb = 1 KiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := Extract(NormalizeDiff(tt.diff))
			if e.Patch == nil {
				t.Fatalf("no patch: %v", e.Err)
			}
			got := l.Check(e.Patch, len(e.Diff))
			if (tt.says == "") != (got == "") || !strings.Contains(got, tt.says) {
				t.Errorf("Check = %q, want %q", got, tt.says)
			}
		})
	}
	if got := (PatchLimits{}).Check(Extract(manyFiles(500)).Patch, 1<<30); got != "" {
		t.Errorf("zero limits refuse: %q", got)
	}
}

// A patch over the limits is the patch's own failure in every phase, for
// training's Score and serve's ScoreDiffs alike: not syntax-valid, no
// reward, the limit named, never an infrastructure failure, and nothing
// applied or run (the Evaluator would say so).
func TestOversizePatchesAreThePatchsFailure(t *testing.T) {
	dir, commit := makeRepo(t, applyFiles)
	inst := scorerInstance("acme/widget", commit)
	huge := manyFiles(10_000)
	big := "--- a/pkg/calc.py\n+++ b/pkg/calc.py\n@@ -1 +1 @@\n-x\n+" + strings.Repeat("z", 10<<20) + "\n"
	for _, phase := range config.Phases {
		a := &Applier{}
		a.Register("acme/widget", dir)
		pool := &fakePool{log: protocolLog(ApplyGit, passingSummary, 0, true)}
		s := NewScorer(config.Default().Reward, &PoolEvaluator{Pool: pool})
		s.Applier = a
		for _, tt := range []struct {
			name, text, says string
			raw              bool
		}{
			{"10,000 files as a diff", huge, "over reward.max_patch_kb = 1024 KiB", true},
			{"500 files as a diff", manyFiles(500), "500 files, over reward.max_patch_files = 100", true},
			{"3,000 hunks as a diff", manyHunks(3000), "3000 hunks, over reward.max_patch_hunks = 2000", true},
			{"10 MB as a diff", big, "over reward.max_patch_kb = 1024 KiB", true},
			{"10,000 files in a completion", "Here it is.\n```diff\n" + huge + "```\n", "over reward.max_patch_", false},
		} {
			var vs []event.Verdict
			var err error
			if tt.raw {
				vs, err = s.ScoreDiffs(context.Background(), inst, []string{tt.text}, phase)
			} else {
				vs, err = s.Score(context.Background(), inst, []string{tt.text}, phase)
			}
			if err != nil {
				t.Fatalf("%s %s: %v", phase, tt.name, err)
			}
			v := vs[0]
			if !v.Oversize || v.SyntaxOK || v.Infra || v.Reward != 0 || v.Applied || !strings.Contains(v.SyntaxError, tt.says) {
				t.Errorf("%s %s: oversize %v syntax %v infra %v reward %v applied %v error %q; want the patch's failure saying %q",
					phase, tt.name, v.Oversize, v.SyntaxOK, v.Infra, v.Reward, v.Applied, v.SyntaxError, tt.says)
			}
		}
		if n := pool.calls.Load(); n != 0 {
			t.Errorf("%s: %d container runs for oversize patches, want none", phase, n)
		}
		a.Close()
		s.Close()
	}
}
