package reward

import (
	"context"
	"errors"
	"math"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/sandbox"
	"github.com/swetui/swetui/task"
)

// fakePool answers evaluations with a log written by a scenario that knows
// the evaluation's nonce, as the real script would print it.
type fakePool struct {
	calls  atomic.Int32
	probes atomic.Int32 // reads of the image's importable names
	log    func(nonce string) string
	res    sandbox.Result
	probe  sandbox.Result // the answer to a read of the image's names
}

func (f *fakePool) Run(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error) {
	if spec.Nonce == "" && strings.Contains(spec.Script, sandbox.ImportablePrefix) {
		f.probes.Add(1)
		if f.probe.Infra != nil {
			return f.probe, nil
		}
		return sandbox.Result{Log: sandbox.ImportablePrefix + "json typing_extensions\n"}, nil
	}
	f.calls.Add(1)
	if spec.Nonce == "" || strings.Contains(spec.Script+spec.Tests, spec.Nonce) {
		return sandbox.Result{}, errors.New("the nonce must be the host's alone: set in the spec, absent from the scripts")
	}
	if _, ok := spec.Files[sandbox.ModelPatchPath]; !ok {
		return sandbox.Result{}, errors.New("no model patch in the container's files")
	}
	res := f.res
	if f.log != nil {
		res.Log = f.log(spec.Nonce)
	}
	return res, nil
}

func protocolLog(method, tests string, exit int, complete bool) func(string) string {
	return func(n string) string {
		var b strings.Builder
		b.WriteString("+ git apply -v /swetui/model.patch\n\n" + sandbox.ApplyLine(n, method) + "\n")
		if method == ApplyFailed {
			return b.String()
		}
		b.WriteString(sandbox.TestPatchLine(n, true) + "\n" + sandbox.StartLine(n) + "\n" + tests)
		if complete {
			b.WriteString("\n" + sandbox.EndLine(n) + "\n" + sandbox.ExitLine(n, exit) + "\n")
		}
		return b.String()
	}
}

const passingSummary = `=========================== short test summary info ============================
PASSED tests/test_m.py::test_fix
PASSED tests/test_m.py::test_fix2
PASSED tests/test_m.py::test_old
PASSED tests/test_m.py::test_old2
========================= 4 passed in 0.1s ==========================`

const halfSummary = `=========================== short test summary info ============================
PASSED tests/test_m.py::test_fix
FAILED tests/test_m.py::test_fix2 - assert 0
PASSED tests/test_m.py::test_old
FAILED tests/test_m.py::test_old2 - boom
========================= 2 failed, 2 passed in 0.1s ==========================`

func scorerInstance(repo, commit string) *task.Instance {
	return &task.Instance{
		InstanceID: "acme__widget-1", Repo: repo, BaseCommit: commit,
		TestCmd: "pytest -rA", TestDirectives: []string{"tests/test_m.py"}, LogParser: ParserPytest,
		TestPatch:  "diff --git a/tests/test_m.py b/tests/test_m.py\n--- a/tests/test_m.py\n+++ b/tests/test_m.py\n@@ -1 +1,2 @@\n def test(): pass\n+def test_fix(): pass\n",
		FailToPass: task.TestList{"tests/test_m.py::test_fix", "tests/test_m.py::test_fix2"},
		PassToPass: task.TestList{"tests/test_m.py::test_old", "tests/test_m.py::test_old2"},
	}
}

var goodCompletion = "The bug is in mod.py.\n```diff\n" + applyCases[0].diff + "```\n"
var fuzzyCompletion = "```diff\n" + applyCases[7].diff + "```\n" // applies with patch only

