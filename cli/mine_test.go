package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/image"

	"github.com/swetui/swetui/app"
)

// TestMineDryRun checks `swetui mine`'s flags and its dry run, which lists
// the candidate commits of a generated repository without Docker.
func TestMineDryRun(t *testing.T) {
	root := t.TempDir()
	repo := filepath.Join(root, "acme__calc")
	gitRun(t, root, "init", "-q", "-b", "main", repo)
	commitAll(t, repo, map[string]string{"calc.py": "def add(a, b):\n    return a - b\n", "tests/test_calc.py": "import calc\n"}, "initial")
	fix := commitAll(t, repo, map[string]string{"calc.py": "def add(a, b):\n    return a + b\n", "tox.ini": "[tox]\n",
		"tests/test_calc.py": "import calc\n\n\ndef test_add():\n    assert calc.add(1, 2) == 3\n"}, "fix add")
	commitAll(t, repo, map[string]string{"README.md": "calc\n"}, "docs")

	tests := []struct {
		name   string
		args   []string
		code   int
		stdout []string
		stderr string
	}{
		{"dry run", []string{"--repo", repo, "--dry-run"}, ExitOK,
			[]string{"acme__calc-" + fix[:7] + "  ", "fix add  patch: calc.py tox.ini  tests: tests/test_calc.py  packaging: tox.ini",
				"commits 3, candidates 1, verified 0, kept 0", "skipped     1  changes no test file", "skipped     1  root commit"}, ""},
		{"name given", []string{"--repo", repo, "--name", "other/calc", "--dry-run", "--history", "all"}, ExitOK,
			[]string{"other__calc-" + fix[:7]}, ""},
		{"no repo", []string{"--dry-run"}, ExitUsage, nil, "--repo is required"},
		{"no owner in the folder name", []string{"--repo", root, "--dry-run"}, ExitUsage, nil, "--name is required"},
		{"bad name", []string{"--repo", repo, "--name", "calc", "--dry-run"}, ExitUsage, nil, "want owner/name"},
		{"spec table repository", []string{"--repo", repo, "--name", "psf/requests", "--dry-run"}, ExitUsage, nil, "the spec table knows"},
		{"bad history", []string{"--repo", repo, "--history", "sideways"}, ExitUsage, nil, "--history"},
		{"bad override", []string{"--repo", repo, "--dry-run", "sandbox.nope=1"}, ExitUsage, nil, "sandbox.nope"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, append([]string{"mine"}, tt.args...)...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.code, stdout, stderr)
			}
			for _, w := range tt.stdout {
				if !strings.Contains(stdout, w) {
					t.Errorf("stdout lacks %q:\n%s", w, stdout)
				}
			}
			if !strings.Contains(stderr, tt.stderr) {
				t.Errorf("stderr lacks %q:\n%s", tt.stderr, stderr)
			}
		})
	}
}

// `swetui mine` verifies a candidate in Docker for real: the mining image
// built from the repository's history, the tests run before and after the
// fix, the instance kept with its FAIL_TO_PASS test and written.
func TestMineVerifies(t *testing.T) {
	d := serveDocker(t)
	root := t.TempDir()
	repo := filepath.Join(root, "acme__calc")
	gitRun(t, root, "init", "-q", "-b", "main", repo)
	commitAll(t, repo, map[string]string{"calc.py": "def add(a, b):\n    return a - b\n", "tests/test_calc.py": "import calc\n\n\ndef test_zero():\n    assert calc.add(0, 0) == 0\n"}, "initial")
	commitAll(t, repo, map[string]string{"calc.py": "def add(a, b):\n    return a + b\n",
		"tests/test_calc.py": "import calc\n\n\ndef test_zero():\n    assert calc.add(0, 0) == 0\n\n\ndef test_add():\n    assert calc.add(1, 2) == 3\n"}, "fix add")
	t.Cleanup(func() {
		_, _ = d.ImageRemove(context.Background(), app.MineImage("acme/calc"), image.RemoveOptions{Force: true, PruneChildren: true})
	})
	out := filepath.Join(root, "mined.jsonl")
	code, stdout, stderr := runCLI(t, "mine", "--repo", repo, "--out", out)
	if code != ExitOK || !strings.Contains(stdout, "kept 1") {
		t.Fatalf("mine: exit %d\n%s%s", code, stdout, stderr)
	}
	b, err := os.ReadFile(out)
	if err != nil || !strings.Contains(string(b), `"FAIL_TO_PASS"`) || !strings.Contains(string(b), "tests/test_calc.py::test_add") {
		t.Errorf("the mined dataset (%v):\n%s", err, b)
	}
}
