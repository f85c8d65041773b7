package reward

import (
	"strings"
	"testing"
)

// FuzzValidateDiff runs the syntax check, ReadDiff, the hack check and the
// extraction on arbitrary input. Invariants: no panic; an accepted diff
// names only clean relative paths and has hunks or a reason to have none;
// ReadDiff gives the syntax check's verdict and error; whatever Extract
// calls valid validates again unchanged. Seeds live in
// testdata/fuzz/FuzzValidateDiff.
func FuzzValidateDiff(f *testing.F) {
	f.Add(modifyDiff)
	f.Add("--- /dev/null\n+++ b/n.py\n@@ -0,0 +1 @@\n+x\n")
	f.Add("diff --git a/a.py b/b.py\nsimilarity index 100%\nrename from a.py\nrename to b.py\n")
	f.Add("```diff\n" + modifyDiff + "```\n<patch>\n" + modifyDiff + "</patch>")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ValidateDiff(s)
		if err == nil {
			if len(p.Files) == 0 {
				t.Fatalf("accepted a diff with no files")
			}
			for _, f := range p.Files {
				for _, q := range []string{f.OldPath, f.NewPath} {
					if q == "" {
						continue
					}
					if _, err := cleanPath(q); err != nil {
						t.Fatalf("accepted unclean path %q: %v", q, err)
					}
				}
				if f.Hunks == 0 && !f.IsBinary && !f.IsNew && !f.IsDelete && !f.IsRename && !f.IsCopy && !f.ModeOnly {
					t.Fatalf("accepted file %+v with nothing in it", f)
				}
			}
		} else if _, ok := err.(*SyntaxError); !ok {
			t.Fatalf("error %T is not a *SyntaxError", err)
		}
		read, rerr := ReadDiff(s)
		if read == nil || (rerr == nil) != (err == nil) || (err != nil && rerr.Error() != err.Error()) {
			t.Fatalf("ReadDiff: %v, %v; ValidateDiff: %v", read, rerr, err)
		}
		HackFlags(read)
		e := Extract(s)
		if e.Valid() {
			if _, err := ValidateDiff(e.Diff); err != nil {
				t.Fatalf("Extract called %q valid but it is not: %v", e.Diff, err)
			}
			if !strings.HasSuffix(e.Diff, "\n") || strings.Contains(e.Diff, "\r") {
				t.Fatalf("extracted diff not normalised: %q", e.Diff)
			}
		}
	})
}

// BenchmarkValidateDiff measures the syntax check on a real-sized patch.
func BenchmarkValidateDiff(b *testing.B) {
	d := benchDiff()
	b.SetBytes(int64(len(d)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ValidateDiff(d); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "patches/s")
}

// BenchmarkExtract measures extraction plus validation of a fenced diff in prose.
func BenchmarkExtract(b *testing.B) {
	c := "I looked at the code and found the issue.\n\n```diff\n" + benchDiff() + "```\n\nThis should fix it."
	b.ReportAllocs()
	for b.Loop() {
		if e := Extract(c); !e.Valid() {
			b.Fatal(e.Err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "completions/s")
}

// benchDiff is a 3-file, 6-hunk, ~4 KB patch, larger than most gold patches.
func benchDiff() string {
	var sb strings.Builder
	for f := 0; f < 3; f++ {
		name := []string{"src/pkg/core.py", "src/pkg/util/helpers.py", "tests/test_core.py"}[f]
		sb.WriteString("diff --git a/" + name + " b/" + name + "\nindex 83db48f..bf269f4 100644\n--- a/" + name + "\n+++ b/" + name + "\n")
		for h := 0; h < 2; h++ {
			sb.WriteString("@@ -10,12 +10,13 @@ class Thing(object):\n")
			for i := 0; i < 5; i++ {
				sb.WriteString("     def method_with_a_reasonably_long_name(self, argument):\n")
			}
			sb.WriteString("-        return argument + 1  # the old behaviour\n")
			sb.WriteString("+        # the new behaviour needs a guard\n+        return argument + 2\n")
			for i := 0; i < 6; i++ {
				sb.WriteString("         value = compute(argument, other_argument, keyword=True)\n")
			}
		}
	}
	return sb.String()
}
