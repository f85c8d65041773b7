package task

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestTrimContext(t *testing.T) {
	const head = "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n"
	tests := []struct {
		name, patch string
		n           int
		want        string
	}{
		{"three to one", head + "@@ -4,7 +4,7 @@ def f():\n a\n b\n c\n-d\n+D\n e\n f\n g\n", 1,
			head + "@@ -6,3 +6,3 @@ def f():\n c\n-d\n+D\n e\n"},
		{"interior context kept", head + "@@ -1,7 +1,7 @@\n a\n b\n-c\n+C\n d\n-e\n+E\n f\n g\n", 1,
			head + "@@ -2,5 +2,5 @@\n b\n-c\n+C\n d\n-e\n+E\n f\n"},
		{"fewer lines than n kept", head + "@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n", 2, head + "@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"},
		{"count of one left out", head + "@@ -1,5 +1,4 @@\n a\n b\n-c\n d\n e\n", 1, head + "@@ -2,3 +2,2 @@\n b\n-c\n d\n"},
		{"insertion at the top", head + "@@ -0,0 +1,2 @@\n+a\n+b\n", 1, head + "@@ -0,0 +1,2 @@\n+a\n+b\n"},
		{"empty line is context", head + "@@ -1,5 +1,5 @@\n a\n\n-c\n+C\n\n e\n", 1, head + "@@ -2,3 +2,3 @@\n\n-c\n+C\n\n"},
		{"no newline marker follows its line", head + "@@ -1,3 +1,3 @@\n a\n b\n-c\n\\ No newline at end of file\n+C\n\\ No newline at end of file\n", 1,
			head + "@@ -2,2 +2,2 @@\n b\n-c\n\\ No newline at end of file\n+C\n\\ No newline at end of file\n"},
		{"two files", head + "@@ -1,3 +1,3 @@\n a\n b\n-c\n+C\n" + strings.ReplaceAll(head, "x.py", "y.py") + "@@ -1,3 +1,3 @@\n-a\n+A\n b\n c\n", 1,
			head + "@@ -2,2 +2,2 @@\n b\n-c\n+C\n" + strings.ReplaceAll(head, "x.py", "y.py") + "@@ -1,2 +1,2 @@\n-a\n+A\n b\n"},
		{"n below one is the patch", head + "@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n", 0, head + "@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := TrimContext(tt.patch, tt.n)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("TrimContext(n=%d) =\n%s\nwant\n%s", tt.n, got, tt.want)
			}
		})
	}
}

func TestTrimContextRejectsABodyThatDisagreesWithItsHeader(t *testing.T) {
	for _, p := range []string{
		"--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n-b\n",             // short
		"--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n a\n-b\n+B\n c\n-d\n", // long
		"--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n a\n?b\n",             // not a hunk line
	} {
		if _, err := TrimContext(p, 1); err == nil || !strings.Contains(err.Error(), "@@ -1,") {
			t.Errorf("TrimContext(%q) error = %v, want one naming the hunk", p, err)
		}
	}
}

// A trimmed patch makes the same edit as the original: git apply both.
func TestTrimmedPatchAppliesLikeTheOriginal(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	var lines []string
	for i := range 40 {
		lines = append(lines, "line "+string(rune('a'+i%26))+strings.Repeat("x", i))
	}
	old := strings.Join(lines, "\n") + "\n"
	edited := slicesReplace(lines, 20, "changed")
	edited = slicesReplace(edited, 23, "changed too")
	edited = slicesReplace(edited, 0, "first")
	newText := strings.Join(edited, "\n") + "\n"
	patch := UnifiedDiff("f.txt", old, newText)
	for _, n := range []int{1, 2} {
		trimmed, err := TrimContext(patch, n)
		if err != nil {
			t.Fatal(err)
		}
		if len(trimmed) >= len(patch) {
			t.Fatalf("n=%d: nothing trimmed:\n%s", n, trimmed)
		}
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "f.txt"), []byte(old), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("git", "apply", "-")
		cmd.Dir, cmd.Stdin = dir, strings.NewReader(trimmed)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("n=%d: git apply: %v\n%s\n%s", n, err, out, trimmed)
		}
		got, _ := os.ReadFile(filepath.Join(dir, "f.txt"))
		if string(got) != newText {
			t.Errorf("n=%d: applied trimmed patch gives another file", n)
		}
	}
}

func slicesReplace(lines []string, i int, s string) []string {
	out := append([]string(nil), lines...)
	out[i] = s
	return out
}
