package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"

	"github.com/swetui/swetui/app"
	"github.com/swetui/swetui/internal/realdata"
	"github.com/swetui/swetui/sandbox"
	"github.com/swetui/swetui/task"
)

// realReposDataset is the dataset `swetui mine` made from the real
// repositories' bundles (internal/realdata; docs/datasets.md: "Mining tasks from a
// repository").
const realReposDataset = "../task/testdata/realrepos.jsonl"

// realReposDocker connects to the local engine: a test that needs it skips
// without it, except under CI=true, which always has one.
func realReposDocker(ctx context.Context, t *testing.T) *client.Client {
	t.Helper()
	d, err := sandbox.Connect(ctx, "")
	if errors.Is(err, sandbox.ErrUnreachable) && os.Getenv("CI") != "true" {
		t.Skipf("Docker Engine unreachable: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// TestRealReposDataset checks the mined dataset end to end on the real
// repositories: clones of the four bundles as reward.repos_dir, `swetui
// prepare` builds one image a repository at the instances' base commits,
// then every gold patch resolves in docker mode (those that also edit
// tox.ini, setup.cfg or pyproject.toml included: the reset restores those
// files, so their flag costs nothing). On a sample of three instances per
// repository: neither an empty patch nor one that fixes nothing resolves; a
// setup that resets the tree (which would wipe both patches and grade the
// old tests) resolves nothing and says why; the same command as repo_setup,
// run before the patch, resolves every gold patch again.
func TestRealReposDataset(t *testing.T) {
	if testing.Short() {
		t.Skip("builds images and runs containers")
	}
	bundles := filepath.Join(realdata.Dir(t), "repos")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	d := realReposDocker(ctx, t)
	if m, err := sandbox.Missing(ctx, d, []string{sandbox.BaseImage}); err != nil || len(m) > 0 {
		t.Fatalf("base image %s missing (make setup builds it): %v", sandbox.BaseImage, err)
	}
	start := time.Now()

	var insts []task.Instance
	if err := task.Scan(ctx, realReposDataset, func(in task.Instance) error {
		insts = append(insts, in)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	repos := map[string]bool{}
	test := 0
	for _, in := range insts {
		repos[in.Repo] = true
		if in.Split == task.SplitTest {
			test++
		}
	}
	if len(insts) < 30 || len(repos) < 3 || test == 0 || test == len(insts) {
		t.Fatalf("dataset: %d instances of %d repositories, %d in the test split", len(insts), len(repos), test)
	}

	reposDir := t.TempDir()
	var images []string
	for repo := range repos {
		name := task.RepoDirName(repo)
		gitRun(t, reposDir, "clone", "-q", "--bare", filepath.Join(bundles, name+".bundle"), filepath.Join(reposDir, name))
		images = append(images, task.RepoImageName(repo))
	}
	sort.Strings(images)
	t.Cleanup(func() {
		for _, im := range images {
			_, _ = d.ImageRemove(context.Background(), im, image.RemoveOptions{Force: true, PruneChildren: true})
		}
	})
	overrides := []string{"reward.repos_dir=" + reposDir, "sandbox.workers=2"}
	code, stdout, stderr := runCLI(t, append([]string{"prepare", "--dataset", realReposDataset}, overrides...)...)
	if code != ExitOK {
		t.Fatalf("prepare: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, im := range images {
		if !strings.Contains(stdout, im) {
			t.Errorf("prepare did not report %s:\n%s", im, stdout)
		}
	}
	t.Logf("clones and prepare: %s", time.Since(start).Round(time.Second))

	dir := t.TempDir()
	// The gold patches resolve on every instance; the cases that must
	// resolve nothing, or that vary the setup, run on a sample with every
	// repository in it (each instance is a container start on the 2-core CI
	// box: all five cases on all instances took over six minutes there).
	sample := sampleByRepo(insts, 3)
	sampleDataset := filepath.Join(dir, "sample.jsonl")
	writeJSONL(t, sampleDataset, sample)
	// A patch that applies and fixes nothing: a note beside the code.
	noFix := filepath.Join(dir, "nofix.jsonl")
	var lines []string
	for _, in := range sample {
		b, _ := json.Marshal(map[string]string{"instance_id": in.InstanceID, "model_name_or_path": "nofix",
			"model_patch": "diff --git a/SWETUI_NOTE.txt b/SWETUI_NOTE.txt\nnew file mode 100644\n--- /dev/null\n+++ b/SWETUI_NOTE.txt\n@@ -0,0 +1 @@\n+looked at it\n"})
		lines = append(lines, string(b))
	}
	if err := os.WriteFile(noFix, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The dataset as someone would write "start from the base commit":
	// in setup, which runs after the patches, or in repo_setup, before.
	withReset := func(name string, asRepoSetup bool) string {
		var out []task.Instance
		for _, in := range sample {
			reset := "git checkout -qf " + in.BaseCommit + " && git clean -qfdx"
			if asRepoSetup {
				in.RepoSetup = reset
			} else {
				in.Setup = strings.TrimSpace(reset + "\n" + in.Setup)
			}
			out = append(out, in)
		}
		p := filepath.Join(dir, name)
		writeJSONL(t, p, out)
		return p
	}
	tests := []struct {
		name, preds, dataset string
		total                int
		resolved, infra      int
	}{
		{"gold", "gold", realReposDataset, len(insts), len(insts), 0},
		{"empty", "empty", sampleDataset, len(sample), 0, 0},
		{"no fix", noFix, sampleDataset, len(sample), 0, 0},
		{"setup resets the tree", "gold", withReset("setup-reset.jsonl", false), len(sample), 0, len(sample)},
		{"repo_setup resets the tree", "gold", withReset("repo-setup-reset.jsonl", true), len(sample), len(sample), 0},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			begin := time.Now()
			out := filepath.Join(dir, fmt.Sprintf("%d.report.json", i))
			code, stdout, stderr := runCLI(t, append([]string{"score", "--predictions", tt.preds, "--dataset", tt.dataset,
				"--phase", "docker", "--out", out}, overrides...)...)
			// score fails when every evaluation failed for infrastructure
			// reasons, and still writes its report.
			if want := map[bool]int{false: ExitOK, true: ExitFailure}[tt.infra == tt.total]; code != want {
				t.Fatalf("score: exit %d, want %d\n%s\n%s", code, want, stdout, stderr)
			}
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			var rep app.ScoreReport
			if err := json.Unmarshal(b, &rep); err != nil {
				t.Fatal(err)
			}
			s := rep.Summary
			if tt.infra > 0 && !strings.Contains(stdout, "move") && !strings.Contains(stdout, "repo_setup") {
				t.Errorf("score's summary does not say what to do about the setup:\n%s", stdout)
			}
			if s.Resolved != tt.resolved || s.Infra != tt.infra || s.Total != tt.total {
				for _, e := range rep.Instances {
					if e.Verdict == nil || e.Resolved == (tt.resolved > 0) {
						continue
					}
					v := e.Verdict
					t.Errorf("%s: resolved %v, applied %v, F2P %d/%d, P2P broken %d, hack flags %v, infra %q, tests error %q",
						e.InstanceID, e.Resolved, v.Applied, v.F2PPassed, v.F2PTotal, v.P2PBroken, e.HackFlags, v.InfraCause, v.TestsError)
				}
				t.Fatalf("summary %+v, want %d resolved of %d and %d infrastructure failures\n%s", s, tt.resolved, tt.total, tt.infra, stdout)
			}
			if tt.infra > 0 {
				for _, e := range rep.Instances {
					if v := e.Verdict; v == nil || !strings.Contains(v.InfraCause, e.InstanceID) || !strings.Contains(v.InfraCause, "setup") {
						t.Errorf("%s: infra cause %q does not name the instance and the setup", e.InstanceID, v.InfraCause)
					}
				}
			}
			t.Logf("score %s: %s", tt.name, time.Since(begin).Round(time.Second))
		})
	}
}

// sampleByRepo keeps the first n instances of each repository, in order.
func sampleByRepo(insts []task.Instance, n int) []task.Instance {
	per := map[string]int{}
	var out []task.Instance
	for _, in := range insts {
		if per[in.Repo] < n {
			per[in.Repo]++
			out = append(out, in)
		}
	}
	return out
}
