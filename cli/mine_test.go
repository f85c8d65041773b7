package cli

import (
	"path/filepath"
	"strings"
	"testing"
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
