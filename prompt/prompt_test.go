package prompt

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/task"
)

func TestRepoPrompterShowsBaseFiles(t *testing.T) {
	dir := t.TempDir()
	git := func(args ...string) string {
		cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@t"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q")
	if err := os.WriteFile(filepath.Join(dir, "calc.py"), []byte("def add(a, b):\n    return a - b\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git("add", ".")
	git("commit", "-qm", "base")
	base := git("rev-parse", "HEAD")
	// A later commit must not leak into the prompt.
	if err := os.WriteFile(filepath.Join(dir, "calc.py"), []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git("commit", "-qam", "later")

	inst := &task.Instance{InstanceID: "x", BaseCommit: base, ProblemStatement: "add() subtracts\n",
		Patch: "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n"}
	p := Repo{RepoDir: func(context.Context, *task.Instance) (string, error) { return dir, nil }}
	got, err := p.Prompt(context.Background(), inst)
	if err != nil {
		t.Fatal(err)
	}
	want := "<|im_start|>system\n" + System + "<|im_end|>\n<|im_start|>user\nadd() subtracts\n\n[calc.py]\ndef add(a, b):\n    return a - b<|im_end|>\n<|im_start|>assistant\n"
	if got != want {
		t.Fatalf("prompt\n%q\nwant\n%q", got, want)
	}
	p.MaxContextBytes = 10
	got, _ = p.Prompt(context.Background(), inst)
	if !strings.Contains(got, "[calc.py]\ndef add(a,"+TruncationMarker+"<|im_end|>") {
		t.Fatalf("budget not applied: %q", got)
	}
}

func TestCompletionTextDropsTheStopMarker(t *testing.T) {
	tests := map[string]string{
		"```diff\nx\n```<|im_end|>":   "```diff\nx\n```",
		"abc<|endoftext|>":            "abc",
		"cut short, no stop":          "cut short, no stop",
		"<|im_end|> inside<|im_end|>": "<|im_end|> inside",
	}
	for in, want := range tests {
		if got := (ChatFormat{}).CompletionText(identityTokenizer{in}, nil); got != want {
			t.Errorf("%q -> %q, want %q", in, got, want)
		}
	}
}

// chatmlPrompt is the prompt of issue and files in swetui's ChatML.
func chatmlPrompt(issue string, files []CodeFile) string {
	p, err := ChatFormat{}.RenderPrompt(issue, files)
	if err != nil {
		panic(err) // ChatML renders without a template
	}
	return p
}

// identityTokenizer decodes to a fixed text.
type identityTokenizer struct{ text string }

func (identityTokenizer) Encode(string) []int        { return nil }
func (i identityTokenizer) Decode(toks []int) string { return i.text }

// gitRepo commits files into a new repository and returns it and the commit.
func gitRepo(t *testing.T, files map[string]string) (dir, commit string) {
	t.Helper()
	dir = t.TempDir()
	git := func(args ...string) string {
		out, err := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@t"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q")
	for p, text := range files {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git("add", ".")
	git("commit", "-qm", "base")
	return dir, git("rev-parse", "HEAD")
}

// longCalc is a module whose bug is in its last function, past what a
// small budget shows of its start.
func longCalc() string {
	var b strings.Builder
	b.WriteString("import math\n")
	for i := range 30 {
		fmt.Fprintf(&b, "\n\ndef helper_%d(x):\n    \"\"\"Helper number %d.\"\"\"\n    return x * %d + math.pi\n", i, i, i)
	}
	b.WriteString("\n\ndef sub(a, b):\n    \"\"\"sub(3, 1) == 2.\"\"\"\n    return a + b\n")
	return b.String()
}

const subPatch = "diff --git a/pkg/calc.py b/pkg/calc.py\n--- a/pkg/calc.py\n+++ b/pkg/calc.py\n@@ -153,2 +153,2 @@\n def sub(a, b):\n-    return a + b\n+    return a - b\n"

func TestRepoPrompterTokenBudget(t *testing.T) {
	dir, base := gitRepo(t, map[string]string{"pkg/calc.py": longCalc()})
	inst := &task.Instance{InstanceID: "x", BaseCommit: base, ProblemStatement: "sub() adds its arguments instead of subtracting them", Patch: subPatch}
	repo := func(context.Context, *task.Instance) (string, error) { return dir, nil }
	ctx := context.Background()
	count := func(s string) int { return (len(s) + 3) / 4 }
	p := Repo{RepoDir: repo, Budget: 300, Count: count}
	got, err := p.Prompt(ctx, inst)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, "def sub(a, b):\n    \"\"\"sub(3, 1) == 2.\"\"\"\n    return a + b") || !strings.Contains(got, "lines not shown]") {
		t.Fatalf("the function the issue names is not shown:\n%s", got)
	}
	if n := count(got); n > p.Budget {
		t.Fatalf("%d tokens, budget %d", n, p.Budget)
	}
	plan, err := p.Plan(ctx, inst)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Files) != 1 || plan.Files[0].Shown == nil || !slices.Contains(plan.Files[0].Chunks, "def sub") || len(plan.Files[0].Elided) == 0 {
		t.Fatalf("plan %+v", plan)
	}
	// Cut from the end to the same size, the file never gets to sub().
	head, _ := Repo{RepoDir: repo, MaxContextBytes: 4 * 300}.Prompt(ctx, inst)
	if strings.Contains(head, "def sub") {
		t.Fatal("the head cut shows sub()")
	}
	// A budget the whole file fits in shows it whole.
	p.Budget = 4000
	whole, _ := p.Prompt(ctx, inst)
	if want := chatmlPrompt(inst.ProblemStatement, []CodeFile{{Path: "pkg/calc.py", Text: longCalc()}}); whole != want {
		t.Fatalf("whole file:\n%s", whole)
	}
}

func TestRepoPrompterBM25(t *testing.T) {
	dir, base := gitRepo(t, map[string]string{
		"pkg/calc.py":        longCalc(),
		"pkg/text.py":        "def shout(s):\n    return s.upper()\n",
		"pkg/ops.py":         strings.Replace(longCalc(), "def sub(a, b):\n    \"\"\"sub(3, 1) == 2.\"\"\"", "def twice(a, b):\n    # adds a to b", 1),
		"pkg/__init__.py":    "__version__ = '1.0'\n",
		"tests/test_calc.py": "from pkg.calc import sub\n\ndef test_sub():\n    assert sub(3, 1) == 2  # sub subtracts\n",
		"logo.png":           "\x89PNG\x00\x00sub sub sub",
	})
	inst := &task.Instance{InstanceID: "x", BaseCommit: base, ProblemStatement: "sub() adds its arguments instead of subtracting them", Patch: subPatch}
	repo := func(context.Context, *task.Instance) (string, error) { return dir, nil }
	ctx := context.Background()
	p := Repo{RepoDir: repo, Setting: config.PromptBM25, Budget: 4000, Cache: NewCache()}
	got, err := p.Prompt(ctx, inst)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := p.Plan(ctx, inst)
	if err != nil {
		t.Fatal(err)
	}
	var shown []string
	for _, f := range plan.Files {
		shown = append(shown, f.Path)
	}
	// Test files and binaries are no documents; a file sharing no term
	// with the issue is not retrieved.
	if !slices.Equal(shown, []string{"pkg/calc.py", "pkg/ops.py"}) || plan.Files[0].Score <= plan.Files[1].Score {
		t.Fatalf("shown %v (%+v)", shown, plan.Files)
	}
	again, err := p.Prompt(ctx, inst)
	if err != nil || again != got {
		t.Fatalf("the cached prompt differs (%v):\n%s\nfirst:\n%s", err, again, got)
	}
	// A small budget cuts the best file to its relevant chunks and stops.
	p = Repo{RepoDir: repo, Setting: config.PromptBM25, Budget: 120}
	plan, err = p.Plan(ctx, inst)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Files) != 1 || !slices.Contains(plan.Files[0].Chunks, "def sub") || !slices.Equal(plan.NotShown, []string{"pkg/ops.py"}) {
		t.Fatalf("plan %+v", plan)
	}
	if _, err := (Repo{RepoDir: repo, Setting: config.PromptBM25}).Prompt(ctx, inst); err == nil || !strings.Contains(err.Error(), "needs a token budget") {
		t.Fatalf("bm25 without a budget: %v", err)
	}
}

func TestTextPrompter(t *testing.T) {
	dir, base := gitRepo(t, map[string]string{"pkg/calc.py": "def sub(a, b):\n    return a + b\n"})
	oracle := Repo{RepoDir: func(context.Context, *task.Instance) (string, error) { return dir, nil }, Budget: 500}
	p := Text{Fallback: oracle}
	ctx := context.Background()
	inst := &task.Instance{InstanceID: "x", BaseCommit: base, ProblemStatement: "sub() adds", Patch: subPatch,
		Text: "You will be provided with a partial code base and an issue statement.\n<issue>sub() adds</issue>\n"}
	got, err := p.Prompt(ctx, inst)
	if err != nil || got != chatmlPrompt(inst.Text, nil) {
		t.Fatalf("%v\n%s", err, got)
	}
	if plan, _ := p.Plan(ctx, inst); plan.Setting != config.PromptText || plan.Note != "" {
		t.Fatalf("plan %+v", plan)
	}
	inst.Text = ""
	got, err = p.Prompt(ctx, inst)
	want, _ := oracle.Prompt(ctx, inst)
	if err != nil || got != want || !strings.Contains(got, "[pkg/calc.py]") {
		t.Fatalf("fallback %v\n%s", err, got)
	}
	if plan, _ := p.Plan(ctx, inst); plan.Setting != config.PromptOracle || plan.Note != TextFallback {
		t.Fatalf("plan %+v", plan)
	}
	if _, ok := Prompter(p).(FileLister); ok {
		t.Fatal("a text prompter lists files: the warm start would render their prompts from the issue")
	}
}

func TestFairShares(t *testing.T) {
	tests := []struct {
		costs []int
		room  int
		want  []int
	}{
		{[]int{10, 20}, 100, []int{10, 20}},             // all fit
		{[]int{1000, 10}, 100, []int{90, 10}},           // the small one whole, the big one the rest
		{[]int{1000, 60, 1000}, 120, []int{40, 40, 40}}, // even when none fits its share
		{[]int{math.MaxInt, 5}, 50, []int{45, 5}},       // too long to count
		{[]int{7}, -3, []int{0}},
	}
	for _, tt := range tests {
		if got := fairShares(tt.costs, tt.room); !slices.Equal(got, tt.want) {
			t.Errorf("fairShares(%v, %d) = %v, want %v", tt.costs, tt.room, got, tt.want)
		}
	}
}

// Every gold file is shown: a short one whole, before or after a long one
// cut to its chunks.
func TestRepoPrompterOracleShares(t *testing.T) {
	dir, base := gitRepo(t, map[string]string{"pkg/calc.py": longCalc(), "pkg/version.py": "VERSION = '1.0'\n"})
	patch := subPatch + "diff --git a/pkg/version.py b/pkg/version.py\n--- a/pkg/version.py\n+++ b/pkg/version.py\n@@ -1 +1 @@\n-VERSION = '1.0'\n+VERSION = '1.1'\n"
	inst := &task.Instance{InstanceID: "x", BaseCommit: base, ProblemStatement: "sub() adds", Patch: patch}
	p := Repo{RepoDir: func(context.Context, *task.Instance) (string, error) { return dir, nil }, Budget: 300}
	plan, err := p.Plan(context.Background(), inst)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Files) != 2 || plan.Files[0].Shown == nil || !slices.Contains(plan.Files[0].Chunks, "def sub") || plan.Files[1].Shown != nil {
		t.Fatalf("plan %+v", plan)
	}
}
