package cli

import (
	"context"
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
	d := localDocker(ctx, t)
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

// TestPrepareDryRun shows the plan for a minimal dataset without a Docker
// host: what each image is built from, the registry's part, and the fields
// derived for each instance.
func TestPrepareDryRun(t *testing.T) {
	reposDir := t.TempDir()
	dataset := writeDataset(t, byotDataset(t, reposDir, "dry"))
	calcMirror := filepath.Join(reposDir, "dry__calc")
	tests := []struct {
		name      string
		overrides []string
		want      []string
	}{
		{"defaults", nil, []string{"3 instance(s), 2 image(s)", "image swetui-repo/dry__calc:latest",
			"build FROM swetui/base:bookworm: " + calcMirror + " at /testbed (2 base commit(s))", "instances: dry__calc-1, dry__calc-2",
			"image swetui-repo/dry__strs:latest", "directives  tests/test_calc.py  (derived)", "image       swetui-repo/dry__calc:latest  (derived)"}},
		{"registry and push", []string{"prepare.registry=127.0.0.1:5000/swe", "prepare.push=true"}, []string{
			"pull 127.0.0.1:5000/swe/swetui-repo/dry__calc:latest if there, else build FROM",
			"then push 127.0.0.1:5000/swe/swetui-repo/dry__calc:latest"}},
		{"an image per instance, full history", []string{"prepare.image_per=instance", "prepare.history=full"}, []string{
			"3 instance(s), 3 image(s)", "image sweb.eval.x86_64.dry__calc-1:latest", "full history, 1 base commit(s) checked"}},
		{"a URL for what the mirrors lack", []string{"reward.repos_dir=" + t.TempDir(), "prepare.repo_url=https://git.example.com/{repo}.git"},
			[]string{"build FROM swetui/base:bookworm: https://git.example.com/dry/calc.git at /testbed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"prepare", "--dry-run", "--dataset", dataset, "reward.repos_dir=" + reposDir, `sandbox.hosts=["unix:///nonexistent.sock"]`}, tt.overrides...)
			code, stdout, stderr := runCLI(t, args...)
			if code != ExitOK {
				t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(stdout, w) {
					t.Errorf("dry run lacks %q:\n%s", w, stdout)
				}
			}
		})
	}
}
