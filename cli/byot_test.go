package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"

	"github.com/swetui/swetui/app"
	"github.com/swetui/swetui/sandbox"
	"github.com/swetui/swetui/task"
)

// gitRun runs git in dir with a fixed identity, failing the test on error.
func gitRun(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid", "GIT_COMMITTER_NAME=t",
		"GIT_COMMITTER_EMAIL=t@example.invalid", "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// commitAll writes files into dir and commits them, returning the commit.
func commitAll(t *testing.T, dir string, files map[string]string, msg string) string {
	t.Helper()
	for p, c := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gitRun(t, dir, "add", "-A")
	gitRun(t, dir, "commit", "-q", "-m", msg)
	return gitRun(t, dir, "rev-parse", "HEAD")
}

// diffOf is the git diff that turns the work tree's files into files,
// leaving the tree as it was.
func diffOf(t *testing.T, dir string, files map[string]string) string {
	t.Helper()
	old := map[string]*string{}
	for p := range files {
		if b, err := os.ReadFile(filepath.Join(dir, p)); err == nil {
			s := string(b)
			old[p] = &s
		} else {
			old[p] = nil
		}
	}
	for p, c := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gitRun(t, dir, "add", "-A", "-N")
	d := gitRun(t, dir, "diff") + "\n"
	for p, o := range old {
		if o == nil {
			os.Remove(filepath.Join(dir, p))
		} else {
			os.WriteFile(filepath.Join(dir, p), []byte(*o), 0o644)
		}
	}
	gitRun(t, dir, "reset", "-q")
	return d
}

type minimalInstance struct {
	InstanceID string   `json:"instance_id"`
	Repo       string   `json:"repo"`
	BaseCommit string   `json:"base_commit"`
	Patch      string   `json:"patch"`
	TestPatch  string   `json:"test_patch"`
	F2P        []string `json:"FAIL_TO_PASS"`
	P2P        []string `json:"PASS_TO_PASS"`
}

// byotDataset writes two generated repositories into reposDir, the first a
// work tree with two instances at different base commits (one image for
// the repository), the second a bare mirror with one instance, and returns
// the instances with only the minimal fields.
func byotDataset(t *testing.T, reposDir, owner string) []minimalInstance {
	t.Helper()
	calcRepo := owner + "/calc"
	calc := filepath.Join(reposDir, task.RepoDirName(calcRepo))
	gitRun(t, reposDir, "init", "-q", "-b", "main", calc)
	testsV0 := "from calc import sub\n\n\ndef test_sub():\n    assert sub(5, 3) == 2\n"
	c0 := commitAll(t, calc, map[string]string{
		"calc.py":             "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n",
		"tests/test_calc.py":  testsV0,
		"README.md":           "calc\n",
		"tests/data/keep.txt": "data\n",
	}, "c0")
	fixAdd := map[string]string{"calc.py": "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"}
	testAdd := map[string]string{"tests/test_calc.py": "from calc import add, sub\n\n\ndef test_sub():\n    assert sub(5, 3) == 2\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"}
	inst1 := minimalInstance{InstanceID: owner + "__calc-1", Repo: calcRepo, BaseCommit: c0,
		Patch: diffOf(t, calc, fixAdd), TestPatch: diffOf(t, calc, testAdd),
		F2P: []string{"tests/test_calc.py::test_add"}, P2P: []string{"tests/test_calc.py::test_sub"}}
	// Upstream fixed add (with its test) and then wrote a buggy mul.
	commitAll(t, calc, fixAdd, "fix add")
	commitAll(t, calc, testAdd, "test add")
	withMul := fixAdd["calc.py"] + "\n\ndef mul(a, b):\n    return a * b + 1\n"
	c1 := commitAll(t, calc, map[string]string{"calc.py": withMul}, "mul")
	fixMul := map[string]string{"calc.py": strings.Replace(withMul, "a * b + 1", "a * b", 1)}
	testMul := map[string]string{"tests/test_calc.py": testAdd["tests/test_calc.py"] + "\n\ndef test_mul():\n    from calc import mul\n    assert mul(2, 3) == 6\n"}
	inst2 := minimalInstance{InstanceID: owner + "__calc-2", Repo: calcRepo, BaseCommit: c1,
		Patch: diffOf(t, calc, fixMul), TestPatch: diffOf(t, calc, testMul),
		F2P: []string{"tests/test_calc.py::test_mul"}, P2P: []string{"tests/test_calc.py::test_sub", "tests/test_calc.py::test_add"}}
	// A later commit the instances do not need: a base-commit image leaves it out.
	commitAll(t, calc, map[string]string{"README.md": "calc, later\n"}, "later")

	strsRepo := owner + "/strs"
	work := filepath.Join(t.TempDir(), "strs")
	gitRun(t, reposDir, "init", "-q", "-b", "main", work)
	s0 := commitAll(t, work, map[string]string{
		"strs.py":            "def shout(s):\n    return s.lower() + '!'\n",
		"test_strs.py":       "import strs\n\n\ndef test_module():\n    assert strs.__name__ == 'strs'\n",
		"tests/__init__.py":  "",
		"tests/test_more.py": "def test_true():\n    assert True\n",
	}, "s0")
	inst3 := minimalInstance{InstanceID: owner + "__strs-1", Repo: strsRepo, BaseCommit: s0,
		Patch:     diffOf(t, work, map[string]string{"strs.py": "def shout(s):\n    return s.upper() + '!'\n"}),
		TestPatch: diffOf(t, work, map[string]string{"test_strs.py": "import strs\n\n\ndef test_module():\n    assert strs.__name__ == 'strs'\n\n\ndef test_shout():\n    assert strs.shout('hi') == 'HI!'\n"}),
		F2P:       []string{"test_strs.py::test_shout"}, P2P: []string{"test_strs.py::test_module"}}
	gitRun(t, reposDir, "clone", "-q", "--bare", work, filepath.Join(reposDir, task.RepoDirName(strsRepo)))
	return []minimalInstance{inst1, inst2, inst3}
}

// writeDataset writes instances as a .jsonl dataset and returns its path.
func writeDataset(t *testing.T, insts []minimalInstance) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tasks.jsonl")
	writeJSONL(t, path, insts)
	return path
}

