package mine

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/reward"
	"github.com/swetui/swetui/sandbox"
	"github.com/swetui/swetui/task"
)

// testRepo builds a git repository commit by commit, each a second after
// the last, with a fixed identity.
type testRepo struct {
	t    *testing.T
	dir  string
	tick int
}

func newTestRepo(t *testing.T) *testRepo {
	t.Helper()
	r := &testRepo{t: t, dir: t.TempDir()}
	r.git("init", "-q", "-b", "main")
	return r
}

func (r *testRepo) git(args ...string) string {
	r.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = r.dir
	date := fmt.Sprintf("%d +0000", 1700000000+r.tick)
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid", "GIT_COMMITTER_NAME=t",
		"GIT_COMMITTER_EMAIL=t@example.invalid", "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_DATE="+date, "GIT_COMMITTER_DATE="+date)
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// commit writes files ("" deletes one) and commits them with msg.
func (r *testRepo) commit(msg string, files map[string]string) string {
	r.t.Helper()
	for p, c := range files {
		full := filepath.Join(r.dir, p)
		if c == "" {
			if err := os.Remove(full); err != nil {
				r.t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			r.t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			r.t.Fatal(err)
		}
	}
	r.tick++
	r.git("add", "-A")
	r.git("commit", "-q", "-m", msg)
	return r.git("rev-parse", "HEAD")
}

// historyRepo is a small repository with one commit of each kind Scan
// tells apart, and a side branch merged in.
func historyRepo(t *testing.T) *testRepo {
	r := newTestRepo(t)
	r.commit("initial", map[string]string{
		"pkg/calc.py": "def add(a, b):\n    return a - b\n", "pkg/other.py": "X = 1\n",
		"tests/test_calc.py": "from pkg.calc import add\n", "README.md": "calc\n",
	})
	r.commit("fix add\n\nIt subtracted.", map[string]string{
		"pkg/calc.py": "def add(a, b):\n    return a + b\n", "tests/test_calc.py": "from pkg.calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n",
	})
	r.commit("docs", map[string]string{"README.md": "calc, documented\n"})
	r.commit("more tests", map[string]string{"tests/test_calc.py": "from pkg.calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n    assert add(0, 0) == 0\n"})
	r.commit("tests and changelog", map[string]string{"tests/test_calc.py": "from pkg.calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n", "CHANGES.rst": "1.0\n"})
	r.commit("fix with packaging", map[string]string{
		"pkg/calc.py": "def add(a, b):\n    return int(a + b)\n", "tox.ini": "[tox]\nenvlist = py3\n",
		"setup.cfg": "[metadata]\nname = calc\n", "tests/test_calc.py": "from pkg.calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n\n\ndef test_int():\n    assert add(1.5, 1.5) == 3\n",
	})
	r.commit("fixture", map[string]string{"conftest.py": "import pytest\n", "pkg/calc.py": "def add(a, b):\n    return int(a) + int(b)\n"})
	r.commit("binary", map[string]string{"pkg/logo.bin": "\x00\x01\x02binary\x00", "pkg/calc.py": "def add(a, b):\n    return int(a) + int(b)  # sum\n",
		"tests/test_calc.py": "from pkg.calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n"})
	r.git("checkout", "-q", "-b", "side")
	side := r.commit("side fix", map[string]string{"pkg/other.py": "X = 2\n", "tests/test_other.py": "from pkg.other import X\n\n\ndef test_x():\n    assert X == 2\n"})
	r.commit("side only", map[string]string{"pkg/side.py": "Y = 1\n", "tests/test_side.py": "def test_y():\n    pass\n"})
	r.git("checkout", "-q", "main")
	r.tick++
	r.git("cherry-pick", side)
	r.commit("src layout", map[string]string{"src/calc2/__init__.py": "Z = 1\n", "tests/test_z.py": "def test_z():\n    pass\n"})
	r.commit("delete a test", map[string]string{"pkg/calc.py": "def add(a, b):\n    return a + b\n", "tests/test_z.py": ""})
	r.tick++
	r.git("merge", "-q", "--no-ff", "-m", "merge side", "side")
	return r
}

type wantCand struct {
	message   string
	patch     []string
	tests     []string
	packaging []string
	src       bool
}

func TestScan(t *testing.T) {
	r := historyRepo(t)
	fixAdd := wantCand{"fix add\n\nIt subtracted.\n", []string{"pkg/calc.py"}, []string{"tests/test_calc.py"}, nil, false}
	packaging := wantCand{"fix with packaging\n", []string{"pkg/calc.py", "setup.cfg", "tox.ini"}, []string{"tests/test_calc.py"}, []string{"setup.cfg", "tox.ini"}, false}
	fixture := wantCand{"fixture\n", []string{"pkg/calc.py"}, []string{"conftest.py"}, nil, false}
	picked := wantCand{"side fix\n", []string{"pkg/other.py"}, []string{"tests/test_other.py"}, nil, false}
	sideOnly := wantCand{"side only\n", []string{"pkg/side.py"}, []string{"tests/test_side.py"}, nil, false}
	src := wantCand{"src layout\n", []string{"src/calc2/__init__.py"}, []string{"tests/test_z.py"}, nil, true}
	deleted := wantCand{"delete a test\n", []string{"pkg/calc.py"}, []string{"tests/test_z.py"}, nil, true}
	tests := []struct {
		history string
		commits int
		want    []wantCand
		skipped map[string]int
	}{
		{FirstParent, 11, []wantCand{deleted, src, picked, fixture, packaging, fixAdd},
			map[string]int{SkipRoot: 1, SkipNoTests: 1, SkipNoSource: 2, SkipBinary: 1}},
		{AllCommits, 13, []wantCand{deleted, src, picked, sideOnly, fixture, packaging, fixAdd},
			map[string]int{SkipRoot: 1, SkipNoTests: 1, SkipNoSource: 2, SkipBinary: 1, SkipDuplicate: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.history, func(t *testing.T) {
			res, err := Scan(context.Background(), r.dir, Options{History: tt.history})
			if err != nil {
				t.Fatal(err)
			}
			if res.Commits != tt.commits {
				t.Errorf("commits %d, want %d", res.Commits, tt.commits)
			}
			if !reflect.DeepEqual(res.Skipped, tt.skipped) {
				t.Errorf("skipped %v, want %v", res.Skipped, tt.skipped)
			}
			var got []wantCand
			for _, c := range res.Candidates {
				got = append(got, wantCand{c.Message, task.Paths(task.PatchFiles(c.Patch)), task.Paths(task.PatchFiles(c.TestPatch)), c.Packaging, c.SrcLayout})
				if parent := r.git("rev-parse", c.Commit+"^"); parent != c.Parent {
					t.Errorf("%s: parent %s, want %s", c.Message, c.Parent, parent)
				}
				if c.Date.IsZero() || c.Date.Location() != time.UTC {
					t.Errorf("%s: date %v, want a UTC time", c.Message, c.Date)
				}
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("candidates:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
	if _, err := Scan(context.Background(), r.dir, Options{History: "sideways"}); err == nil {
		t.Error("history sideways: no error")
	}
}

// TestScanPatchesApply checks that each candidate's patch and test patch,
// applied at its parent, give the commit's tree.
func TestScanPatchesApply(t *testing.T) {
	r := historyRepo(t)
	res, err := Scan(context.Background(), r.dir, Options{History: AllCommits})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range res.Candidates {
		r.git("checkout", "-q", "-f", c.Parent)
		for _, p := range []string{c.Patch, c.TestPatch} {
			f := filepath.Join(t.TempDir(), "p.diff")
			if err := os.WriteFile(f, []byte(p), 0o644); err != nil {
				t.Fatal(err)
			}
			r.git("apply", "--index", f)
		}
		if tree, want := r.git("write-tree"), r.git("rev-parse", c.Commit+"^{tree}"); tree != want {
			t.Errorf("%s: patches give tree %s, the commit has %s", c.Message, tree, want)
		}
		r.git("reset", "-q", "--hard")
	}
}

func TestSplit(t *testing.T) {
	file := func(p string) string {
		return fmt.Sprintf("diff --git a/%s b/%s\nindex 1..2 100644\n--- a/%s\n+++ b/%s\n@@ -1 +1 @@\n-a\n+b\n", p, p, p, p)
	}
	tests := []struct {
		name             string
		diff             string
		patch, testPatch []string
		packaging        []string
		why              string
	}{
		{"source and test", file("pkg/a.py") + file("tests/test_a.py"), []string{"pkg/a.py"}, []string{"tests/test_a.py"}, nil, ""},
		{"conftest is a test file", file("conftest.py") + file("a.py"), []string{"a.py"}, []string{"conftest.py"}, nil, ""},
		{"packaging kept in the patch", file("pyproject.toml") + file("a.py") + file("test_a.py") + file("setup.cfg"),
			[]string{"pyproject.toml", "a.py", "setup.cfg"}, []string{"test_a.py"}, []string{"pyproject.toml", "setup.cfg"}, ""},
		{"test data goes with the tests", file("a.py") + file("tests/data/x.json"), []string{"a.py"}, []string{"tests/data/x.json"}, nil, ""},
		{"binary", file("a.py") + file("tests/test_a.py") + "diff --git a/logo.png b/logo.png\nindex 1..2 100644\nBinary files a/logo.png and b/logo.png differ\n",
			nil, nil, nil, SkipBinary},
		{"git binary patch", file("a.py") + file("tests/test_a.py") + "diff --git a/x.bin b/x.bin\nnew file mode 100644\nindex 0..1\nGIT binary patch\nliteral 3\nabc\n",
			nil, nil, nil, SkipBinary},
		{"submodule", file("a.py") + file("tests/test_a.py") + "diff --git a/vendor b/vendor\nindex 1..2 160000\n--- a/vendor\n+++ b/vendor\n@@ -1 +1 @@\n-Subproject commit 1\n+Subproject commit 2\n",
			nil, nil, nil, SkipSubmodule},
		{"tests only", file("tests/test_a.py") + file("tests/test_b.py"), nil, nil, nil, SkipNoSource},
		{"no tests", file("a.py"), nil, nil, nil, SkipNoTests},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			patch, testPatch, packaging, why := Split(tt.diff)
			if why != tt.why {
				t.Fatalf("why %q, want %q", why, tt.why)
			}
			if why != "" {
				return
			}
			if got := task.Paths(task.PatchFiles(patch)); !reflect.DeepEqual(got, tt.patch) {
				t.Errorf("patch files %v, want %v", got, tt.patch)
			}
			if got := task.Paths(task.PatchFiles(testPatch)); !reflect.DeepEqual(got, tt.testPatch) {
				t.Errorf("test patch files %v, want %v", got, tt.testPatch)
			}
			if !reflect.DeepEqual(packaging, tt.packaging) {
				t.Errorf("packaging %v, want %v", packaging, tt.packaging)
			}
			if patch+testPatch == "" || len(patch)+len(testPatch) != len(tt.diff) {
				t.Errorf("the parts do not add up to the diff")
			}
		})
	}
}

func TestClassify(t *testing.T) {
	const (
		P = event.Passed
		F = event.Failed
		E = event.Errored
		S = event.Skipped
		X = event.XFail
	)
	tests := []struct {
		name          string
		before, after event.StatusMap
		f2p, p2p      []string
	}{
		{"fixed", event.StatusMap{"t::a": F, "t::b": P}, event.StatusMap{"t::a": P, "t::b": P}, []string{"t::a"}, []string{"t::b"}},
		{"new test", event.StatusMap{"t::b": P}, event.StatusMap{"t::a": P, "t::b": P}, []string{"t::a"}, []string{"t::b"}},
		{"collection error before", event.StatusMap{"t.py": E}, event.StatusMap{"t.py::a": P, "t.py::b": P}, []string{"t.py::a", "t.py::b"}, []string{}},
		{"errored before", event.StatusMap{"t::a": E}, event.StatusMap{"t::a": P}, []string{"t::a"}, []string{}},
		{"broken by the fix", event.StatusMap{"t::a": P}, event.StatusMap{"t::a": F}, []string{}, []string{}},
		{"skipped before is neither", event.StatusMap{"t::a": S}, event.StatusMap{"t::a": P}, []string{}, []string{}},
		{"skipped after is neither", event.StatusMap{"t::a": F}, event.StatusMap{"t::a": S}, []string{}, []string{}},
		{"xfail counts as passing", event.StatusMap{"t::a": X, "t::b": F}, event.StatusMap{"t::a": P, "t::b": X}, []string{"t::b"}, []string{"t::a"}},
		{"ids with an address are dropped", event.StatusMap{}, event.StatusMap{"t::a[<X at 0x7f3a2b1c>]": P, "t::b": P}, []string{"t::b"}, []string{}},
		{"pseudo-tests are dropped", event.StatusMap{"[100%]": P}, event.StatusMap{"[100%]": P, "t::a": P}, []string{"t::a"}, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f2p, p2p := Classify(tt.before, tt.after)
			if !reflect.DeepEqual(f2p, tt.f2p) || !reflect.DeepEqual(p2p, tt.p2p) {
				t.Errorf("got %v / %v, want %v / %v", f2p, p2p, tt.f2p, tt.p2p)
			}
		})
	}
}

// fakeEval answers evaluations with canned pytest logs: after for the
// gold patch, before for the empty one.
type fakeEval struct {
	before, after reward.EvalOutput
	mu            sync.Mutex
	reqs          []reward.EvalRequest
}

func (f *fakeEval) Evaluate(ctx context.Context, req reward.EvalRequest) reward.EvalOutput {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reqs = append(f.reqs, req)
	if req.Diff == "" {
		return f.before
	}
	return f.after
}

func ran(exit int, lines ...string) reward.EvalOutput {
	return reward.EvalOutput{Output: sandbox.Output{ApplyMethod: reward.ApplyGit, Complete: true, ExitStatus: exit,
		TestLog: "=========================== short test summary info ============================\n" + strings.Join(lines, "\n") + "\n===== done ====="}}
}

func TestVerify(t *testing.T) {
	rec := NewRecord("acme/calc", Candidate{Commit: "0123456789abcdef", Parent: "fedcba9876543210", Date: time.Unix(1700000000, 0),
		Message: "fix add\n", Patch: "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1 +1 @@\n-a\n+b\n",
		TestPatch: "diff --git a/tests/test_calc.py b/tests/test_calc.py\n--- a/tests/test_calc.py\n+++ b/tests/test_calc.py\n@@ -1 +1 @@\n-a\n+b\n", SrcLayout: true})
	missing := ran(2, "ERROR tests/test_calc.py")
	missing.TestLog = "E   ModuleNotFoundError: No module named 'simplejson.decoder'\n" + missing.TestLog
	tests := []struct {
		name          string
		before, after reward.EvalOutput
		evals         int
		skip          string
		f2p, p2p      []string
	}{
		{"kept", ran(1, "FAILED tests/test_calc.py::test_add - assert", "PASSED tests/test_calc.py::test_sub"),
			ran(0, "PASSED tests/test_calc.py::test_add", "PASSED tests/test_calc.py::test_sub"), 2, "",
			[]string{"tests/test_calc.py::test_add"}, []string{"tests/test_calc.py::test_sub"}},
		{"nothing flips", ran(0, "PASSED tests/test_calc.py::test_add"), ran(0, "PASSED tests/test_calc.py::test_add"), 2, SkipNoFailToPass, nil, nil},
		{"missing module", reward.EvalOutput{}, missing, 1, "missing module simplejson", nil, nil},
		{"collection error", reward.EvalOutput{}, ran(2, "ERROR tests/test_calc.py - SyntaxError"), 1, SkipCollection, nil, nil},
		{"gold does not apply", reward.EvalOutput{}, reward.EvalOutput{Output: sandbox.Output{ApplyMethod: reward.ApplyFailed}}, 1, SkipGoldNoApply, nil, nil},
		{"timeout", reward.EvalOutput{}, reward.EvalOutput{Output: sandbox.Output{ApplyMethod: reward.ApplyGit}, TimedOut: true}, 1, SkipTimeout, nil, nil},
		{"test patch does not apply", reward.EvalOutput{}, reward.EvalOutput{Infra: fmt.Errorf("evaluate x: the reference test patch did not apply")}, 1, SkipTestNoApply, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev := &fakeEval{before: tt.before, after: tt.after}
			o := Verify(context.Background(), ev, rec, "img:latest")
			if o.Skip != tt.skip || o.Evals != tt.evals || len(ev.reqs) != tt.evals {
				t.Fatalf("skip %q after %d evals (%d asked), want %q after %d (%s)", o.Skip, o.Evals, len(ev.reqs), tt.skip, tt.evals, o.Detail)
			}
			if tt.skip == "" && (!reflect.DeepEqual(o.FailToPass, tt.f2p) || !reflect.DeepEqual(o.PassToPass, tt.p2p)) {
				t.Errorf("lists %v / %v, want %v / %v", o.FailToPass, o.PassToPass, tt.f2p, tt.p2p)
			}
			in := ev.reqs[0].Instance
			if in.Image != "img:latest" || in.Setup != SrcSetup || !in.CheckoutBase || in.BaseCommit != rec.BaseCommit {
				t.Errorf("instance run as image %q setup %q checkout %v base %s", in.Image, in.Setup, in.CheckoutBase, in.BaseCommit)
			}
			if cmd, _ := in.TestCommand(); cmd != "python3 -m pytest -rA tests/test_calc.py" {
				t.Errorf("test command %q", cmd)
			}
		})
	}
	t.Run("flagged gold patch", func(t *testing.T) {
		r := rec
		r.Patch = "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1 +1 @@\n-a\n+import _pytest\n"
		ev := &fakeEval{}
		if o := Verify(context.Background(), ev, r, "img"); o.Skip != SkipHackFlagged+": "+reward.HackReachesRunner || len(ev.reqs) != 0 {
			t.Errorf("skip %q after %d evals", o.Skip, len(ev.reqs))
		}
	})
}

// VerifyAll keeps the first limit records in order, a batch of par at a
// time: it stops after the batch that reached the limit, and a record that
// would be kept past it is told as not kept.
func TestVerifyAll(t *testing.T) {
	var recs []Record
	for i := range 5 {
		recs = append(recs, NewRecord("acme/calc", Candidate{Commit: fmt.Sprintf("%016x", i+1), Parent: "fedcba9876543210", Date: time.Unix(1700000000, 0),
			Message: "fix add\n", Patch: "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1 +1 @@\n-a\n+b\n",
			TestPatch: "diff --git a/tests/test_calc.py b/tests/test_calc.py\n--- a/tests/test_calc.py\n+++ b/tests/test_calc.py\n@@ -1 +1 @@\n-a\n+b\n"}))
	}
	ev := &fakeEval{before: ran(1, "FAILED tests/test_calc.py::test_add - assert"), after: ran(0, "PASSED tests/test_calc.py::test_add")}
	var told []string
	kept, err := VerifyAll(context.Background(), ev, recs, "img", 2, 3, func(i int, r Record, o Outcome, keep bool) {
		told = append(told, fmt.Sprintf("%d:%v", i, keep))
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(told); got != "[0:true 1:true 2:true 3:false]" {
		t.Errorf("told %s, want records 0-2 kept, 3 past the limit, 4 never verified", got)
	}
	if len(kept) != 3 || kept[0].InstanceID != recs[0].InstanceID || kept[2].InstanceID != recs[2].InstanceID ||
		fmt.Sprint(kept[1].FailToPass) != "[tests/test_calc.py::test_add]" {
		t.Errorf("kept %+v", kept)
	}
}

func TestNewRecord(t *testing.T) {
	c := Candidate{Commit: "abcdef0123456789", Parent: "0123", Date: time.Date(2020, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600)),
		Message: "subject\n\nbody\n", Patch: "p",
		TestPatch: "diff --git a/tests/test_a.py b/tests/test_a.py\ndeleted file mode 100644\n--- a/tests/test_a.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n" +
			"diff --git a/tests/test_b.py b/tests/test_b.py\n--- a/tests/test_b.py\n+++ b/tests/test_b.py\n@@ -1 +1 @@\n-x\n+y\n"}
	r := NewRecord("acme/calc", c)
	if r.InstanceID != "acme__calc-abcdef0" || r.BaseCommit != "0123" || r.CreatedAt != "2020-01-02T02:04:05Z" ||
		r.ProblemStatement != c.Message || r.Setup != "" || !reflect.DeepEqual(r.TestDirectives, []string{"tests/test_b.py"}) {
		t.Errorf("record %+v", r)
	}
	// About one in four is held out, by the id alone.
	test := 0
	for i := range 400 {
		r := NewRecord("acme/calc", Candidate{Commit: fmt.Sprintf("%07x", i*7919), Date: time.Unix(0, 0)})
		if r.Split == task.SplitTest {
			test++
		}
		if again := NewRecord("acme/calc", Candidate{Commit: fmt.Sprintf("%07x", i*7919), Date: time.Unix(0, 0)}); again.Split != r.Split {
			t.Fatal("split not deterministic")
		}
	}
	if test < 70 || test > 130 {
		t.Errorf("%d of 400 in the test split, want about 100", test)
	}
}
