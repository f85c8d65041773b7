package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The toy repository the script tests (and the integration image) use:
// add is wrong, mul is right; the test patch adds the check of add.
var (
	repoFiles = map[string]string{
		"calc.py": "\"\"\"Tiny calculator.\"\"\"\n\n\ndef add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n",
		"test.sh": "#!/bin/sh\n# checks as grep: the script tests run without python packages\n" +
			"grep -q 'a \\* b' calc.py && echo 'mul PASSED' || { echo 'mul FAILED'; fail=1; }\n" +
			"exit ${fail:-0}\n",
	}
	goldCalc     = strings.Replace(repoFiles["calc.py"], "a - b", "a + b", 1)
	testPatched  = strings.Replace(repoFiles["test.sh"], "exit ", "grep -q 'a + b' calc.py && echo 'add PASSED' || { echo 'add FAILED'; fail=1; }\nexit ", 1)
	hackedTestSh = "#!/bin/sh\necho 'add PASSED'; echo 'mul PASSED'\n"
)

// gitRepo makes a committed repository of files in a temp dir and returns
// it with its head commit.
func gitRepo(t testing.TB, files map[string]string) (dir, head string) {
	t.Helper()
	dir = t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git(t, dir, "init", "-q")
	git(t, dir, "add", "-A")
	git(t, dir, "-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qm", "base")
	return dir, strings.TrimSpace(git(t, dir, "rev-parse", "HEAD"))
}

func git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// diffOf returns the diff that turns the repo's file name into body.
func diffOf(t testing.TB, files map[string]string, changes map[string]string) string {
	t.Helper()
	dir, _ := gitRepo(t, files)
	for name, body := range changes {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git(t, dir, "add", "-A")
	return git(t, dir, "diff", "--cached")
}

func TestEvalScriptOnHost(t *testing.T) {
	for _, tool := range []string{"bash", "git", "patch"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed (.ci/setup installs it): %v", tool, err)
		}
	}
	gold := diffOf(t, repoFiles, map[string]string{"calc.py": goldCalc})
	testPatch := diffOf(t, repoFiles, map[string]string{"test.sh": testPatched})
	fuzzy := strings.Replace(gold, "\n def mul(a, b):", "\n def mult(a, b):", 1) // a stale context line
	if fuzzy == gold {
		t.Fatal("fuzzy patch is the gold patch")
	}
	tests := []struct {
		name       string
		patch      string
		method     string
		exit       int  // the script's exit status
		complete   bool // markers and exit line present
		wantInLog  string
		calcAfter  string // "" = the base calc.py
		noTestFile string // a file that must not exist afterwards
	}{
		{name: "gold applies with git apply", patch: gold, method: ApplyGit, exit: 0, complete: true, wantInLog: "add PASSED", calcAfter: goldCalc},
		{name: "fuzzy context needs patch", patch: fuzzy, method: ApplyPatch, exit: 0, complete: true, wantInLog: "add PASSED", calcAfter: goldCalc,
			noTestFile: "calc.py.orig"},
		{name: "missing trailing newline: git refuses, patch rescues", patch: strings.TrimSuffix(gold, "\n"), method: ApplyPatch, exit: 0, complete: true, calcAfter: goldCalc},
		{name: "empty patch runs the tests", patch: "", method: ApplyEmpty, exit: 1, complete: true, wantInLog: "add FAILED"},
		{name: "garbage fails", patch: "this is not a diff\n", method: ApplyFailed, exit: ExitPatchFailed},
		{name: "deleting a missing file fails (patch without --forward would create it)",
			patch:  "--- a/nothere.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-x = 1\n",
			method: ApplyFailed, exit: ExitPatchFailed, noTestFile: "nothere.py"},
		{name: "half-applying patch is reverted", patch: gold + "--- a/mul.py\n+++ b/mul.py\n@@ -1 +1 @@\n-nope\n+yes\n",
			method: ApplyFailed, exit: ExitPatchFailed, noTestFile: "calc.py.rej"},
		{name: "model rewriting the tests is undone", patch: diffOf(t, repoFiles, map[string]string{"test.sh": hackedTestSh}),
			method: ApplyGit, exit: 1, complete: true, wantInLog: "add FAILED"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir, head := gitRepo(t, repoFiles)
			aux := t.TempDir()
			mp, tp := filepath.Join(aux, "model.patch"), filepath.Join(aux, "test.patch")
			os.WriteFile(mp, []byte(tc.patch), 0o644)
			os.WriteFile(tp, []byte(testPatch), 0o644)
			sc := EvalScript(ScriptSpec{
				Workdir: dir, BaseCommit: head, TestFiles: []string{"test.sh"},
				TestPatchPath: tp, ModelPatchPath: mp, TestCmd: "sh test.sh",
				Setup: []string{"export SETUP_RAN=1"},
			})
			out, exit := runOnHost(t, sc)
			nonce := sc.Nonce
			if exit != tc.exit {
				t.Errorf("exit %d, want %d\n%s", exit, tc.exit, out)
			}
			o := ParseOutput(string(out), nonce)
			if o.ApplyMethod != tc.method {
				t.Errorf("apply method %q, want %q\n%s", o.ApplyMethod, tc.method, out)
			}
			if o.Complete != tc.complete {
				t.Errorf("complete %v, want %v\n%s", o.Complete, tc.complete, out)
			}
			if tc.complete && o.ExitStatus != tc.exit {
				t.Errorf("runner exit %d, want %d", o.ExitStatus, tc.exit)
			}
			if tc.wantInLog != "" && !strings.Contains(o.TestLog, tc.wantInLog) {
				t.Errorf("test log lacks %q:\n%s", tc.wantInLog, o.TestLog)
			}
			want := tc.calcAfter
			if want == "" {
				want = repoFiles["calc.py"]
			}
			if b, _ := os.ReadFile(filepath.Join(dir, "calc.py")); string(b) != want {
				t.Errorf("calc.py afterwards:\n%s\nwant:\n%s", b, want)
			}
			if tc.noTestFile != "" {
				if _, err := os.Stat(filepath.Join(dir, tc.noTestFile)); err == nil {
					t.Errorf("%s exists afterwards", tc.noTestFile)
				}
			}
		})
	}
}

