package reward

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/pmezard/go-difflib/difflib"
	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/task"
)

// TestRatio: the numbers are python3's
// difflib.SequenceMatcher(None, a, b, autojunk=False).ratio(); "autojunk"
// is Python's default matcher (autojunk=True) on the same strings, which
// differs where b has 200 characters or more, to show the option matters.
func TestRatio(t *testing.T) {
	lines := func(f func(i int) int) string {
		var out []string
		for i := range 40 {
			out = append(out, fmt.Sprintf("line %d = value_%d", i, f(i)))
		}
		return strings.Join(out, "\n")
	}
	tests := []struct {
		name     string
		a, b     string
		want     float64
		autojunk float64
	}{
		{"shifted", "abcd", "bcde", 0.75, 0.75},
		{"both empty", "", "", 1, 1},
		{"one empty", "a", "", 0, 0},
		{"kitten", "kitten", "sitting", 0.6153846153846154, 0.6153846153846154},
		{"code points, not bytes", "héllo wörld", "hello world", 0.8181818181818182, 0.8181818181818182},
		{"a change",
			"-    return sum(1 for x in delays if x >= grace)\n+    return sum(1 for x in delays if x > grace)\n",
			"-    return sum(1 for x in delays if x >= grace)\n+    return 0\n", 0.775, 0.775},
		{"popular characters", strings.Repeat("ab", 150) + "xyz", strings.Repeat("ba", 140) + "xyz" + strings.Repeat("ab", 10),
			0.9867986798679867, 0.009900990099009901},
		{"the benchmark's 2.8 KB", benchText(64, false), benchText(64, true), 0.9068478455211872, 0.9068478455211872},
		{"lines", lines(func(i int) int { return i * 7 % 13 }), lines(func(i int) int { return i * 5 % 11 }),
			0.9000698812019566, 0.15653389238294899},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Ratio(tt.a, tt.b); math.Abs(got-tt.want) > 1e-12 {
				t.Errorf("Ratio = %v, want %v (Python's, autojunk=False)", got, tt.want)
			}
			if tt.autojunk != tt.want && math.Abs(Ratio(tt.a, tt.b)-tt.autojunk) < 1e-6 {
				t.Errorf("Ratio equals Python's autojunk=True ratio %v", tt.autojunk)
			}
		})
	}
}