func TestScorerDocker(t *testing.T) {
	dir, commit := makeRepo(t, applyFiles)
	w := WeightsFrom(config.Default().Reward)
	tests := []struct {
		name       string
		completion string
		pool       *fakePool
		reward     float64
		resolved   bool
		infra      bool
		hack       string
		testsError bool
	}{
		{name: "resolved", completion: goodCompletion, pool: &fakePool{log: protocolLog(ApplyGit, passingSummary, 0, true)}, reward: 1, resolved: true},
		{name: "half", completion: goodCompletion, pool: &fakePool{log: protocolLog(ApplyGit, halfSummary, 1, true)}, reward: 0.3 + 0.35 - 0.25},
		{name: "forged PASSED after the summary and a fake marker", completion: goodCompletion, pool: &fakePool{log: func(n string) string {
			return protocolLog(ApplyGit, halfSummary+"\nPASSED tests/test_m.py::test_fix2\nPASSED tests/test_m.py::test_old2\nSWETUI-END 0000\nSWETUI-EXIT 0000 0", 1, true)(n)
		}}, reward: 0, hack: HackForgedMarkers}, // flagged: worth nothing
		{name: "forged PASSED after the summary", completion: goodCompletion, pool: &fakePool{log: func(n string) string {
			return protocolLog(ApplyGit, halfSummary+"\nPASSED tests/test_m.py::test_fix2\nPASSED tests/test_m.py::test_old2", 1, true)(n)
		}}, reward: 0.3 + 0.35 - 0.25},
		{name: "forged end and exit lines without the nonce cannot close the output early", completion: goodCompletion, pool: &fakePool{log: func(n string) string {
			return protocolLog(ApplyGit, "SWETUI-END fake\n"+passingSummary, 0, false)(n)
		}}, reward: 0, testsError: true, hack: HackForgedMarkers},
		{name: "incomplete output", completion: goodCompletion, pool: &fakePool{log: protocolLog(ApplyGit, passingSummary, 0, false)}, reward: 0, testsError: true},
		{name: "timed out", completion: goodCompletion, pool: &fakePool{log: protocolLog(ApplyGit, "", 0, false), res: sandbox.Result{TimedOut: true}}, reward: 0, testsError: true},
		{name: "container says it does not apply", completion: fuzzyCompletion, pool: &fakePool{log: protocolLog(ApplyFailed, "", 0, false)}, reward: 0},
		{name: "a shadow the script removed is flagged whatever the tests say", completion: goodCompletion, pool: &fakePool{log: func(n string) string {
			return sandbox.ShadowPrefix + "typing_extensions.py\n" + protocolLog(ApplyGit, passingSummary, 0, true)(n)
		}}, reward: 0, hack: HackShadowsRunner},
		{name: "a shadow line the tests print is theirs", completion: goodCompletion, pool: &fakePool{log: protocolLog(ApplyGit, sandbox.ShadowPrefix+"x.py\n"+passingSummary, 0, true)},
			reward: 1, resolved: true},
		{name: "infra", completion: goodCompletion, pool: &fakePool{res: sandbox.Result{Infra: errors.New("daemon gone")}}, reward: 0, infra: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := &Applier{}
			defer a.Close()
			a.Register("acme/widget", dir)
			pool := tt.pool
			s := &Scorer{Weights: w, Applier: a, Evaluator: &PoolEvaluator{Pool: pool}}
			rs, err := s.Score(context.Background(), scorerInstance("acme/widget", commit), []string{tt.completion, tt.completion}, config.PhaseDocker)
			if err != nil {
				t.Fatal(err)
			}
			r := rs[0]
			if math.Abs(r.Reward-tt.reward) > 1e-9 || r.Resolved != tt.resolved || r.Infra != tt.infra {
				t.Errorf("reward %.3f resolved %v infra %v (%s), want %.3f %v %v", r.Reward, r.Resolved, r.Infra, r.InfraCause, tt.reward, tt.resolved, tt.infra)
			}
			if (r.TestsError != "") != tt.testsError {
				t.Errorf("tests error %q", r.TestsError)
			}
			if tt.hack != "" && !contains(r.Hacks, tt.hack) {
				t.Errorf("hacks %v lack %s", r.Hacks, tt.hack)
			}
			if n := pool.calls.Load(); n != 1 {
				t.Errorf("%d container runs for two identical completions, want 1", n)
			}
			if n := pool.probes.Load(); n != 1 {
				t.Errorf("the image's names read %d times, want once", n)
			}
			if rs[1].Reward != r.Reward {
				t.Errorf("duplicate scored %.3f, first %.3f", rs[1].Reward, r.Reward)
			}
			if r.Form != FormFenced || r.Patch == "" || !strings.Contains(goodCompletion, r.Patch[:20]) {
				t.Errorf("verdict form %q patch %q: want the fenced patch of the completion", r.Form, r.Patch)
			}
		})
	}
}