// writeJSONL writes items to path, one JSON object a line.
func writeJSONL[T any](t *testing.T, path string, items []T) {
	t.Helper()
	var lines []string
	for _, it := range items {
		b, err := json.Marshal(it)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, string(b))
	}
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// localDocker connects to the local engine, skipping the test when it does
// not answer; the client closes when the test ends.
func localDocker(ctx context.Context, t *testing.T) *client.Client {
	t.Helper()
	d, err := sandbox.Connect(ctx, "")
	if errors.Is(err, sandbox.ErrUnreachable) {
		t.Skipf("Docker Engine unreachable: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// TestBringYourOwnTasks is the acceptance path: a dataset of only
// the minimal fields, from generated repositories whose mirrors are on disk
// and of which no image exists, goes through `swetui prepare` and then
// `swetui score --mode docker`: gold resolves every task, empty and no-op
// patches none.
func TestBringYourOwnTasks(t *testing.T) {
	if testing.Short() {
		t.Skip("builds images and runs containers")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	d := localDocker(ctx, t)
	if m, err := sandbox.Missing(ctx, d, []string{sandbox.BaseImage}); err != nil || len(m) > 0 {
		t.Fatalf("base image %s missing (make setup builds it): %v", sandbox.BaseImage, err)
	}
	owner := fmt.Sprintf("byot%d", os.Getpid())
	reposDir := t.TempDir()
	insts := byotDataset(t, reposDir, owner)
	dir := t.TempDir()
	dataset := writeDataset(t, insts)
	// The strs repository installs something, so auto gives it an image per
	// instance; calc shares one image between its two instances.
	overrides := []string{"reward.repos_dir=" + reposDir, fmt.Sprintf(`prepare.install=["%s/strs: python3 -m compileall -q ."]`, owner)}
	images := []string{task.RepoImageName(owner + "/calc"), task.InstanceImageName(owner + "__strs-1")}
	t.Cleanup(func() {
		for _, im := range images {
			_, _ = d.ImageRemove(context.Background(), im, image.RemoveOptions{Force: true, PruneChildren: true})
		}
	})

	code, stdout, stderr := runCLI(t, append([]string{"prepare", "--dry-run", "--dataset", dataset}, overrides...)...)
	for _, want := range []string{"3 instance(s), 2 image(s)", "image " + images[0], "image " + images[1], "2 base commit(s)",
		"install: python3 -m compileall -q .", "    runs        python3 -m pytest -rA tests/test_calc.py", "test_cmd    python3 -m pytest -rA  (derived)",
		"log_parser  pytest  (derived)", "    checkout    " + insts[0].BaseCommit + " before the patch  (derived)"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("dry run lacks %q:\n%s", want, stdout)
		}
	}
	if code != ExitOK {
		t.Fatalf("dry run: exit %d\n%s\n%s", code, stdout, stderr)
	}

	code, stdout, stderr = runCLI(t, append([]string{"prepare", "--dataset", dataset}, overrides...)...)
	if code != ExitOK || !strings.Contains(stdout, "0 present, 2 built") {
		t.Fatalf("prepare: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	code, stdout, _ = runCLI(t, append([]string{"prepare", "--dataset", dataset}, overrides...)...)
	if code != ExitOK || !strings.Contains(stdout, "2 present, 0 built") {
		t.Fatalf("second prepare: exit %d, want every image present:\n%s", code, stdout)
	}

	noop := filepath.Join(dir, "noop.jsonl")
	var preds []string
	for _, in := range insts {
		patch := "diff --git a/NOTES.txt b/NOTES.txt\nnew file mode 100644\n--- /dev/null\n+++ b/NOTES.txt\n@@ -0,0 +1 @@\n+a note\n"
		b, _ := json.Marshal(map[string]string{"instance_id": in.InstanceID, "model_name_or_path": "noop", "model_patch": patch})
		preds = append(preds, string(b))
	}
	if err := os.WriteFile(noop, []byte(strings.Join(preds, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		preds    string
		resolved int
		applied  int
	}{
		{"gold", 3, 3},
		{"empty", 0, 0},
		{noop, 0, 3},
	}
	for _, tt := range tests {
		t.Run(filepath.Base(tt.preds), func(t *testing.T) {
			out := filepath.Join(dir, filepath.Base(tt.preds)+".report.json")
			code, stdout, stderr := runCLI(t, append([]string{"score", "--predictions", tt.preds, "--dataset", dataset,
				"--mode", "docker", "--out", out, "sandbox.workers=2"}, overrides...)...)
			if code != ExitOK {
				t.Fatalf("score: exit %d\n%s\n%s", code, stdout, stderr)
			}
			var rep app.ScoreReport
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &rep); err != nil {
				t.Fatal(err)
			}
			s := rep.Summary
			if s.Resolved != tt.resolved || s.Infra != 0 || s.Applied != tt.applied || s.Total != 3 {
				for _, e := range rep.Instances {
					if e.Verdict != nil {
						t.Logf("%s: resolved %v applied %v infra %q status %+v", e.InstanceID, e.Resolved, e.Verdict.Applied, e.Verdict.InfraCause, e.TestsStatus)
					}
				}
				t.Fatalf("summary %+v, want %d resolved, %d applied, no infra failure\n%s", s, tt.resolved, tt.applied, stdout)
			}
		})
	}
}