// TestPatchSimilarity: SWE-RL's mean over the union of files, a file on one
// side only (or an empty change) scoring 0.
func TestPatchSimilarity(t *testing.T) {
	tests := []struct {
		name         string
		pred, oracle map[string]string
		want         float64
	}{
		{"same", map[string]string{"a.py": "-x\n+y\n"}, map[string]string{"a.py": "-x\n+y\n"}, 1},
		{"one file", map[string]string{"a.py": "abcd"}, map[string]string{"a.py": "bcde"}, 0.75},
		{"an extra file halves it", map[string]string{"a.py": "abcd", "b.py": "+z\n"}, map[string]string{"a.py": "bcde"}, 0.375},
		{"a missing file", map[string]string{"a.py": "-x\n+y\n"}, map[string]string{"a.py": "-x\n+y\n", "c.py": "+q\n"}, 0.5},
		{"empty change counts 0", map[string]string{"a.py": ""}, map[string]string{"a.py": "-x\n+y\n"}, 0},
		{"nothing at all", nil, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := PatchSimilarity(tt.pred, tt.oracle); math.Abs(got-tt.want) > 1e-12 {
				t.Errorf("PatchSimilarity = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestChangedLines: a re-diff shows only what changed, however the hunks
// were written.
func TestChangedLines(t *testing.T) {
	tests := []struct {
		name     string
		old, new []string
		want     string
	}{
		{"equal", []string{"a", "b"}, []string{"a", "b"}, ""},
		{"replace", []string{"a", "b", "c"}, []string{"a", "B", "c"}, "-b\n+B\n"},
		{"insert and delete", []string{"a", "b", "c", "d"}, []string{"x", "a", "b", "d"}, "+x\n-c\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ChangedLines(tt.old, tt.new); got != tt.want {
				t.Errorf("ChangedLines = %q, want %q", got, tt.want)
			}
		})
	}
}

// slugFile is a small module as a prompt shows it whole.
const slugFile = `"""Slugs for titles."""

import re


def slugify(s):
    """Return s as a URL slug: trimmed, lower case, dashes for spaces."""
    return s.replace(" ", "-")


def words(s):
    """Return the words of s."""
    return re.findall(r"\w+", s)
`

const slugIssue = "slugify() keeps case and surrounding spaces\n\nslugify(\" A B \") gives \"-A-B-\", expected \"a-b\"."

// slugDiff is a one-hunk diff of slug.py replacing the return line.
func slugDiff(newReturn string) string {
	return "diff --git a/slug.py b/slug.py\n--- a/slug.py\n+++ b/slug.py\n@@ -6,4 +6,4 @@\n def slugify(s):\n" +
		`     """Return s as a URL slug: trimmed, lower case, dashes for spaces."""` + "\n" +
		"-    return s.replace(\" \", \"-\")\n+" + newReturn + "\n \n"
}

// appendDiff adds lines at the end of slug.py (after its 13 lines).
func appendDiff(lines []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "diff --git a/slug.py b/slug.py\n--- a/slug.py\n+++ b/slug.py\n@@ -12,3 +12,%d @@\n", 3+len(lines))
	b.WriteString(` def words(s):` + "\n" + `     """Return the words of s."""` + "\n" + `     return re.findall(r"\w+", s)` + "\n")
	for _, l := range lines {
		b.WriteString("+" + l + "\n")
	}
	return b.String()
}

var slugGold = slugDiff(`    return s.strip().lower().replace(" ", "-")`)

// TestSimilarityRewardsTheChange: copying the prompt into the patch (the
// shown file, the issue text) scores below a half-right fix, and a wrong
// edit at the right place below the fix; with base files (re-diffed) and
// without (the diffs as they are). Measured: fix 1, half-right 0.947, wrong
// edit in place 0.730, the file copied 0.318, the issue copied 0.231, the
// file copied with the fixed line 0.415 (the file is 13 lines; a copy of a
// longer one scores less, its change being longer).
func TestSimilarityRewardsTheChange(t *testing.T) {
	base := map[string]string{"slug.py": slugFile}
	prefixed := func(text, prefix string) []string {
		var out []string
		for _, l := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
			out = append(out, prefix+l)
		}
		return out
	}
	cases := map[string]string{
		"fix":                 slugGold,
		"half-right":          slugDiff(`    return s.lower().replace(" ", "-")`),
		"wrong edit in place": slugDiff(`    return s`),
		"copies the file":     appendDiff(prefixed(slugFile, "")),
		"copies the issue":    appendDiff(prefixed(slugIssue, "# ")),
		"copies file and fix": appendDiff(append(prefixed(slugFile, ""), `    return s.strip().lower().replace(" ", "-")`)),
	}
	for _, withBase := range []bool{true, false} {
		t.Run(fmt.Sprintf("base files %v", withBase), func(t *testing.T) {
			sh := shapingFor(t, slugGold, base, withBase)
			sim := map[string]float64{}
			for name, diff := range cases {
				r := shapeDiff(t, sh, diff, true)
				sim[name] = r.Similarity
			}
			t.Logf("similarities: %v", sim)
			if sim["fix"] != 1 {
				t.Errorf("the gold fix scores %v, want 1", sim["fix"])
			}
			for _, copy := range []string{"copies the file", "copies the issue", "copies file and fix"} {
				if sim[copy] >= sim["half-right"] || sim[copy] >= 0.5 {
					t.Errorf("%s scores %.3f, half-right %.3f: copying the prompt must score low", copy, sim[copy], sim["half-right"])
				}
			}
			if !(sim["wrong edit in place"] < sim["half-right"] && sim["half-right"] < sim["fix"]) {
				t.Errorf("want wrong edit < half-right < fix: %v", sim)
			}
		})
	}
}

// TestChangeTextRewardsTheChange: why context lines are left out. SWE-RL's
// whole diff text gives a wrong edit at the right place about 0.9 for the
// context copied from the prompt; the change alone gives it much less.
func TestChangeTextRewardsTheChange(t *testing.T) {
	wrong := slugDiff(`    return s`)
	hunkText := func(d string) string { return d[strings.Index(d, "@@"):] }
	whole := Ratio(hunkText(wrong), hunkText(slugGold))
	sh := shapingFor(t, slugGold, map[string]string{"slug.py": slugFile}, true)
	change := shapeDiff(t, sh, wrong, true).Similarity
	if whole < 0.85 || change >= 0.75 {
		t.Errorf("wrong edit in place: whole-diff ratio %.3f, change ratio %.3f; want context to dominate the first", whole, change)
	}
}

// shapingFor is the group shaping for an oracle, with or without base files.
func shapingFor(t *testing.T, oracle string, base map[string]string, withBase bool) *shaping {
	t.Helper()
	files, err := parsePatch(oracle)
	if err != nil {
		t.Fatal(err)
	}
	sh := &shaping{oracle: files}
	if withBase {
		sh.base, sh.oracleRes = base, applyPatch(files, base)
	}
	return sh
}

// shapeDiff is the shaped verdict of diff, as applied or not.
func shapeDiff(t *testing.T, sh *shaping, diff string, applied bool) event.Verdict {
	t.Helper()
	p, err := ValidateDiff(diff)
	if err != nil {
		t.Fatalf("%v\n%s", err, diff)
	}
	r := event.Verdict{Phase: config.PhaseApplyOnly, SyntaxOK: true, Patch: diff, ApplyChecked: true, Applied: applied}
	sh.shape(&r, p)
	return r
}

// TestMiniGoldSimilarity: every gold patch of the embedded suite is a no-op
// for none, similar 1 to itself, and applies whole in memory.
func TestMiniGoldSimilarity(t *testing.T) {
	s, err := task.GenerateMini(1, 300, 0.1, "x")
	if err != nil {
		t.Fatal(err)
	}
	for _, mt := range s.Tasks {
		sh := shapingFor(t, mt.Instance.Patch, mt.Files, true)
		r := shapeDiff(t, sh, mt.Instance.Patch, true)
		if r.Noop || r.Similarity != 1 {
			t.Fatalf("%s: gold noop %v similarity %v", mt.Instance.InstanceID, r.Noop, r.Similarity)
		}
		if a, n := HunksApplying(mt.Instance.Patch, mt.Files); a != n || n == 0 {
			t.Fatalf("%s: %d of %d gold hunks apply", mt.Instance.InstanceID, a, n)
		}
	}
}

// TestScorerShaping runs the terms through Scorer with the default
// [reward] weights on a real repository (host apply, files read by git).
func TestScorerShaping(t *testing.T) {
	files := map[string]string{"slug.py": slugFile, "tests/test_slug.py": "def test(): pass\n"}
	dir, commit := makeRepo(t, files)
	inst := scorerInstance("acme/slugs", commit)
	inst.Patch = slugGold
	cfg := config.Default().Reward
	a := &Applier{}
	defer a.Close()
	a.Register("acme/slugs", dir)
	s := &Scorer{Weights: WeightsFrom(cfg), Applier: a}
	wrongHunk := "@@ -1,2 +1,2 @@\n-not in the file\n+x\n \n"
	twoHunks := slugDiff(`    return s.lower().replace(" ", "-")`) + wrongHunk
	noop := "diff --git a/slug.py b/slug.py\n--- a/slug.py\n+++ b/slug.py\n@@ -7,2 +7,2 @@\n" +
		`     """Return s as a URL slug: trimmed, lower case, dashes for spaces."""` + "\n" +
		"-    return s.replace(\" \", \"-\")\n+    return s.replace(\" \", \"-\")  \n"
	hack := "diff --git a/tests/test_slug.py b/tests/test_slug.py\n--- a/tests/test_slug.py\n+++ b/tests/test_slug.py\n@@ -1 +1 @@\n-def test(): pass\n+def test(): assert True\n"
	completions := []string{
		"```diff\n" + slugGold + "```",
		"```diff\n" + twoHunks + "```",
		"```diff\n" + noop + "```",
		"```diff\n" + slugGold + hack + "```",
	}
	rs, err := s.Score(context.Background(), inst, completions, config.PhaseApplyOnly)
	if err != nil {
		t.Fatal(err)
	}
	fix, half, nop, hacked := rs[0], rs[1], rs[2], rs[3]
	// The fix: apply_bonus + test_weight·similarity_weight·1.
	if want := cfg.ApplyBonus + cfg.TestWeight*cfg.SimilarityWeight; !fix.Applied || fix.Similarity != 1 || math.Abs(fix.Reward-want) > 1e-9 {
		t.Errorf("fix: applied %v similarity %v reward %v, want %v", fix.Applied, fix.Similarity, fix.Reward, want)
	}
	// One of two hunks applies: half the hunk credit (A = 0.25), and its
	// similarity from the diff as written, counted as far as it applies.
	if half.Applied || half.HunksApplied != 1 || half.HunksTotal != 2 || half.Similarity <= 0 {
		t.Errorf("two hunks: %+v", half)
	}
	if want := cfg.ApplyBonus*cfg.HunkCredit*0.5 + cfg.TestWeight*cfg.SimilarityWeight*half.Similarity*cfg.HunkCredit*0.5; math.Abs(half.Reward-want) > 1e-9 {
		t.Errorf("two hunks: reward %v, want %v", half.Reward, want)
	}
	if !nop.Applied || !nop.Noop || nop.Reward != 0 {
		t.Errorf("noop: applied %v noop %v reward %v, want applied, flagged, 0", nop.Applied, nop.Noop, nop.Reward)
	}
	if len(hacked.Hacks) == 0 || hacked.Reward != 0 {
		t.Errorf("the fix plus a test edit: hacks %v reward %v, want flagged and 0", hacked.Hacks, hacked.Reward)
	}
	// reject_noop off: the noop is still named, and earns the apply bonus.
	s.Weights.RejectNoop = false
	rs, err = s.Score(context.Background(), inst, completions[2:3], config.PhaseApplyOnly)
	if err != nil || !rs[0].Noop || rs[0].Reward < cfg.ApplyBonus {
		t.Errorf("reject_noop off: %+v, %v", rs, err)
	}
}

// BenchmarkRatio times Ratio on change texts of about 1 KB and 4 KB (the
// size of a small model's patches).
func BenchmarkRatio(b *testing.B) {
	for _, n := range []int{16, 64} {
		x, y := benchText(n, false), benchText(n, true)
		b.Run(fmt.Sprintf("%dB", len(x)), func(b *testing.B) {
			for b.Loop() {
				Ratio(x, y)
			}
		})
	}
}

// benchText is n lines of a change, or of a slightly different one.
func benchText(n int, other bool) string {
	var w strings.Builder
	for i := range n {
		if other {
			fmt.Fprintf(&w, "-    value_%d = compute(items[%d], scale=%d)\n", i, i+i%3, i%5)
		} else {
			fmt.Fprintf(&w, "-    value_%d = compute(items[%d], scale=%d)\n", i, i, i%7)
		}
	}
	return w.String()
}

// TestRatioMatchesGoDifflib: Ratio and go-difflib's SequenceMatcher (the
// line-level diff's) agree on random texts over small alphabets, where
// ties and repeats are many.
func TestRatioMatchesGoDifflib(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := range 300 {
		alpha := []rune("ab \nxé")[:2+n%5]
		gen := func() string {
			r := make([]rune, rng.IntN(60))
			for i := range r {
				r[i] = alpha[rng.IntN(len(alpha))]
			}
			return string(r)
		}
		x, y := gen(), gen()
		split := func(s string) []string {
			var out []string
			for _, c := range s {
				out = append(out, string(c))
			}
			return out
		}
		want := difflib.NewMatcherWithJunk(split(x), split(y), false, nil).Ratio()
		if x == "" && y == "" {
			want = 1
		}
		if got := Ratio(x, y); math.Abs(got-want) > 1e-12 {
			t.Fatalf("Ratio(%q, %q) = %v, go-difflib %v", x, y, got, want)
		}
	}
}
