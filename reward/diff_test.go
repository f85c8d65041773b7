package reward

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const modifyDiff = `diff --git a/pkg/mod.py b/pkg/mod.py
index 83db48f..bf269f4 100644
--- a/pkg/mod.py
+++ b/pkg/mod.py
@@ -1,3 +1,3 @@
 def f():
-    return 1
+    return 2
 
`

func TestValidateDiff(t *testing.T) {
	tests := []struct {
		name    string
		diff    string
		wantErr string // substring; "" means valid
		check   func(t *testing.T, p *Patch)
	}{
		{name: "modify", diff: modifyDiff, check: func(t *testing.T, p *Patch) {
			f := p.Files[0]
			if f.OldPath != "pkg/mod.py" || f.NewPath != "pkg/mod.py" || f.Hunks != 1 || f.Added != 1 || f.Deleted != 1 || !p.Git {
				t.Errorf("got %+v", f)
			}
		}},
		{name: "new file", diff: "diff --git a/new.py b/new.py\nnew file mode 100644\nindex 0000000..e69de29\n--- /dev/null\n+++ b/new.py\n@@ -0,0 +1,2 @@\n+a\n+b\n",
			check: func(t *testing.T, p *Patch) {
				if f := p.Files[0]; !f.IsNew || f.OldPath != "" || f.NewPath != "new.py" {
					t.Errorf("got %+v", f)
				}
			}},
		{name: "new empty file", diff: "diff --git a/empty.txt b/empty.txt\nnew file mode 100644\nindex 0000000..e69de29\n",
			check: func(t *testing.T, p *Patch) {
				if f := p.Files[0]; !f.IsNew || f.NewPath != "empty.txt" {
					t.Errorf("got %+v", f)
				}
			}},
		{name: "deleted file", diff: "diff --git a/old.py b/old.py\ndeleted file mode 100644\nindex e69de29..0000000\n--- a/old.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n",
			check: func(t *testing.T, p *Patch) {
				if f := p.Files[0]; !f.IsDelete || f.NewPath != "" || f.OldPath != "old.py" {
					t.Errorf("got %+v", f)
				}
			}},
		{name: "pure rename", diff: "diff --git a/a.py b/b.py\nsimilarity index 100%\nrename from a.py\nrename to b.py\n",
			check: func(t *testing.T, p *Patch) {
				if f := p.Files[0]; !f.IsRename || f.OldPath != "a.py" || f.NewPath != "b.py" {
					t.Errorf("got %+v", f)
				}
			}},
		{name: "rename with edit", diff: "diff --git a/d/a.py b/d/b.py\nsimilarity index 90%\nrename from d/a.py\nrename to d/b.py\nindex 1..2 100644\n--- a/d/a.py\n+++ b/d/b.py\n@@ -1 +1 @@\n-x\n+y\n",
			check: func(t *testing.T, p *Patch) {
				if f := p.Files[0]; !f.IsRename || f.OldPath != "d/a.py" || f.NewPath != "d/b.py" || f.Hunks != 1 {
					t.Errorf("got %+v", f)
				}
			}},
		{name: "mode change", diff: "diff --git a/run.sh b/run.sh\nold mode 100644\nnew mode 100755\n",
			check: func(t *testing.T, p *Patch) {
				if f := p.Files[0]; !f.ModeOnly {
					t.Errorf("got %+v", f)
				}
			}},
		{name: "binary differ", diff: "diff --git a/img.png b/img.png\nindex 1..2 100644\nBinary files a/img.png and b/img.png differ\n",
			check: func(t *testing.T, p *Patch) {
				if !p.Files[0].IsBinary {
					t.Errorf("got %+v", p.Files[0])
				}
			}},
		{name: "git binary patch", diff: "diff --git a/x.bin b/x.bin\nnew file mode 100644\nindex 0000000..1111111\nGIT binary patch\nliteral 5\nMcmZ?wbaHk80000\n\nliteral 0\nHcmV?d00001\n\n"},
		{name: "no newline markers", diff: "diff --git a/t.txt b/t.txt\n--- a/t.txt\n+++ b/t.txt\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n"},
		{name: "several files", diff: modifyDiff + "diff --git a/b.py b/b.py\n--- a/b.py\n+++ b/b.py\n@@ -3,0 +4,1 @@\n+z\n@@ -10,2 +11 @@\n-p\n q\n",
			check: func(t *testing.T, p *Patch) {
				if len(p.Files) != 2 || p.Files[1].Hunks != 2 {
					t.Errorf("got %+v", p.Files)
				}
			}},
		{name: "plain diff without diff --git", diff: "--- a/src/x.c\t2024-01-01 10:00:00.000000000 +0000\n+++ b/src/x.c\t2024-01-02 10:00:00.000000000 +0000\n@@ -1 +1 @@\n-int a;\n+int b;\n",
			check: func(t *testing.T, p *Patch) {
				if p.Git || p.Files[0].NewPath != "src/x.c" {
					t.Errorf("got %+v", p)
				}
			}},
		{name: "plain new file", diff: "--- /dev/null\n+++ b/n.py\n@@ -0,0 +1 @@\n+x\n",
			check: func(t *testing.T, p *Patch) {
				if !p.Files[0].IsNew {
					t.Errorf("got %+v", p.Files[0])
				}
			}},
		{name: "empty line as context", diff: "--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n\n-b\n+c\n"},
		{name: "deleted line looking like header", diff: "--- a/x\n+++ b/x\n@@ -1,2 +1,1 @@\n--- y\n a\n"},
		{name: "quoted path", diff: "diff --git \"a/sp ace.py\" \"b/sp ace.py\"\n--- \"a/sp ace.py\"\n+++ \"b/sp ace.py\"\n@@ -1 +1 @@\n-a\n+b\n",
			check: func(t *testing.T, p *Patch) {
				if p.Files[0].NewPath != "sp ace.py" {
					t.Errorf("got %+v", p.Files[0])
				}
			}},

		{name: "empty", diff: "", wantErr: "empty diff"},
		{name: "prose", diff: "I fixed the bug.\n", wantErr: "expected a file header"},
		{name: "count too small", diff: "--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n-a\n+b\n", wantErr: "hunk ends early"},
		{name: "count too large", diff: "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n-b\n+c\n", wantErr: "longer than its header"},
		{name: "empty hunk", diff: "--- a/x\n+++ b/x\n@@ -1,0 +1,0 @@\n", wantErr: "empty hunk"},
		{name: "context only hunk", diff: "--- a/x\n+++ b/x\n@@ -1 +1 @@\n a\n", wantErr: "changes nothing"},
		{name: "header without hunks", diff: "--- a/x\n+++ b/x\n", wantErr: "no hunks"},
		{name: "git section without anything", diff: "diff --git a/x b/x\nindex 1..2 100644\n", wantErr: "no hunks"},
		{name: "missing +++", diff: "--- a/x\n@@ -1 +1 @@\n-a\n+b\n", wantErr: "not followed by +++"},
		{name: "malformed hunk header", diff: "--- a/x\n+++ b/x\n@@ -a +1 @@\n-a\n+b\n", wantErr: "bad number"},
		{name: "hunk header without @@ end", diff: "--- a/x\n+++ b/x\n@@ -1 +1\n-a\n+b\n", wantErr: "malformed hunk header"},
		{name: "absolute path", diff: "--- /etc/passwd\n+++ /etc/passwd\n@@ -1 +1 @@\n-a\n+b\n", wantErr: "absolute path"},
		{name: "dotdot", diff: "--- a/../x\n+++ b/../x\n@@ -1 +1 @@\n-a\n+b\n", wantErr: "leaves the repository"},
		{name: "into .git", diff: "diff --git a/.git/config b/.git/config\n--- a/.git/config\n+++ b/.git/config\n@@ -1 +1 @@\n-a\n+b\n", wantErr: "into .git"},
		{name: "rename into .git", diff: "diff --git a/x b/.git/hooks/pre-commit\nrename from x\nrename to .git/hooks/pre-commit\n", wantErr: "into .git"},
		{name: "nested .git", diff: "--- a/sub/.GIT/x\n+++ b/sub/.GIT/x\n@@ -1 +1 @@\n-a\n+b\n", wantErr: "into .git"},
		{name: "new file with old range", diff: "--- /dev/null\n+++ b/n\n@@ -1 +1 @@\n-a\n+b\n", wantErr: "must start at -0,0"},
		{name: "trailing prose", diff: modifyDiff + "This fixes it.\n", wantErr: "after the last hunk"},
		{name: "garbage in hunk", diff: "--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n-a\n*b\n", wantErr: "still due"},
		{name: "bad mode", diff: "diff --git a/x b/x\nnew file mode 100777\n", wantErr: "unsupported file mode"},
		{name: "new and deleted", diff: "diff --git a/x b/x\nnew file mode 100644\ndeleted file mode 100644\n", wantErr: "both new and deleted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ValidateDiff(tt.diff)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("ValidateDiff: %v", err)
				}
				if tt.check != nil {
					tt.check(t, p)
				}
				return
			}
			if err == nil {
				t.Fatalf("ValidateDiff accepted it, want error containing %q", tt.wantErr)
			}
			var se *SyntaxError
			if !errors.As(err, &se) || se.Line < 0 {
				t.Errorf("error %v is not a *SyntaxError", err)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %q does not contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestExtract(t *testing.T) {
	bare := modifyDiff
	tests := []struct {
		name       string
		completion string
		form       string
		valid      bool
		diff       string // expected diff when non-empty
	}{
		{"fenced diff", "Here is the fix:\n```diff\n" + bare + "```\nDone.", FormFenced, true, bare},
		{"fenced patch with tildes", "~~~patch\n" + bare + "~~~\n", FormFenced, true, bare},
		{"untagged fence holding a diff", "```\n" + bare + "```\n", FormFenced, true, bare},
		{"fenced python is not a diff", "```python\nprint(1)\n```\n", FormNone, false, ""},
		{"tagged", "<patch>\n" + bare + "</patch>", FormTagged, true, bare},
		{"tagged wrapping a fence", "<patch>\n```diff\n" + bare + "```\n</patch>", FormTagged, true, bare},
		{"bare", bare, FormBare, true, bare},
		{"bare with prose around", "I changed f.\n\n" + bare + "\nThat should do it.\n", FormBare, true, bare + "\n"},
		{"crlf", strings.ReplaceAll("```diff\n"+bare+"```\n", "\n", "\r\n"), FormFenced, true, bare},
		{"missing final newline", "<patch>\n" + strings.TrimSuffix(bare, "\n") + "</patch>", FormTagged, true, bare},
		{"unclosed fence (truncated)", "```diff\n" + bare, FormFenced, true, bare},
		{"first well-formed wins", "```diff\n--- a/x\n+++ b/x\n@@ -1,5 +1,5 @@\n-a\n```\n\n```diff\n" + bare + "```\n", FormFenced, true, bare},
		{"first candidate reported when none valid", "```diff\n--- a/x\n+++ b/x\n@@ -1,5 +1,5 @@\n-a\n```\n", FormFenced, false, ""},
		{"nothing", "I could not find the bug.", FormNone, false, ""},
		{"empty", "", FormNone, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := Extract(tt.completion)
			if e.Form != tt.form || e.Valid() != tt.valid {
				t.Fatalf("Extract = form %q valid %v (err %v), want %q %v", e.Form, e.Valid(), e.Err, tt.form, tt.valid)
			}
			if tt.diff != "" && e.Diff != tt.diff {
				t.Errorf("diff =\n%q\nwant\n%q", e.Diff, tt.diff)
			}
			if !tt.valid && tt.form != FormNone && e.Err == nil {
				t.Errorf("invalid extraction carries no error")
			}
		})
	}
}

// TestRealPatchesValidate checks every real patch we have: the SWE-bench Lite
// gold and test patches and the model patches of the harness logs.
func TestRealPatchesValidate(t *testing.T) {
	dir := realdataDir(t)
	f, err := os.Open(filepath.Join(dir, "swebench_lite_sample30.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	n := 0
	for line := 1; sc.Scan(); line++ {
		var in struct {
			ID        string `json:"instance_id"`
			Patch     string `json:"patch"`
			TestPatch string `json:"test_patch"`
		}
		if err := json.Unmarshal(sc.Bytes(), &in); err != nil {
			t.Fatalf("line %d: %v", line, err)
		}
		for _, d := range []string{in.Patch, in.TestPatch} {
			if _, err := ValidateDiff(d); err != nil {
				t.Errorf("%s: %v", in.ID, err)
			}
			if e := Extract("```diff\n" + d + "```"); !e.Valid() || e.Diff != d {
				t.Errorf("%s: Extract of the fenced gold patch: valid %v err %v", in.ID, e.Valid(), e.Err)
			}
			n++
		}
	}
	_, index := readHarnessIndex(t)
	for _, in := range index {
		d, err := os.ReadFile(filepath.Join(dir, "harness_logs", in.InstanceID, "patch.diff"))
		if err != nil {
			t.Fatal(err)
		}
		_, err = ValidateDiff(string(d))
		switch {
		case len(d) == 0: // two logs kept no patch; an empty diff is invalid
			if err == nil || !strings.Contains(err.Error(), "empty diff") {
				t.Errorf("%s: empty patch.diff: got %v, want an empty-diff error", in.InstanceID, err)
			}
		case err != nil:
			t.Errorf("%s patch.diff: %v", in.InstanceID, err)
		}
		n++
	}
	if n != 90 {
		t.Errorf("checked %d patches, want 90", n)
	}
}

// TestExtractLargeInputs guards against quadratic paths: megabyte-sized
// completions of many candidates go through extraction, validation and the
// hack scan in well under the time a group's sampling takes.
func TestExtractLargeInputs(t *testing.T) {
	inputs := map[string]string{
		"many fences":      strings.Repeat("```diff\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n```\n", 20000),
		"open fences":      strings.Repeat("```diff\n", 100000),
		"many tags":        strings.Repeat("<patch>\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n</patch>\n", 20000),
		"git headers only": strings.Repeat("diff --git a/x b/x\n", 100000),
		"bare diffs":       strings.Repeat("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\nprose\n", 50000),
		"binary blocks":    "diff --git a/x b/x\nGIT binary patch\n" + strings.Repeat("literal 1\nA\n\n", 100000),
	}
	for name, in := range inputs {
		start := time.Now()
		Extract(in)
		_, _ = ValidateDiff(in)
		HackFlags(readDiff(in))
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("%s (%d bytes): %v", name, len(in), d)
		}
	}
}