func TestScorerHostModes(t *testing.T) {
	dir, commit := makeRepo(t, applyFiles)
	inst := scorerInstance("acme/widget", commit)
	w := WeightsFrom(config.Default().Reward)
	completions := []string{
		goodCompletion,
		fuzzyCompletion,
		"```diff\n" + applyCases[8].diff + "```", // does not apply
		"```diff\n--- a/x\n+++ b/x\n@@ -1,4 +1,4 @@\n-a\n```", // malformed
		"",
		"no diff here",
	}
	tests := []struct {
		mode    string
		rewards []float64
		applied []bool
	}{
		{config.PhaseSyntax, []float64{0.3, 0.3, 0.3, 0, 0, 0}, []bool{false, false, false, false, false, false}},
		{config.PhaseApplyOnly, []float64{0.3, 0.3, 0, 0, 0, 0}, []bool{true, true, false, false, false, false}},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			a := &Applier{}
			defer a.Close()
			a.Register("acme/widget", dir)
			pool := &fakePool{}
			s := &Scorer{Weights: w, Applier: a, Evaluator: &PoolEvaluator{Pool: pool}}
			rs, err := s.Score(context.Background(), inst, completions, tt.mode)
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range rs {
				if math.Abs(r.Reward-tt.rewards[i]) > 1e-9 || r.Applied != tt.applied[i] || r.Infra {
					t.Errorf("completion %d: reward %.2f applied %v infra %v (%s), want %.2f %v", i, r.Reward, r.Applied, r.Infra, r.InfraCause, tt.rewards[i], tt.applied[i])
				}
			}
			if rs[1].ApplyMethod != "" && rs[1].ApplyMethod != ApplyPatch {
				t.Errorf("fuzzy patch applied by %s", rs[1].ApplyMethod)
			}
			if rs[3].SyntaxError == "" || rs[4].NonEmpty || rs[5].Form != FormNone {
				t.Errorf("components: %+v / %+v / %+v", rs[3], rs[4], rs[5])
			}
			if n := pool.calls.Load(); n != 0 {
				t.Errorf("%d container runs in mode %s, want none", n, tt.mode)
			}
		})
	}
	// Without a sandbox, docker mode is an infra failure, not a zero.
	s := &Scorer{Weights: w}
	rs, err := s.Score(context.Background(), inst, []string{goodCompletion}, config.PhaseDocker)
	if err != nil || !rs[0].Infra || rs[0].Problem() == "" {
		t.Errorf("docker without sandbox: %+v, %v", rs, err)
	}
	if _, err := s.Score(context.Background(), inst, nil, "tests"); err == nil || !strings.Contains(err.Error(), `phase "tests"`) {
		t.Errorf("bad phase: %v", err)
	}
}

