package train

import (
	"github.com/swetui/swetui/prompt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestLineMutations(t *testing.T) {
	tests := []struct {
		line string
		want []string
	}{
		{"    return a <= b", []string{"    return a < b"}},
		{"    if x > 0 and y:", []string{"    if x >= 0 and y:", "    if x > 0 or y:", "    if x > 1 and y:"}},
		{"    return not done", []string{"    return done"}},
		{"    return min(a, 10)", []string{"    return max(a, 10)", "    return min(a, 11)", "    return min(a, 9)"}},
		{`    return f"{n} < 0" # x > 1`, nil},                                           // strings and comments are not code
		{`    return s.split("a == b")[0]`, []string{`    return s.split("a == b")[1]`}}, // 0 has no -1
		{"    return x_2 + y.5", []string{"    return x_2 - y.5"}},                       // digits inside names are not literals
		{"    return value", nil},
		{"    return is_True(x) or cannot_min(y)", []string{"    return is_True(x) and cannot_min(y)"}}, // names are not operators
	}
	for _, tt := range tests {
		got := lineMutations(tt.line)
		slices.Sort(got)
		want := slices.Clone(tt.want)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("lineMutations(%q)\n got %q\nwant %q", tt.line, got, want)
		}
	}
}

const augmentSample = `import math


def first(xs):
    """Return the first item.

    Example: first([1 > 0]) == True
    """
    # an index of 0 is the front
    if len(xs) == 0:
        return None
    return xs[0]


def last(xs):
    """Return the last item; None when xs < 1 long."""
    if not xs:
        return None
    return xs[-1]


def tail(xs):
    return xs[1:]
`

func TestMutationsOnlyTouchFunctionCode(t *testing.T) {
	ms := Mutations(prompt.CodeFile{Path: "pkg/items.py", Text: augmentSample})
	lines := strings.Split(augmentSample, "\n")
	got := map[int]bool{}
	for _, m := range ms {
		got[m.Line] = true
		if lines[m.Line] != m.Fixed || m.Buggy == m.Fixed {
			t.Errorf("mutation %+v does not change line %d %q", m, m.Line, lines[m.Line])
		}
	}
	// Code lines of first and last; tail's body is within 3 lines of the end.
	want := map[int]bool{9: true, 11: true, 16: true, 18: true}
	for l := range want {
		if !got[l] {
			t.Errorf("no mutation of line %d %q", l, lines[l])
		}
	}
	for l := range got {
		if !want[l] {
			t.Errorf("mutation of line %d %q, which is not function code far enough from the end", l, lines[l])
		}
	}
	if fn := ms[0].Func; fn != "first" {
		t.Errorf("first mutation is in %q, want first", fn)
	}
}

func TestMutationsStopBeforeTheCut(t *testing.T) {
	cut := augmentSample[:strings.Index(augmentSample, "def last")+20] + prompt.TruncationMarker
	for _, m := range Mutations(prompt.CodeFile{Path: "a.py", Text: cut}) {
		if m.Line > 11 {
			t.Errorf("mutation of line %d: its context would run into the cut", m.Line)
		}
	}
}

// TestFixRevertsTheMutation applies every fix with git apply to the buggy
// file and expects the original back.
func TestFixRevertsTheMutation(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	orig := prompt.CodeFile{Path: "pkg/items.py", Text: augmentSample}
	for _, m := range Mutations(orig) {
		dir := t.TempDir()
		buggy := m.Apply(orig)
		path := filepath.Join(dir, orig.Path)
		os.MkdirAll(filepath.Dir(path), 0o755)
		os.WriteFile(path, []byte(buggy.Text), 0o644)
		os.WriteFile(filepath.Join(dir, "fix.diff"), []byte(m.Fix(buggy)), 0o644)
		cmd := exec.Command("git", "apply", "fix.diff")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git apply of the fix for %q -> %q: %v\n%s\n%s", m.Fixed, m.Buggy, err, out, m.Fix(buggy))
		}
		if got, _ := os.ReadFile(path); string(got) != augmentSample {
			t.Fatalf("fix for line %d did not restore the file:\n%s", m.Line, got)
		}
	}
}

func TestSyntheticFixesAreDistinctAndReproducible(t *testing.T) {
	files := []prompt.CodeFile{{Path: "pkg/items.py", Text: augmentSample}}
	p1, d1 := SyntheticFixes(rand.New(rand.NewPCG(1, 2)), files, 5)
	p2, d2 := SyntheticFixes(rand.New(rand.NewPCG(1, 2)), files, 5)
	if len(d1) != 5 || !slices.Equal(p1, p2) || !slices.Equal(d1, d2) {
		t.Fatalf("got %d fixes; same seed same fixes: %v", len(d1), slices.Equal(d1, d2))
	}
	if len(slices.Compact(slices.Sorted(slices.Values(d1)))) != 5 {
		t.Error("repeated fixes")
	}
	for i, p := range p1 {
		if strings.Contains(p, "Example: first([1 > 0])") == false {
			t.Errorf("user turn %d lost the docstring", i)
		}
		if strings.Contains(p, prompt.ImStart) || !strings.Contains(p, "\n\n[pkg/items.py]\n") {
			t.Errorf("user turn %d is not an issue and its file: %q", i, p)
		}
	}
	if _, d := SyntheticFixes(rand.New(rand.NewPCG(1, 2)), files, 1000); len(d) != len(Mutations(files[0])) {
		t.Errorf("asking for more than exist gave %d, want all %d", len(d), len(Mutations(files[0])))
	}
}

func TestRenamePackagesRenamesFoldersInIssueFilesAndPatch(t *testing.T) {
	files := []prompt.CodeFile{{Path: "cobalt/pricing.py", Text: "from cobalt.util import x\ndef f():\n    return x < 1\n"}}
	user := prompt.UserTurn("Bug in cobalt.pricing.f", files)
	patch := "diff --git a/cobalt/pricing.py b/cobalt/pricing.py\n--- a/cobalt/pricing.py\n+++ b/cobalt/pricing.py\n@@ -1,3 +1,3 @@\n from cobalt.util import x\n def f():\n-    return x < 1\n+    return x <= 1\n"
	p, d := RenamePackages(rand.New(rand.NewPCG(1, 2)), files, user, patch)
	name := madeUpName(rand.New(rand.NewPCG(1, 2)))
	if len(name) != 6 || strings.Contains(p, "cobalt") || strings.Contains(d, "cobalt") {
		t.Fatalf("name %q; user turn %q\npatch %q", name, p, d)
	}
	if p != strings.ReplaceAll(user, "cobalt", name) || d != strings.ReplaceAll(patch, "cobalt", name) {
		t.Fatalf("renamed user turn %q\npatch %q, want cobalt -> %s everywhere", p, d, name)
	}
	// A word that only contains the folder's name is left alone.
	if p, _ := RenamePackages(rand.New(rand.NewPCG(1, 2)), files, prompt.UserTurn("cobalts", nil), ""); !strings.Contains(p, "cobalts") {
		t.Fatalf("renamed inside a word: %q", p)
	}
}
