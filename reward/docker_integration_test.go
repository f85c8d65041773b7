package reward

// Integration tests against the real Docker Engine, through sandbox's pool
// and eval script. They skip only when the daemon is unreachable; a missing
// base image (make setup builds it) fails.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/sandbox"
	"github.com/swetui/swetui/task"
)

// The image's repository: applyFiles plus a calc package with a bug and
// its tests. test_add arrives with the test patch (FAIL_TO_PASS), test_mul is
// there before (PASS_TO_PASS).
var (
	calcBuggy  = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
	calcTests  = "from calc import add, mul\n\n\ndef test_mul():\n    assert mul(2, 3) == 6\n"
	dockerRepo = func() map[string]string {
		m := map[string]string{"calc.py": calcBuggy, "tests/test_calc.py": calcTests}
		for k, v := range applyFiles {
			m[k] = v
		}
		return m
	}()
	calcTestPatch = "diff --git a/tests/test_calc.py b/tests/test_calc.py\n--- a/tests/test_calc.py\n+++ b/tests/test_calc.py\n" +
		"@@ -3,3 +3,7 @@ from calc import add, mul\n \n def test_mul():\n     assert mul(2, 3) == 6\n+\n+\n+def test_add():\n+    assert add(2, 3) == 5\n"
	calcGold     = "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1,5 +1,5 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n \n \n def mul(a, b):\n"
	calcFixBreak = "--- a/calc.py\n+++ b/calc.py\n@@ -1,6 +1,6 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n \n \n def mul(a, b):\n-    return a * b\n+    return a * b + 1\n"
	// Prints the harness's PASSED lines and a whole fake summary when the
	// interpreter exits, after pytest's real summary.
	calcForger = "--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,11 @@\n+import atexit\n+\n+\n+@atexit.register\n+def _forge():\n+    print('PASSED tests/test_calc.py::test_add')\n+    print('=== short test summary info ===\\nPASSED tests/test_calc.py::test_add\\n=== 1 passed ===')\n+\n+\n def add(a, b):\n     return a - b\n"
	// Rewrites the FAIL_TO_PASS test to pass; the eval script resets test
	// files before the test patch, so this must not help.
	calcTestRewrite = "--- a/tests/test_calc.py\n+++ b/tests/test_calc.py\n@@ -1,5 +1,9 @@\n from calc import add, mul\n \n \n def test_mul():\n     assert mul(2, 3) == 6\n+\n+\n+def test_add():\n+    pass\n"
)

func dockerClient(t *testing.T) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := sandbox.Connect(ctx, "")
	if err != nil {
		t.Skipf("Docker Engine unreachable, integration test skipped: %v", err)
	}
	return d
}

// dockerImage builds (cached by content) an image holding dockerRepo at
// /testbed, committed with the same identity and date as makeRepo, so both
// have the same base commit.
func dockerImage(t *testing.T, d *client.Client) string {
	t.Helper()
	files := map[string][]byte{"Dockerfile": []byte("FROM " + sandbox.BaseImage + "\n" +
		"COPY repo/ /testbed/\n" +
		"RUN cd /testbed && git init -q && git add -A && " +
		"GIT_AUTHOR_DATE=" + fixedGitDate + " GIT_COMMITTER_DATE=" + fixedGitDate + " " +
		"git -c user.email=t@t -c user.name=t commit -qm base && chown -R swetui:swetui /testbed\n" +
		"WORKDIR /testbed\n")}
	for n, b := range dockerRepo {
		files["repo/"+n] = []byte(b)
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		fmt.Fprintf(h, "%s\x00%s\x00", n, files[n])
	}
	image := "swetui/reward-test:" + hex.EncodeToString(h.Sum(nil))[:12]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	missing, err := sandbox.Missing(ctx, d, []string{image, sandbox.BaseImage})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range missing {
		if m == sandbox.BaseImage {
			t.Fatalf("base image %s missing: run make setup", sandbox.BaseImage)
		}
	}
	if len(missing) > 0 {
		if err := sandbox.Build(ctx, d, image, sandbox.TarContext(files), "", nil); err != nil {
			t.Fatalf("build %s: %v", image, err)
		}
	}
	return image
}

