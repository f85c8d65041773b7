package cli

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/swetui/swetui/task"
)

// A dataset whose repository exists only inside its image: the host-side
// apply check copies the repository out of the image once and gives the
// container's verdict.
func TestScoreApplyFillsFromTheImage(t *testing.T) {
	if err := exec.Command("docker", "image", "inspect", "swetui/base:bookworm").Run(); err != nil {
		t.Skip("no Docker or no base image (make setup builds it)")
	}
	dir := t.TempDir()
	ctxDir := filepath.Join(dir, "ctx")
	if err := os.MkdirAll(filepath.Join(ctxDir, "repo"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(ctxDir, "repo", "calc.py"), []byte("def add(a, b):\n    return a - b\n"), 0o644)
	os.WriteFile(filepath.Join(ctxDir, "Dockerfile"), []byte("FROM swetui/base:bookworm\nCOPY repo/ /testbed/\n"+
		"RUN cd /testbed && git init -q && git add -A && git -c user.email=t@t -c user.name=t commit -qm base\n"), 0o644)
	image := "swetui/cli-fill-test:1"
	if out, err := exec.Command("docker", "build", "-q", "-t", image, ctxDir).CombinedOutput(); err != nil {
		t.Fatalf("docker build: %v\n%s", err, out)
	}
	head, err := exec.Command("docker", "run", "--rm", "--network", "none", image, "git", "-C", "/testbed", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("rev-parse: %v", err)
	}
	gold := "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n"
	inst := task.Instance{InstanceID: "fill__calc-1", Repo: "fill/calc", BaseCommit: strings.TrimSpace(string(head)),
		ProblemStatement: "add subtracts", Patch: gold, TestPatch: gold, FailToPass: task.TestList{"t::x"},
		Image: image, TestCmd: "true", LogParser: "pytest"}
	line, _ := json.Marshal(inst)
	dataset := filepath.Join(dir, "data.jsonl")
	os.WriteFile(dataset, append(line, '\n'), 0o644)
	out := filepath.Join(dir, "report.json")
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	code, stdout, stderr := runCLI(t, "score", "--predictions", "gold", "--dataset", dataset, "--mode", "apply-only", "--out", out)
	if code != ExitOK {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	rep := readScoreReport(t, out)
	if rep.Summary.Applied != 1 || rep.Summary.Infra != 0 || rep.Instances[0].Verdict == nil || !rep.Instances[0].Verdict.ApplyOnHost {
		t.Fatalf("gold did not apply on the host from the image's copy: %+v %+v", rep.Summary, rep.Instances[0].Verdict)
	}
}
