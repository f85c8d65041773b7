package cli

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/swetui/swetui/sandbox"
)

// TestPrepare runs `swetui prepare` on a dataset file against the real
// engine: an image that is there is reported present; an official SWE-bench
// image cannot be pulled without a registry, and the failure names it and
// its remote name.
func TestPrepare(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	d, err := sandbox.Connect(ctx, "")
	if errors.Is(err, sandbox.ErrUnreachable) {
		t.Skipf("Docker Engine unreachable: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	const present = "swetui/prepare-test:1"
	missing, err := sandbox.Missing(ctx, d, []string{present})
	if err != nil {
		t.Fatal(err)
	}
	if len(missing) > 0 {
		bc := sandbox.TarContext(map[string][]byte{"Dockerfile": []byte("FROM " + sandbox.BaseImage + "\nLABEL purpose=test\n")})
		if err := sandbox.Build(ctx, d, present, bc, "", nil); err != nil {
			t.Fatalf("build %s (is %s there? make setup builds it): %v", present, sandbox.BaseImage, err)
		}
	}
	inst := func(id, image string) string {
		img, repo := "", "o/r"
		if image != "" {
			img = `,"image":"` + image + `"`
		} else if owner, _, ok := strings.Cut(id, "__"); ok {
			repo = owner + "/" + owner // an official SWE-bench repository: its image is pulled
		}
		return `{"instance_id":"` + id + `","repo":"` + repo + `","base_commit":"abc","problem_statement":"p","test_patch":"diff",` +
			`"FAIL_TO_PASS":["t"],"test_cmd":"pytest"` + img + "}\n"
	}
	dir := t.TempDir()
	ok := filepath.Join(dir, "ok.jsonl")
	os.WriteFile(ok, []byte(inst("o__r-1", present)+inst("o__r-2", present)), 0o644)
	nosrc := filepath.Join(dir, "nosrc.jsonl")
	os.WriteFile(nosrc, []byte(`{"instance_id":"acme__w-1","repo":"acme/w","base_commit":"abc","test_patch":"diff","FAIL_TO_PASS":["t"]}`+"\n"), 0o644)
	pull := filepath.Join(dir, "pull.jsonl")
	os.WriteFile(pull, []byte(inst("o__r-1", present)+inst("astropy__astropy-12907", "")), 0o644)

	tests := []struct {
		name           string
		args           []string
		code           int
		stdout, stderr []string
	}{
		{"present", []string{"prepare", "--dataset", ok}, ExitOK,
			[]string{"1 present, 0 built, 0 pulled", present, "image layers on the host"}, []string{"swetui/prepare-test:1 present"}},
		{"pull without a registry", []string{"prepare", "--dataset", pull}, ExitFailure,
			[]string{"1 present, 0 built, 0 pulled"},
			[]string{"sweb.eval.x86_64.astropy__astropy-12907", "swebench/sweb.eval.x86_64.astropy_1776_astropy-12907:latest", "without a registry"}},
		{"no git source", []string{"prepare", "--dataset", nosrc, "reward.repos_dir=" + dir}, ExitFailure, nil,
			[]string{"swetui-repo/acme__w:latest", "no git source for acme/w", filepath.Join(dir, "acme__w"), "prepare.repo_url"}},
		{"unreachable host", []string{"prepare", "--dataset", ok, `sandbox.hosts=["unix:///nonexistent/docker.sock"]`}, ExitFailure,
			nil, []string{"unix:///nonexistent/docker.sock", "start the Docker Engine"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, tc.args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, stdout, stderr)
			}
			for _, w := range tc.stdout {
				if !strings.Contains(stdout, w) {
					t.Errorf("stdout lacks %q:\n%s", w, stdout)
				}
			}
			for _, w := range tc.stderr {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
		})
	}
}