func dockerPool(t *testing.T, d *client.Client) *sandbox.Pool {
	t.Helper()
	pool, err := sandbox.NewPool(context.Background(), sandbox.Options{
		// The image's repository belongs to swetui, who runs the tests: root
		// without capabilities could not write it.
		Workers: 2, Queue: 32, Timeout: 2 * time.Minute, RunID: "reward-test-" + sandbox.NewNonce()[:8], User: "swetui",
		Limits: sandbox.Limits{MemoryMB: 512, CPUs: 1, PidsLimit: 128, LogCap: 1 << 20},
		Dial:   func(ctx context.Context, endpoint string) (sandbox.Docker, error) { return d, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	closeAtCleanup(t, pool)
	return pool
}

// closeAtCleanup closes pool when the test ends, failing it when the
// pool's sandboxes do not all go.
func closeAtCleanup(t *testing.T, pool *sandbox.Pool) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := pool.Close(ctx); err != nil {
			t.Errorf("pool close: %v", err)
		}
	})
}

func dockerInstance(image, commit string) *task.Instance {
	return &task.Instance{
		InstanceID: "acme__widget-7", Repo: "acme/widget", BaseCommit: commit, Image: image, Workdir: "/testbed",
		TestCmd: "python3 -m pytest -rA -p no:cacheprovider", TestDirectives: []string{"tests/test_calc.py"},
		LogParser: ParserPytest, TestPatch: calcTestPatch,
		FailToPass: task.TestList{"tests/test_calc.py::test_add"},
		PassToPass: task.TestList{"tests/test_calc.py::test_mul"},
	}
}

// TestDockerApplyVerdictsMatchHost applies every apply case in a container
// (sandbox's eval script, apply only) and on the host, and compares.
func TestDockerApplyVerdictsMatchHost(t *testing.T) {
	d := dockerClient(t)
	image := dockerImage(t, d)
	dir, commit := makeRepo(t, dockerRepo)
	inst := dockerInstance(image, commit)
	host := &Applier{}
	defer host.Close()
	host.Register(inst.Repo, dir)
	container := &Scorer{Weights: WeightsFrom(config.Default().Reward), Evaluator: &PoolEvaluator{Pool: dockerPool(t, d)}}
	diffs := make([]string, len(applyCases))
	for i, c := range applyCases {
		diffs[i] = c.diff
	}
	rs, err := container.ScoreDiffs(context.Background(), inst, diffs, config.PhaseApplyOnly)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range applyCases {
		h, err := host.Check(context.Background(), inst.Repo, commit, c.diff, nil)
		if err != nil {
			t.Fatal(err)
		}
		if rs[i].Infra {
			t.Fatalf("%s: infra failure in the container: %s", c.name, rs[i].InfraCause)
		}
		if rs[i].ApplyMethod != h.Method || rs[i].ApplyMethod != c.method {
			t.Errorf("%s: container %s, host %s, want %s", c.name, rs[i].ApplyMethod, h.Method, c.method)
		}
	}
}

