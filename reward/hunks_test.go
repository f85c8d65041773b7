package reward

import (
	"math"
	"strings"
	"testing"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
)

// TestHunksApplying: per-hunk credit counts the hunks whose old lines are
// in their file, each on its own, on applyCases' repository.
func TestHunksApplying(t *testing.T) {
	tests := []struct {
		name          string
		diff          string
		applied, want int
	}{
		{"clean", applyCases[0].diff, 1, 1},
		{"offset hunk", applyCases[1].diff, 1, 1},
		{"new file", applyCases[2].diff, 1, 1},
		{"delete", applyCases[3].diff, 1, 1},
		{"rename: no text hunks", applyCases[4].diff, 0, 0},
		{"needs fuzz: exact only", applyCases[7].diff, 0, 1},
		{"wrong removed line", applyCases[8].diff, 0, 1},
		{"missing file", applyCases[9].diff, 0, 1},
		{"create existing file", applyCases[11].diff, 0, 1},
		{"one of two hunks fails", applyCases[13].diff, 1, 2},
		{"two files, one missing", applyCases[0].diff + applyCases[9].diff, 1, 2},
		{"not a diff", "hello\n", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, n := HunksApplying(tt.diff, applyFiles)
			if a != tt.applied || n != tt.want {
				t.Errorf("HunksApplying = %d of %d, want %d of %d", a, n, tt.applied, tt.want)
			}
		})
	}
}

