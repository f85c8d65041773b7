package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/swetui/swetui/app"
	"github.com/swetui/swetui/task"
)

// The default prompt is the run's, byte for byte, and printing it leaves
// no tokenizer behind in run.out_dir.
func TestPromptCommandDefault(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	out := t.TempDir()
	code, stdout, stderr := runCLI(t, "prompt", "--instance", "mini__juniper-0000", "run.out_dir="+out)
	if code != ExitOK {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	cfg := defaultConfig(t)
	cfg.Run.OutDir = t.TempDir()
	ws, err := app.Open(context.Background(), cfg, task.SplitTrain)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := ws.FindInstance(context.Background(), "mini__juniper-0000")
	if err != nil {
		t.Fatal(err)
	}
	want, err := ws.Prompter.Prompt(context.Background(), inst)
	if err != nil {
		t.Fatal(err)
	}
	prompt, summary, ok := strings.Cut(stdout, "--- mini__juniper-0000: ")
	if !ok || prompt != want {
		t.Fatalf("printed prompt\n%q\nwant\n%q", prompt, want)
	}
	for _, s := range []string{"data.prompt = oracle", "shown juniper/report.py", "split train"} {
		if !strings.Contains(summary, s) {
			t.Errorf("summary lacks %q:\n%s", s, summary)
		}
	}
	if entries, _ := os.ReadDir(out); len(entries) != 0 {
		t.Fatalf("swetui prompt wrote into run.out_dir: %v", entries)
	}
}

func TestPromptCommandDataset(t *testing.T) {
	mirrors := t.TempDir()
	repo := filepath.Join(mirrors, "acme__calc")
	if err := os.MkdirAll(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	gitRun(t, repo, "init", "-q")
	var body strings.Builder
	for i := range 40 {
		body.WriteString("def helper_" + string(rune('a'+i%26)) + strings.Repeat("x", i/26) + "(v):\n    return v * 2\n\n\n")
	}
	body.WriteString("def sub(a, b):\n    return a + b\n")
	base := commitAll(t, repo, map[string]string{"calc/ops.py": body.String(), "calc/names.py": "NAMES = ['x']\n",
		"tests/test_ops.py": "from calc.ops import sub\n"}, "base")
	patch := "diff --git a/calc/ops.py b/calc/ops.py\n--- a/calc/ops.py\n+++ b/calc/ops.py\n@@ -161,2 +161,2 @@\n def sub(a, b):\n-    return a + b\n+    return a - b\n"
	inst := func(id, text string) map[string]any {
		return map[string]any{"instance_id": id, "repo": "acme/calc", "base_commit": base, "patch": patch,
			"test_patch":        "diff --git a/tests/test_ops.py b/tests/test_ops.py\n--- a/tests/test_ops.py\n+++ b/tests/test_ops.py\n@@ -1 +1,2 @@\n from calc.ops import sub\n+assert sub(2, 1) == 1\n",
			"problem_statement": "sub() adds its arguments", "FAIL_TO_PASS": []string{"tests/test_ops.py"}, "PASS_TO_PASS": []string{}, "text": text}
	}
	var lines []string
	for _, in := range []map[string]any{inst("acme__calc-1", ""), inst("acme__calc-2", "Solve this issue:\n<issue>sub() adds</issue>\n")} {
		b, _ := json.Marshal(in)
		lines = append(lines, string(b))
	}
	dataset := filepath.Join(t.TempDir(), "tasks.jsonl")
	if err := os.WriteFile(dataset, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	common := []string{"prompt", "--dataset", dataset, "reward.repos_dir=" + mirrors, "run.out_dir=" + t.TempDir(), "model.vocab_size=300"}
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout []string
		stderr string
	}{
		{"bm25 shows the function the issue names", []string{"--instance", "acme__calc-1", "data.prompt=bm25", "data.prompt_tokens=200"}, ExitOK,
			[]string{"def sub(a, b):\n    return a + b", "lines not shown]", "of a 200-token budget (data.prompt_tokens); data.prompt = bm25",
				"shown calc/ops.py: ", "def sub"}, ""},
		{"the text field as is", []string{"--instance", "acme__calc-2", "data.prompt=text"}, ExitOK,
			[]string{"<|im_start|>user\nSolve this issue:\n<issue>sub() adds</issue><|im_end|>", "data.prompt = text"}, ""},
		{"no text field: oracle", []string{"--instance", "acme__calc-1", "data.prompt=text"}, ExitOK,
			[]string{"[calc/ops.py]", "data.prompt = oracle instead of text", "note: no text field"}, ""},
		{"unknown instance", []string{"--instance", "acme__calc-9"}, ExitUsage, nil, `instance "acme__calc-9" is not in ` + dataset},
		{"no instance", nil, ExitUsage, nil, "--instance is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, append(append([]string{}, common...), tt.args...)...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d\n%s\n%s", code, tt.code, stdout, stderr)
			}
			for _, s := range tt.stdout {
				if !strings.Contains(stdout, s) {
					t.Errorf("stdout lacks %q:\n%s", s, stdout)
				}
			}
			if !strings.Contains(stderr, tt.stderr) {
				t.Errorf("stderr lacks %q:\n%s", tt.stderr, stderr)
			}
		})
	}
}