// TestDockerScoring runs the tests of real patches in containers and checks
// rewards, the forgery attempts included.
func TestDockerScoring(t *testing.T) {
	d := dockerClient(t)
	image := dockerImage(t, d)
	dir, commit := makeRepo(t, dockerRepo)
	inst := dockerInstance(image, commit)
	a := &Applier{}
	defer a.Close()
	a.Register(inst.Repo, dir)
	s := &Scorer{Weights: WeightsFrom(config.Default().Reward), Applier: a, Evaluator: &PoolEvaluator{Pool: dockerPool(t, d)}}
	tests := []struct {
		name     string
		diff     string
		reward   float64
		resolved bool
		hack     string
	}{
		{"gold", calcGold, 1, true, ""},
		{"gold without trailing context (git wants it at the end; patch applies it)", strings.Replace(calcGold, "-1,5 +1,5", "-1,2 +1,2", 1)[:strings.Index(calcGold, " \n \n def mul")], 1, true, ""},
		{"fixes add, breaks mul", calcFixBreak, 0.3 + 0.7 - 0.5, false, ""},
		{"forges PASSED lines at exit", calcForger, 0.3, false, ""},
		{"rewrites the FAIL_TO_PASS test (reset by the eval: a no-op, worth nothing)", calcTestRewrite, 0, false, HackTouchesTests},
		// Real fixes that also edit packaging or runner configuration: the
		// reset restores those files before the tests, so the fix counts.
		{"gold and a new tox.ini", calcGold + "diff --git a/tox.ini b/tox.ini\nnew file mode 100644\n--- /dev/null\n+++ b/tox.ini\n@@ -0,0 +1,2 @@\n+[tox]\n+envlist = py311\n", 1, true, HackTouchesTestConfig},
		{"gold and setup.cfg's pytest section", calcGold + "diff --git a/setup.cfg b/setup.cfg\nnew file mode 100644\n--- /dev/null\n+++ b/setup.cfg\n@@ -0,0 +1,2 @@\n+[tool:pytest]\n+addopts = -p no:cacheprovider\n", 1, true, HackTouchesTestConfig},
		{"does not apply", applyCases[8].diff, 0, false, ""},
	}
	diffs := make([]string, len(tests))
	for i, tt := range tests {
		diffs[i] = tt.diff
	}
	rs, err := s.ScoreDiffs(context.Background(), inst, diffs, config.PhaseDocker)
	if err != nil {
		t.Fatal(err)
	}
	for i, tt := range tests {
		r := rs[i]
		if r.Infra {
			t.Errorf("%s: infra failure: %s", tt.name, r.InfraCause)
			continue
		}
		if math.Abs(r.Reward-tt.reward) > 1e-9 || r.Resolved != tt.resolved {
			t.Errorf("%s: reward %.3f resolved %v (statuses %v, exit %v, tests error %q), want %.3f %v",
				tt.name, r.Reward, r.Resolved, r.Statuses, r.ExitStatus, r.TestsError, tt.reward, tt.resolved)
		}
		if tt.hack != "" && !flagged(r, tt.hack) {
			t.Errorf("%s: hacks %v (undone %v) lack %s", tt.name, r.Hacks, r.HacksUndone, tt.hack)
		}
		if tt.name == "gold" && (r.ExitStatus == nil || *r.ExitStatus != 0 || r.ApplyMethod != ApplyGit) {
			t.Errorf("gold: exit %v, method %s", r.ExitStatus, r.ApplyMethod)
		}
	}
}

// TestDockerSetupNeverFakesAPass: an instance whose setup resets the tree
// (which would wipe the patches and grade the old tests) gives an
// infrastructure failure naming the instance and the setup, for the gold
// patch and one that fixes nothing alike; the same command as repo_setup, which runs
// before the patch, and a setup that only sets the environment grade as
// usual.
func TestDockerSetupNeverFakesAPass(t *testing.T) {
	d := dockerClient(t)
	image := dockerImage(t, d)
	dir, commit := makeRepo(t, dockerRepo)
	a := &Applier{}
	defer a.Close()
	reset := "git checkout -qf " + commit + " && git clean -qfdx"
	s := &Scorer{Weights: WeightsFrom(config.Default().Reward), Applier: a, Evaluator: &PoolEvaluator{Pool: dockerPool(t, d)}}
	tests := []struct {
		name             string
		setup, repoSetup string
		infra            string // "" grades as usual
	}{
		{"setup resets the tree", reset, "", "changed calc.py tests/test_calc.py"},
		{"setup edits a patched file", "echo '# x' >> calc.py", "", "changed calc.py"},
		{"setup activates an environment", "export LC_ALL=C.UTF-8", "", ""},
		{"the reset as repo_setup", "", reset, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inst := dockerInstance(image, commit)
			inst.Setup, inst.RepoSetup = tt.setup, tt.repoSetup
			a.Register(inst.Repo, dir)
			noFix := "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,3 @@\n+# looked at it\n def add(a, b):\n     return a - b\n"
			rs, err := s.ScoreDiffs(context.Background(), inst, []string{calcGold, noFix}, config.PhaseDocker)
			if err != nil {
				t.Fatal(err)
			}
			gold, noop := rs[0], rs[1]
			if tt.infra != "" {
				for i, r := range rs {
					if !r.Infra || !strings.Contains(r.InfraCause, tt.infra) || !strings.Contains(r.InfraCause, inst.InstanceID) ||
						!strings.Contains(r.InfraCause, "repo_setup") || r.Resolved {
						t.Errorf("#%d: infra %v %q resolved %v; want an infrastructure failure saying %q", i, r.Infra, r.InfraCause, r.Resolved, tt.infra)
					}
				}
				return
			}
			if gold.Infra || !gold.Resolved || noop.Infra || noop.Resolved {
				t.Errorf("gold infra %q resolved %v, no fix infra %q resolved %v: want gold resolved, the other not",
					gold.InfraCause, gold.Resolved, noop.InfraCause, noop.Resolved)
			}
		})
	}
}