// runOnHost runs an evaluation's scripts on the host as the Runner runs
// them in a container: the prepare script, the host's lines, the tests.
func runOnHost(t *testing.T, sc Scripts) (log string, exit int) {
	t.Helper()
	run := func(args ...string) (string, int) {
		cmd := exec.Command("bash", args...)
		out, _ := cmd.CombinedOutput()
		return string(out), cmd.ProcessState.ExitCode()
	}
	out, status := run("-c", sc.Prepare)
	lines, tests, exit := Opening(sc.Nonce, status, sc.Tests != "")
	log = out + lines
	if tests {
		out, exit = run("-c", sc.Tests)
		log += out + Closing(sc.Nonce, exit)
	}
	return log, exit
}

func TestParseOutputIgnoresForgeries(t *testing.T) {
	n := "0123abcd"
	other := "ffffeeee"
	tests := []struct {
		name string
		log  string
		want Output
	}{
		{
			name: "plain",
			log: "noise\n" + ApplyLine(n, ApplyGit) + "\n" + TestPatchLine(n, true) + "\n" + StartLine(n) + "\nt1 PASSED\n\n" +
				EndLine(n) + "\n" + ExitLine(n, 0) + "\n",
			want: Output{ApplyMethod: ApplyGit, Applied: true, TestPatch: "ok", Started: true, Complete: true, TestLog: "t1 PASSED", ExitStatus: 0},
		},
		{
			name: "markers of another nonce are test output",
			log:  StartLine(n) + "\n" + EndLine(other) + "\n" + ExitLine(other, 0) + "\nreal\n" + EndLine(n) + "\n" + ExitLine(n, 1) + "\n",
			want: Output{Started: true, Complete: true, TestLog: EndLine(other) + "\n" + ExitLine(other, 0) + "\nreal", ExitStatus: 1, Forged: true},
		},
		{
			name: "marker not alone on its line",
			log:  StartLine(n) + "\nx " + EndLine(n) + "\n",
			want: Output{Started: true, TestLog: "x " + EndLine(n), ExitStatus: -1},
		},
		{
			name: "the last pair wins",
			log: StartLine(n) + "\nfirst\n" + EndLine(n) + "\n" + ExitLine(n, 0) + "\n" + StartLine(n) + "\nsecond\n" + EndLine(n) + "\n" +
				ExitLine(n, 2) + "\n",
			want: Output{Started: true, Complete: true, TestLog: "second", ExitStatus: 2, Forged: true},
		},
		{
			name: "shadow lines count only in the prepare script's output",
			log: ShadowPrefix + "iniconfig.py\n" + ShadowPrefix + "attr/__init__.py\n" + ApplyLine(n, ApplyGit) + "\n" +
				ShadowPrefix + "after-apply.py\n" + StartLine(n) + "\n" + ShadowPrefix + "forged.py\n" + EndLine(n) + "\n" + ExitLine(n, 0) + "\n",
			want: Output{ApplyMethod: ApplyGit, Applied: true, Started: true, Complete: true, TestLog: ShadowPrefix + "forged.py",
				ExitStatus: 0, Shadowed: "iniconfig.py\nattr/__init__.py"},
		},
		{
			name: "killed mid-run",
			log:  ApplyLine(n, ApplyPatch) + "\n" + StartLine(n) + "\nt1 PASSED\n",
			want: Output{ApplyMethod: ApplyPatch, Applied: true, Started: true, TestLog: "t1 PASSED", ExitStatus: -1},
		},
		{
			name: "patch failed",
			log:  ApplyLine(n, ApplyFailed) + "\n",
			want: Output{ApplyMethod: ApplyFailed, ExitStatus: -1},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := ParseOutput(tc.log, n); got != tc.want {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestRemoteImage(t *testing.T) {
	tests := []struct{ in, want string }{
		{"sweb.eval.x86_64.django__django-11099", "swebench/sweb.eval.x86_64.django_1776_django-11099:latest"},
		{"sweb.eval.x86_64.astropy__astropy-12907:v2", "swebench/sweb.eval.x86_64.astropy_1776_astropy-12907:v2"},
		{"swetui/mini:latest", "swetui/mini:latest"},
	}
	for _, tc := range tests {
		if got := RemoteImage(tc.in); got != tc.want {
			t.Errorf("RemoteImage(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := InstanceImage("a__b-1"); got != "sweb.eval.x86_64.a__b-1" {
		t.Errorf("InstanceImage = %q", got)
	}
}

// TestProtectedTwins: the script's bash rule and the Go rule that reward's
// flags read agree, path by path: the static rule alone, and with an
// image's importable names and a test folder on sys.path.
func TestProtectedTwins(t *testing.T) {
	dir, head := gitRepo(t, map[string]string{"calc.py": "x = 1\n", "setup.cfg": "[metadata]\n"})
	os.MkdirAll(filepath.Join(dir, "src", "_pytest"), 0o755)
	os.WriteFile(filepath.Join(dir, "src", "_pytest", "x.py"), []byte("x\n"), 0o644)
	git(t, dir, "add", "-A")
	git(t, dir, "-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qm", "pytest's own")
	head = strings.TrimSpace(git(t, dir, "rev-parse", "HEAD"))
	atBase := map[string]bool{"calc.py": true, "setup.cfg": true, "src": true, "src/_pytest": true, "src/_pytest/x.py": true}
	own := func(p string) bool { return atBase[p] }
	paths := []string{
		"conftest.py", "tests/conftest.py", "pytest.ini", "a/b/tox.ini", "setup.cfg", "pyproject.toml", ".pytest.ini",
		"pytest.py", "pkg/pytest.py", "sitecustomize.py", "x/usercustomize.py", "a.pth", "pkg/__pycache__/m.cpython-311.pyc",
		"x-1.dist-info/entry_points.txt", "x.egg-info/entry_points.txt", "_pytest/reports.py", "src/_pytest/new.py",
		"src/pluggy/__init__.py", "inspect.py", "json/__init__.py", "src/typing.py", "pkg/inspect.py", "calc.py",
		"calc_plugin.py", "README", "src", "lib/x.so", "iniconfig.py", "attr/__init__.py", "src/attr.py", "hypothesis.py",
		"src/hypothesis/__init__.py", "tests/iniconfig.py", "tests/hypothesis.py", "tests/helpers.py", "tests/__init__.py",
		"tests/sub/iniconfig.py", "requests/api.py", "calc/__init__.py", "src/calc.py", "docs/conf.py", "_pytest.py/x",
		".py", "weird name.py",
	}
	names := []string{"calc", "docs", "hypothesis", "requests", "tests", "weird name", "1x"}
	for _, tc := range []struct {
		name string
		s    Shadowing
		bash string // set-up after the function
	}{
		{"static", Shadowing{Own: own}, ""},
		{"image names and a test folder", Shadowing{Names: map[string]bool{"calc": true, "docs": true, "hypothesis": true,
			"requests": true, "tests": true, "weird name": true, "1x": true}, Folders: []string{"tests"}, Own: own}, `swetui_path+=("tests")`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ns []string
			if tc.s.Names != nil {
				ns = names
			}
			var script strings.Builder
			script.WriteString("set -u\ncd " + shq(dir) + "\n" + protectFunction(head, ns) + tc.bash + "\n")
			for _, p := range paths {
				fmt.Fprintf(&script, "protected %s 0 && echo 0; protected %s 1 && echo 1; echo .\n", shq(p), shq(p))
			}
			out, err := exec.Command("bash", "-c", script.String()).CombinedOutput()
			if err != nil {
				t.Fatalf("bash: %v\n%s", err, out)
			}
			got := strings.Split(strings.TrimSuffix(string(out), ".\n"), ".\n")
			if len(got) != len(paths) {
				t.Fatalf("bash said %d answers for %d paths:\n%s", len(got), len(paths), out)
			}
			for i, p := range paths {
				bashTracked, bashNew := strings.Contains(got[i], "0\n"), strings.Contains(got[i], "1\n")
				goTracked, goNew := RunnerConfig(p), RunnerConfig(p) || tc.s.Shadows(p)
				if !slices.Contains([]string{"", "0\n", "1\n", "0\n1\n"}, got[i]) {
					t.Errorf("%s: bash printed %q", p, got[i])
				}
				if bashTracked != goTracked || bashNew != goNew {
					t.Errorf("%s: bash says edited %v added %v, Go %v %v", p, bashTracked, bashNew, goTracked, goNew)
				}
			}
		})
	}
}

// TestEvalScriptChecksOutBase: with Checkout set, the script starts from
// that commit whatever the image's work tree holds (one image for several
// base commits), and a commit the image lacks stops it before the patch.
func TestEvalScriptChecksOutBase(t *testing.T) {
	gold := diffOf(t, repoFiles, map[string]string{"calc.py": goldCalc})
	testPatch := diffOf(t, repoFiles, map[string]string{"test.sh": testPatched})
	tests := []struct {
		name     string
		checkout func(base string) string
		exit     int
		method   string
	}{
		{"base checked out, the gold patch applies", func(base string) string { return base }, 0, ApplyGit},
		{"no checkout: the later commit's tree refuses the patch", func(string) string { return "" }, ExitPatchFailed, ApplyFailed},
		{"a commit the image lacks", func(string) string { return "0123456789abcdef0123456789abcdef01234567" }, ExitWorkdirMissing, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, base := gitRepo(t, repoFiles)
			// The image's tree is at a later commit that rewrote calc.py.
			os.WriteFile(filepath.Join(dir, "calc.py"), []byte("def add(a, b):\n    raise NotImplementedError\n"), 0o644)
			git(t, dir, "-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qam", "later")
			aux := t.TempDir()
			mp, tp := filepath.Join(aux, "model.patch"), filepath.Join(aux, "test.patch")
			os.WriteFile(mp, []byte(gold), 0o644)
			os.WriteFile(tp, []byte(testPatch), 0o644)
			sc := EvalScript(ScriptSpec{Workdir: dir, BaseCommit: base, Checkout: tt.checkout(base), TestFiles: []string{"test.sh"},
				TestPatchPath: tp, ModelPatchPath: mp, TestCmd: "sh test.sh"})
			out, exit := runOnHost(t, sc)
			if exit != tt.exit {
				t.Errorf("exit %d, want %d\n%s", exit, tt.exit, out)
			}
			if o := ParseOutput(string(out), sc.Nonce); o.ApplyMethod != tt.method {
				t.Errorf("apply method %q, want %q\n%s", o.ApplyMethod, tt.method, out)
			}
			if tt.exit == ExitWorkdirMissing && !strings.Contains(string(out), "is not in this image") {
				t.Errorf("no word of the missing commit:\n%s", out)
			}
		})
	}
}

// TestEvalScriptSetupCheck: a setup that undoes the patches stops the test
// process before the tests with the files it changed; one that only sets
// the environment runs them; repo_setup runs before the model patch.
func TestEvalScriptSetupCheck(t *testing.T) {
	gold := diffOf(t, repoFiles, map[string]string{"calc.py": goldCalc})
	testPatch := diffOf(t, repoFiles, map[string]string{"test.sh": testPatched})
	tests := []struct {
		name      string
		setup     []string
		repoSetup []string
		exit      int
		check     string // the setup check line's verdict; "" none
		inLog     string
	}{
		{name: "environment activation", setup: []string{"export SETUP_RAN=1"}, exit: 0, check: SetupCheckOK, inLog: "add PASSED"},
		{name: "a setup that resets the tree", setup: []string{"git checkout -qf HEAD && git clean -qfdx", "cd /"},
			exit: ExitSetupChanged, check: "changed calc.py test.sh"},
		{name: "a setup that edits a patched file", setup: []string{"echo '# touched' >> calc.py"},
			exit: ExitSetupChanged, check: "changed calc.py"},
		{name: "a setup that writes elsewhere is fine", setup: []string{"mkdir -p build && echo x > build/stamp"}, exit: 0, check: SetupCheckOK, inLog: "add PASSED"},
		{name: "repo_setup before the patch", repoSetup: []string{"git checkout -qf HEAD", "echo generated > gen.txt"},
			setup: []string{"test -f gen.txt"}, exit: 0, check: SetupCheckOK, inLog: "add PASSED"},
		{name: "repo_setup that fails", repoSetup: []string{"false"}, exit: ExitRepoSetupFailed, inLog: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir, head := gitRepo(t, repoFiles)
			aux := t.TempDir()
			mp, tp := filepath.Join(aux, "model.patch"), filepath.Join(aux, "test.patch")
			os.WriteFile(mp, []byte(gold), 0o644)
			os.WriteFile(tp, []byte(testPatch), 0o644)
			sc := EvalScript(ScriptSpec{
				Workdir: dir, BaseCommit: head, TestFiles: []string{"test.sh"},
				TestPatchPath: tp, ModelPatchPath: mp, TestCmd: "sh test.sh",
				Setup: tc.setup, RepoSetup: tc.repoSetup, GuardFiles: []string{"calc.py", "test.sh"},
				SumPath: filepath.Join(aux, "prepared.sum"),
			})
			log, exit := runOnHost(t, sc)
			if exit != tc.exit {
				t.Fatalf("exit %d, want %d\n%s", exit, tc.exit, log)
			}
			o := ParseOutput(log, sc.Nonce)
			if o.SetupCheck != tc.check {
				t.Errorf("setup check %q, want %q\n%s", o.SetupCheck, tc.check, log)
			}
			if tc.inLog != "" && !strings.Contains(o.TestLog, tc.inLog) {
				t.Errorf("test log lacks %q:\n%s", tc.inLog, o.TestLog)
			}
			if tc.check != SetupCheckOK && strings.Contains(o.TestLog, "add ") {
				t.Errorf("the tests ran after the check failed:\n%s", o.TestLog)
			}
		})
	}
	// The check line is the first one: a test that prints one after it
	// changes nothing.
	o := ParseOutput("x\n"+StartLine("n")+"\n"+SetupCheckPrefix+SetupCheckOK+"\n"+SetupCheckPrefix+"changed a.py\n"+EndLine("n")+"\n"+ExitLine("n", 0)+"\n", "n")
	if o.SetupCheck != SetupCheckOK {
		t.Errorf("setup check %q: a later line won", o.SetupCheck)
	}
}
