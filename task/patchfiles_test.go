package task

import (
	"slices"
	"testing"
)

func TestPatchFiles(t *testing.T) {
	tests := []struct {
		name  string
		patch string
		want  []FileChange
	}{
		{"git modify", "diff --git a/x.py b/x.py\nindex 1..2 100644\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n",
			[]FileChange{{"x.py", "x.py"}}},
		{"git create and delete", "diff --git a/new.py b/new.py\nnew file mode 100644\n--- /dev/null\n+++ b/new.py\n@@ -0,0 +1 @@\n+x\n" +
			"diff --git a/old.py b/old.py\ndeleted file mode 100644\n--- a/old.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n",
			[]FileChange{{"", "new.py"}, {"old.py", ""}}},
		{"git rename without hunks", "diff --git a/a.py b/b.py\nsimilarity index 100%\nrename from a.py\nrename to b.py\n",
			[]FileChange{{"a.py", "b.py"}}},
		{"plain diffs, two files, timestamps", "--- a/x.py\t2020-01-01\n+++ b/x.py\t2020-01-02\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n--- a/y.py\n+++ b/y.py\n@@ -1 +1 @@\n-d\n+e\n",
			[]FileChange{{"x.py", "x.py"}, {"y.py", "y.py"}}},
		// A removed line "-- a/z" reads "--- a/z" in the hunk: not a header.
		{"header-like hunk lines", "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,2 +1,1 @@\n--- a/z\n++++ b/z\n",
			[]FileChange{{"x", "x"}}},
		{"quoted path", "diff --git \"a/sp ace.py\" \"b/sp ace.py\"\n--- \"a/sp ace.py\"\n+++ \"b/sp ace.py\"\n@@ -1 +1 @@\n-a\n+b\n",
			[]FileChange{{"sp ace.py", "sp ace.py"}}},
		{"same file twice", "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\ndiff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -5 +5 @@\n-a\n+b\n",
			[]FileChange{{"x", "x"}}},
		{"a name holding \" b/\", no ---/+++ lines", "diff --git a/d b/e.py b/d b/e.py\nold mode 100644\nnew mode 100755\n",
			[]FileChange{{"d b/e.py", "d b/e.py"}}},
		{"crlf", "diff --git a/x b/x\r\n--- a/x\r\n+++ b/x\r\n@@ -1 +1 @@\r\n-a\r\n+b\r\n", []FileChange{{"x", "x"}}},
		{"prose only", "no diff here\n", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := PatchFiles(tt.patch); !slices.Equal(got, tt.want) {
				t.Errorf("PatchFiles = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestPaths(t *testing.T) {
	got := Paths([]FileChange{{"a.py", "b.py"}, {"", "c.py"}, {"b.py", "b.py"}})
	if want := []string{"a.py", "b.py", "c.py"}; !slices.Equal(got, want) {
		t.Errorf("Paths = %q, want %q", got, want)
	}
	if got := (FileChange{Old: "gone.py"}).Path(); got != "gone.py" {
		t.Errorf("deleted file's Path = %q", got)
	}
}

// TestSplitGitHeader: the one reading of a diff --git line, which reward's
// syntax check shares.
func TestSplitGitHeader(t *testing.T) {
	tests := []struct{ in, a, b string }{
		{"a/x.py b/x.py", "a/x.py", "b/x.py"},
		{`"a/sp ace.py" "b/sp ace.py"`, "a/sp ace.py", "b/sp ace.py"},
		{`a/x.py "b/\303\251.py"`, "a/x.py", "b/\u00e9.py"},
		{"a/d b/e.py b/d b/e.py", "a/d b/e.py", "b/d b/e.py"},     // halves naming one file win
		{"a/old b/x b/new", "a/old b/x", "b/new"},                 // else the last " b/"
		{"a/sp ace.py b/sp ace.py", "a/sp ace.py", "b/sp ace.py"}, // unquoted spaces
	}
	for _, tt := range tests {
		a, b, err := SplitGitHeader(tt.in)
		if err != nil || a != tt.a || b != tt.b {
			t.Errorf("SplitGitHeader(%q) = %q, %q, %v; want %q, %q", tt.in, a, b, err, tt.a, tt.b)
		}
	}
	for _, in := range []string{"a/x.py", `"a/x.py b/x.py`} {
		if _, _, err := SplitGitHeader(in); err == nil {
			t.Errorf("SplitGitHeader(%q): no error", in)
		}
	}
}
