package cli

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"

	"github.com/swetui/swetui/internal/realdata"
	"github.com/swetui/swetui/sandbox"
	"github.com/swetui/swetui/task"
)

// realReposDataset is the dataset `swetui mine` made from the bundles in
// shared/realdata/repos (README: "Mining tasks from a repository").
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
// then every gold patch resolves in docker mode and no empty patch does.
//
// Gold patches that change tox.ini, setup.cfg or pyproject.toml test
// settings are flagged touches_test_config by reward.HackFlags, and a
// flagged patch is not resolved until the scorer stops counting that flag
// against packaging fixes (reward/hacks.go, reward/scorer.go): until then
// this test fails on those instances and names them.
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
	tests := []struct {
		preds    string
		resolved int
	}{
		{"gold", len(insts)},
		{"empty", 0},
	}
	for _, tt := range tests {
		t.Run(tt.preds, func(t *testing.T) {
			begin := time.Now()
			out := filepath.Join(dir, tt.preds+".report.json")
			code, stdout, stderr := runCLI(t, append([]string{"score", "--predictions", tt.preds, "--dataset", realReposDataset,
				"--phase", "docker", "--out", out}, overrides...)...)
			if code != ExitOK {
				t.Fatalf("score: exit %d\n%s\n%s", code, stdout, stderr)
			}
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			var rep scoreReport
			if err := json.Unmarshal(b, &rep); err != nil {
				t.Fatal(err)
			}
			s := rep.Summary
			if s.Resolved != tt.resolved || s.Infra != 0 || s.Total != len(insts) {
				for _, e := range rep.Instances {
					if e.Verdict == nil || e.Resolved == (tt.resolved > 0) {
						continue
					}
					v := e.Verdict
					t.Errorf("%s: resolved %v, applied %v, F2P %d/%d, P2P broken %d, hack flags %v, infra %q, tests error %q",
						e.InstanceID, e.Resolved, v.Applied, v.F2PPassed, v.F2PTotal, v.P2PBroken, e.HackFlags, v.InfraCause, v.TestsError)
				}
				t.Fatalf("summary %+v, want %d resolved of %d and no infrastructure failure\n%s", s, tt.resolved, len(insts), stdout)
			}
			t.Logf("score %s: %s", tt.preds, time.Since(begin).Round(time.Second))
		})
	}
}
