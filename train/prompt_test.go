package train

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

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
	p := RepoPrompter{RepoDir: func(context.Context, *task.Instance) (string, error) { return dir, nil }}
	got, err := p.Prompt(context.Background(), inst)
	if err != nil {
		t.Fatal(err)
	}
	want := "<|im_start|>system\n" + SystemPrompt + "<|im_end|>\n<|im_start|>user\nadd() subtracts\n\n[calc.py]\ndef add(a, b):\n    return a - b<|im_end|>\n<|im_start|>assistant\n"
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
		if got := CompletionText(identityTokenizer{in}, nil); got != want {
			t.Errorf("%q -> %q, want %q", in, got, want)
		}
	}
}

// identityTokenizer decodes to a fixed text.
type identityTokenizer struct{ text string }

func (identityTokenizer) Encode(string) []int        { return nil }
func (i identityTokenizer) Decode(toks []int) string { return i.text }