// TestApplyPatchInMemory: the in-memory applier gives the patched lines
// git would, and refuses what git refuses without fuzz.
func TestApplyPatchInMemory(t *testing.T) {
	mod := splitFileLines(applyFiles["pkg/mod.py"])
	with := func(i int, l string) []string {
		out := append([]string(nil), mod...)
		out[i] = l
		return out
	}
	tests := []struct {
		name string
		diff string
		path string
		ok   bool
		want []string
	}{
		{"clean", applyCases[0].diff, "pkg/mod.py", true, with(4, "MOD LINE 5")},
		{"offset hunk", applyCases[1].diff, "pkg/mod.py", true, with(14, "changed")},
		{"new file", applyCases[2].diff, "pkg/new.py", true, []string{"y = 2"}},
		{"delete", applyCases[3].diff, "README", true, nil},
		{"needs fuzz", applyCases[7].diff, "pkg/mod.py", false, nil},
		{"one of two hunks fails", applyCases[13].diff, "pkg/mod.py", false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files, err := parsePatch(tt.diff)
			if err != nil {
				t.Fatal(err)
			}
			r := applyPatch(files, applyFiles)[tt.path]
			if r == nil || r.ok != tt.ok {
				t.Fatalf("result %+v, want ok %v", r, tt.ok)
			}
			if tt.ok && strings.Join(r.new, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("patched:\n%s\nwant:\n%s", strings.Join(r.new, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// TestNoopDiff: patches that change nothing, and near misses that do.
func TestNoopDiff(t *testing.T) {
	hdr := "--- a/pkg/mod.py\n+++ b/pkg/mod.py\n"
	tests := []struct {
		name string
		diff string
		want bool
	}{
		{"line re-added", hdr + "@@ -4,3 +4,3 @@\n mod line 4\n-mod line 5\n+mod line 5\n mod line 6\n", true},
		{"trailing space", hdr + "@@ -5 +5 @@\n-mod line 5\n+mod line 5 \t\n", true},
		{"blank line added", hdr + "@@ -5,0 +6 @@\n+\n", true},
		{"hunks undoing each other", hdr + "@@ -5 +5 @@\n-mod line 5\n+FIVE\n" + "--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -5 +5 @@\n-FIVE\n+mod line 5\n", true},
		{"a real change", applyCases[0].diff, false},
		{"indentation is a change", hdr + "@@ -5 +5 @@\n-mod line 5\n+    mod line 5\n", false},
		{"space inside a line is a change", hdr + "@@ -5 +5 @@\n-mod line 5\n+mod  line 5\n", false},
		{"lines swapped", hdr + "@@ -5,2 +5,2 @@\n-mod line 5\n mod line 6\n+mod line 5\n", false},
		{"new file", applyCases[2].diff, false},
		{"empty new file", "diff --git a/stray b/stray\nnew file mode 100644\nindex 0000000..e69de29\n", true},
		{"empty new file beside a change", "diff --git a/stray b/stray\nnew file mode 100644\nindex 0000000..e69de29\n" + applyCases[0].diff, false},
		{"delete", applyCases[3].diff, false},
		{"rename", applyCases[4].diff, false},
		{"not a diff", "hello\n", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := NoopDiff(tt.diff, applyFiles); got != tt.want {
				t.Errorf("NoopDiff = %v, want %v", got, tt.want)
			}
		})
	}
	// Without base files only the hunks themselves are read: hunks that
	// undo each other need the result to be seen.
	if NoopDiff(tests[3].diff, nil) {
		t.Error("hunks undoing each other are a no-op without base files")
	}
	if !NoopDiff(tests[0].diff, nil) {
		t.Error("a line re-added is not a no-op without base files")
	}
}

// TestComposeShaping: the shaping terms in Compose, with the default
// [reward] weights (apply 0.3, tests 0.7, p2p 0.5, hack 1, similarity 0.5,
// hunk credit 0.5), numbers by hand.
func TestComposeShaping(t *testing.T) {
	w := Weights{ApplyBonus: 0.3, TestWeight: 0.7, P2PPenalty: 0.5, HackPenalty: 1, SimilarityWeight: 0.5, HunkCredit: 0.5, RejectNoop: true}
	ao, dk := config.PhaseApplyOnly, config.PhaseDocker
	tests := []struct {
		name string
		r    event.Verdict
		want float64
	}{
		{"applies, similar 0.8", event.Verdict{Phase: ao, SyntaxOK: true, Applied: true, Similarity: 0.8}, 0.3 + 0.7*0.5*0.8},
		{"applies, no oracle", event.Verdict{Phase: ao, SyntaxOK: true, Applied: true}, 0.3},
		{"1 of 4 hunks, similar 0.4", event.Verdict{Phase: ao, SyntaxOK: true, HunksApplied: 1, HunksTotal: 4, Similarity: 0.4}, 0.3*0.125 + 0.7*0.5*0.4*0.125}, // A = 0.5·1/4
		{"no hunk applies", event.Verdict{Phase: ao, SyntaxOK: true, HunksTotal: 2}, 0},
		{"does not apply, similar 0.9: nothing", event.Verdict{Phase: ao, SyntaxOK: true, HunksTotal: 1, Similarity: 0.9}, 0},
		{"noop", event.Verdict{Phase: ao, SyntaxOK: true, Applied: true, Noop: true, Similarity: 0.9, HunksApplied: 1, HunksTotal: 1}, 0},
		{"hack: no similarity", event.Verdict{Phase: ao, SyntaxOK: true, Applied: true, Similarity: 1, Hacks: []string{HackTouchesTests}}, 0},
		{"syntax phase ignores it", event.Verdict{Phase: config.PhaseSyntax, SyntaxOK: true, Similarity: 1}, 0.3},
		{"docker resolved, similar 0.2", event.Verdict{Phase: dk, SyntaxOK: true, Applied: true, F2PPassed: 2, F2PTotal: 2, P2PTotal: 2, Resolved: true, Similarity: 0.2}, 1},
		{"docker half the f2p, similar 1", event.Verdict{Phase: dk, SyntaxOK: true, Applied: true, F2PPassed: 1, F2PTotal: 2, Similarity: 1}, 0.3 + 0.7*(0.5+0.5*0.5)},
		{"docker unresolved, similar 1", event.Verdict{Phase: dk, SyntaxOK: true, Applied: true, F2PTotal: 2, Similarity: 1}, 0.3 + 0.7*0.5},
		{"docker not applied, 1 of 2 hunks", event.Verdict{Phase: dk, SyntaxOK: true, HunksApplied: 1, HunksTotal: 2, Similarity: 0.6, F2PTotal: 1}, 0.3*0.25 + 0.7*0.5*0.6*0.25}, // A = 0.5·1/2
		{"docker noop keeps passing tests", event.Verdict{Phase: dk, SyntaxOK: true, Applied: true, Noop: true, F2PPassed: 1, F2PTotal: 1, Resolved: true}, 0.7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := w.Compose(&tt.r); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("Compose = %v, want %v", got, tt.want)
			}
		})
	}
	// reject_noop off: a no-op patch is paid as any other.
	w.RejectNoop = false
	if got := w.Compose(&event.Verdict{Phase: ao, SyntaxOK: true, Applied: true, Noop: true}); got != 0.3 {
		t.Errorf("reject_noop off: noop gets %v, want 0.3", got)
	}
}