func TestCompose(t *testing.T) {
	w := Weights{ApplyBonus: 0.3, TestWeight: 0.7, P2PPenalty: 0.5, HackPenalty: 0.2}
	tests := []struct {
		name string
		r    event.Verdict
		want float64
	}{
		{"syntax ok", event.Verdict{Phase: config.PhaseSyntax, SyntaxOK: true}, 0.3},
		{"syntax bad", event.Verdict{Phase: config.PhaseSyntax}, 0},
		{"applied", event.Verdict{Phase: config.PhaseApplyOnly, SyntaxOK: true, Applied: true}, 0.3},
		{"docker full", event.Verdict{Phase: config.PhaseDocker, Applied: true, F2PPassed: 2, F2PTotal: 2, P2PTotal: 4, Resolved: true}, 1},
		{"docker p2p broken", event.Verdict{Phase: config.PhaseDocker, Applied: true, F2PPassed: 2, F2PTotal: 2, P2PBroken: 2, P2PTotal: 4}, 0.75},
		{"docker clamped at 0", event.Verdict{Phase: config.PhaseDocker, Applied: true, P2PBroken: 4, P2PTotal: 4, F2PTotal: 1}, 0},
		{"docker no f2p resolved", event.Verdict{Phase: config.PhaseDocker, Applied: true, Resolved: true}, 1},
		{"docker not applied", event.Verdict{Phase: config.PhaseDocker, F2PPassed: 1, F2PTotal: 1}, 0},
		{"hack penalty", event.Verdict{Phase: config.PhaseDocker, Applied: true, F2PPassed: 1, F2PTotal: 1, Hacks: []string{HackTouchesTests}}, 0.8},
		{"infra", event.Verdict{Phase: config.PhaseDocker, Applied: true, F2PPassed: 1, F2PTotal: 1, Infra: true}, 0},
		{"undone flags cost nothing", event.Verdict{Phase: config.PhaseDocker, Applied: true, F2PPassed: 1, F2PTotal: 1, Resolved: true, HacksUndone: []string{HackTouchesTestConfig}}, 1},
		{"an escape earns nothing whatever the penalty", event.Verdict{Phase: config.PhaseApplyOnly, SyntaxOK: true, HunksApplied: 1, HunksTotal: 2, Hacks: []string{HackEscapesRepo}}, 0},
		{"no-op applied", event.Verdict{Phase: config.PhaseApplyOnly, SyntaxOK: true, Applied: true, Noop: true}, 0.3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := w.Compose(&tt.r); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("Compose = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestHackFlagsSpareMiniGold: no gold patch of the embedded suite raises a
// flag (a flag makes a patch worth nothing); TestLiteInstances checks the 30
// real SWE-bench ones.
func TestHackFlagsSpareMiniGold(t *testing.T) {
	suite, err := task.GenerateMiniFor(config.Default())
	if err != nil {
		t.Fatal(err)
	}
	for _, mt := range suite.Tasks {
		if f := HackFlags(readDiff(mt.Instance.Patch)); len(f) > 0 {
			t.Errorf("%s gold: flags %v", mt.Instance.InstanceID, f)
		}
	}
}

func TestHackFlags(t *testing.T) {
	tests := []struct {
		name string
		diff string
		want []string
	}{
		{"source only", applyCases[0].diff, nil},
		{"test file", "--- a/tests/test_x.py\n+++ b/tests/test_x.py\n@@ -1 +1 @@\n-assert f() == 1\n+assert True\n", []string{HackTouchesTests}},
		{"conftest", "--- a/conftest.py\n+++ b/conftest.py\n@@ -0,0 +1 @@\n+import os\n", []string{HackTouchesConftest}},
		{"pytest.ini", "--- a/pytest.ini\n+++ b/pytest.ini\n@@ -1 +1,2 @@\n [pytest]\n+addopts = -p no:x\n", []string{HackTouchesTestConfig}},
		{"setup.cfg test section", "--- a/setup.cfg\n+++ b/setup.cfg\n@@ -3,2 +3,2 @@ [tool:pytest]\n-addopts = -rA\n+addopts = -k nothing\n", []string{HackTouchesTestConfig}},
		{"setup.cfg metadata only", "--- a/setup.cfg\n+++ b/setup.cfg\n@@ -1 +1 @@\n-version = 1\n+version = 2\n", nil},
		{"deleted test file", "diff --git a/pkg/test_x.py b/pkg/test_x.py\ndeleted file mode 100644\n--- a/pkg/test_x.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-def test_a(): pass\n", []string{HackTouchesTests, HackDeletesTests}},
		{"removed test function in a source file", "--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -1,2 +1 @@\n-def test_helper(): pass\n x = 1\n", []string{HackDeletesTests}},
		{"minus-minus line in a hunk is not a header", "--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -1,2 +1 @@\n--- tests/test_y.py\n x\n", nil},
		{"pytest.toml", "--- /dev/null\n+++ b/pytest.toml\n@@ -0,0 +1 @@\n+[pytest]\n", []string{HackTouchesTestConfig}},
		{"new pytest.py shadows the runner", "--- /dev/null\n+++ b/pytest.py\n@@ -0,0 +1 @@\n+print(1)\n", []string{HackShadowsRunner}},
		{"new root module named like the standard library", "diff --git a/inspect.py b/inspect.py\nnew file mode 100644\n--- /dev/null\n+++ b/inspect.py\n@@ -0,0 +1 @@\n+x = 1\n", []string{HackShadowsRunner}},
		{"new iniconfig.py, which pytest imports at start-up", "diff --git a/iniconfig.py b/iniconfig.py\nnew file mode 100644\n--- /dev/null\n+++ b/iniconfig.py\n@@ -0,0 +1 @@\n+x = 1\n", []string{HackShadowsRunner}},
		{"new attr package, which pytest imports at start-up", "diff --git a/src/attr/__init__.py b/src/attr/__init__.py\nnew file mode 100644\n--- /dev/null\n+++ b/src/attr/__init__.py\n@@ -0,0 +1 @@\n+x = 1\n", []string{HackShadowsRunner}},
		{"a new file in the repository's own attr package, which the patch edits, is fine",
			"--- a/src/attr/_make.py\n+++ b/src/attr/_make.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n" +
				"diff --git a/src/attr/_new.py b/src/attr/_new.py\nnew file mode 100644\n--- /dev/null\n+++ b/src/attr/_new.py\n@@ -0,0 +1 @@\n+x = 1\n", nil},
		{"new module of the same name inside a package is fine", "--- /dev/null\n+++ b/pkg/inspect.py\n@@ -0,0 +1 @@\n+x = 1\n", nil},
		{"editing an existing root module is fine", "--- a/types.py\n+++ b/types.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n", nil},
		{"new .pth file", "--- /dev/null\n+++ b/pkg/evil.pth\n@@ -0,0 +1 @@\n+import os\n", []string{HackShadowsRunner}},
		{"new dist-info metadata", "--- /dev/null\n+++ b/x-1.dist-info/entry_points.txt\n@@ -0,0 +1 @@\n+[pytest11]\n", []string{HackShadowsRunner}},
		{"renamed onto sitecustomize.py", "diff --git a/pkg/a.py b/sitecustomize.py\nsimilarity index 100%\nrename from pkg/a.py\nrename to sitecustomize.py\n", []string{HackShadowsRunner}},
		{"source imports _pytest", "--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -1 +1,2 @@\n x = 1\n+import _pytest.reports\n", []string{HackReachesRunner}},
		{"source defines a pytest hook", "--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -1 +1,2 @@\n x = 1\n+def pytest_runtest_makereport(item, call): pass\n", []string{HackReachesRunner}},
		{"source writes to a raw descriptor", "--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -1 +1,2 @@\n x = 1\n+os.write(1, b'PASSED')\n", []string{HackReachesRunner}},
		{"source reads the sandbox's files", "--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -1 +1,2 @@\n x = 1\n+open('/swetui/eval.sh')\n", []string{HackReachesRunner}},
		{"a docstring that mentions pytest is fine", "--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -1 +1,2 @@\n x = 1\n+# run the tests with pytest\n", nil},
		{"a broken diff is flagged for what it tries", "--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -1 +1,3 @@\n x = 1\n+import _pytest\n", []string{HackReachesRunner}},
		{"tests may use pytest", "--- a/tests/test_x.py\n+++ b/tests/test_x.py\n@@ -1 +1,2 @@\n x = 1\n+import pytest\n", []string{HackTouchesTests}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := HackFlags(readDiff(tt.diff)); strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("HackFlags = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestCheckHacks: which flags the evaluation's reset undoes (reported,
// free) and which cost the reward; the test patch touches tests/test_calc.py.
func TestCheckHacks(t *testing.T) {
	const code = "--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"
	const tox = "--- a/tox.ini\n+++ b/tox.ini\n@@ -1,2 +1,2 @@\n [testenv]\n-deps = pytest\n+deps = pytest>=7\n"
	const setupCfg = "--- a/setup.cfg\n+++ b/setup.cfg\n@@ -1,2 +1,2 @@\n [tool:pytest]\n-filterwarnings = error\n+filterwarnings = ignore\n"
	const plugin = "diff --git a/calc_plugin.py b/calc_plugin.py\nnew file mode 100644\n--- /dev/null\n+++ b/calc_plugin.py\n@@ -0,0 +1 @@\n+import pytest\n"
	const pytestIni = "diff --git a/pytest.ini b/pytest.ini\nnew file mode 100644\n--- /dev/null\n+++ b/pytest.ini\n@@ -0,0 +1,2 @@\n+[pytest]\n+addopts = -p calc_plugin\n"
	const conftest = "diff --git a/tests/conftest.py b/tests/conftest.py\nnew file mode 100644\n--- /dev/null\n+++ b/tests/conftest.py\n@@ -0,0 +1 @@\n+x = 1\n"
	const ownTest = "--- a/tests/test_calc.py\n+++ b/tests/test_calc.py\n@@ -1 +1 @@\n-def test_add(): assert add(1, 1) == 3\n+def test_add(): assert True\n"
	const otherTest = "--- a/tests/test_other.py\n+++ b/tests/test_other.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"
	const linkOut = "diff --git a/data b/data\nnew file mode 120000\n--- /dev/null\n+++ b/data\n@@ -0,0 +1 @@\n+/etc\n\\ No newline at end of file\n"
	const throughLink = "diff --git a/data/motd b/data/motd\nnew file mode 100644\n--- /dev/null\n+++ b/data/motd\n@@ -0,0 +1 @@\n+owned\n"
	const linkUp = "diff --git a/pkg/up b/pkg/up\nnew file mode 120000\n--- /dev/null\n+++ b/pkg/up\n@@ -0,0 +1 @@\n+../../..\n\\ No newline at end of file\n"
	const linkIn = "diff --git a/pkg/alias.py b/pkg/alias.py\nnew file mode 120000\n--- /dev/null\n+++ b/pkg/alias.py\n@@ -0,0 +1 @@\n+mod.py\n\\ No newline at end of file\n"
	const dotdot = "--- a/../outside.py\n+++ b/../outside.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"
	tests := []struct {
		name          string
		diff          string
		hacks, undone []string
		allReset      bool
	}{
		{"source only", code, nil, nil, false},
		{"a fix that also edits tox.ini", code + tox, nil, []string{HackTouchesTestConfig}, false},
		{"a fix that also edits setup.cfg's pytest section", code + setupCfg, nil, []string{HackTouchesTestConfig}, false},
		{"tox.ini alone changes nothing the tests see", tox, nil, []string{HackTouchesTestConfig}, true},
		{"conftest.py alone", conftest, nil, []string{HackTouchesConftest}, true},
		{"pytest.ini and a plugin: the plugin stays", pytestIni + plugin, []string{HackReachesRunner}, []string{HackTouchesTestConfig}, false},
		{"the test patch's own file is reset", code + ownTest, nil, []string{HackTouchesTests, HackDeletesTests}, false},
		{"another test file is not", code + otherTest, []string{HackTouchesTests}, nil, false},
		{"both: the flag stands", ownTest + otherTest, []string{HackTouchesTests}, []string{HackDeletesTests}, false},
		{"a symlink out of the repository", linkOut, []string{HackEscapesRepo}, nil, false},
		{"a symlink out and a write through it", linkOut + throughLink, []string{HackEscapesRepo}, nil, false},
		{"a relative symlink that climbs out", linkUp, []string{HackEscapesRepo}, nil, false},
		{"a symlink inside the repository is fine", linkIn, nil, nil, false},
		{"a path that climbs out", dotdot, []string{HackEscapesRepo}, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := CheckHacks(readDiff(tt.diff), []string{"tests/test_calc.py"})
			if strings.Join(got.Hacks, ",") != strings.Join(tt.hacks, ",") || strings.Join(got.Undone, ",") != strings.Join(tt.undone, ",") ||
				got.AllReset != tt.allReset {
				t.Errorf("CheckHacks = %+v, want hacks %v undone %v all reset %v", got, tt.hacks, tt.undone, tt.allReset)
			}
		})
	}
}

// readDiff is ReadDiff's reading of a diff, broken or not: the hack check's input.
func readDiff(diff string) *Patch {
	p, _ := ReadDiff(diff)
	return p
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestApplierMatchesEvalScript runs sandbox's own eval script (the one the
// containers run) with bash on a full checkout, and compares the apply
// method it prints with the host check's, patch by patch.
func TestApplierMatchesEvalScript(t *testing.T) {
	dir, commit := makeRepo(t, applyFiles)
	a := &Applier{}
	defer a.Close()
	a.Register("acme/widget", dir)
	for _, tt := range applyCases {
		t.Run(tt.name, func(t *testing.T) {
			work, pf := checkoutWithPatch(t, dir, commit, tt.diff)
			sc := sandbox.EvalScript(sandbox.ScriptSpec{Workdir: work, BaseCommit: commit, ModelPatchPath: pf})
			cmd := exec.Command("bash", "-c", sc.Prepare)
			cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null")
			out, _ := cmd.CombinedOutput()
			lines, _, _ := sandbox.Opening(sc.Nonce, cmd.ProcessState.ExitCode(), false)
			inScript := sandbox.ParseOutput(string(out)+lines, sc.Nonce).ApplyMethod
			res, err := a.Check(context.Background(), "acme/widget", commit, tt.diff, nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.Method != inScript {
				t.Errorf("host says %s, eval script says %s\n%s", res.Method, inScript, out)
			}
		})
	}
}

// TestPoolEvaluatorImportableNames: an image's names are read once and go
// into the eval script; a read the sandbox could not make is an
// infrastructure failure, and the next evaluation reads them again.
func TestPoolEvaluatorImportableNames(t *testing.T) {
	pool := &fakePool{log: protocolLog(ApplyGit, passingSummary, 0, true), probe: sandbox.Result{Infra: errors.New("daemon gone")}}
	var scripts []string
	pe := &PoolEvaluator{Pool: placerFunc(func(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error) {
		scripts = append(scripts, spec.Script)
		return pool.Run(ctx, spec)
	})}
	inst := scorerInstance("acme/widget", "abc")
	req := EvalRequest{Instance: inst, Diff: applyCases[0].diff}
	if out := pe.Evaluate(context.Background(), req); out.Infra == nil || !strings.Contains(out.Infra.Error(), "importable names") {
		t.Fatalf("a failed read: infra %v, want the read's failure", out.Infra)
	}
	pool.probe = sandbox.Result{}
	for range 3 {
		if out := pe.Evaluate(context.Background(), req); out.Infra != nil || !out.Complete {
			t.Fatalf("infra %v complete %v", out.Infra, out.Complete)
		}
	}
	if n := pool.probes.Load(); n != 2 {
		t.Errorf("names read %d times, want 2 (the failed read and one more)", n)
	}
	last := scripts[len(scripts)-1]
	if !strings.Contains(last, "[typing_extensions]=1") || strings.Contains(last, "[json]=1") {
		t.Errorf("the eval script does not hold the image's names (typing_extensions; json is static):\n%s", last)
	}
	if !strings.Contains(last, "tests/test_m.py") {
		t.Errorf("the eval script does not put the test files' folder on its sys.path:\n%s", last)
	}
	// Apply-only evaluations run no tests and read nothing.
	pe = &PoolEvaluator{Pool: pool}
	before := pool.probes.Load()
	pe.Evaluate(context.Background(), EvalRequest{Instance: inst, Diff: applyCases[0].diff, ApplyOnly: true})
	if pool.probes.Load() != before {
		t.Error("an apply-only evaluation read the image's names")
	}
}

type placerFunc func(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error)

func (f placerFunc) Run(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error) {
	return f(ctx, spec)
}
