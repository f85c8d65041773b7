package task

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/swetui/swetui/internal/realdata"
)

func TestSpecFor(t *testing.T) {
	tests := []struct {
		repo, version string
		wantCmd       string
		wantParser    string
		wantOK        bool
	}{
		{"django/django", "3.0", "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1", ParserDjango, true},
		{"django/django", "1.9", "./tests/runtests.py --verbosity 2", ParserDjango, true},
		{"sympy/sympy", "1.1", "PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose", ParserSympy, true},
		{"astropy/astropy", "5.1", "pytest -rA", ParserPytestV2, true},
		{"astropy/astropy", "1.3", "pytest -rA -vv -o console_output_style=classic --tb=no -p no:nose", ParserPytestV2, true},
		{"matplotlib/matplotlib", "3.5", "pytest -rA", ParserMatplotlib, true},
		{"scikit-learn/scikit-learn", "0.22", "pytest -rA", ParserPytestV2, true},
		{"pytest-dev/pytest", "5.4", "pytest -rA", ParserPytest, true},
		{"sphinx-doc/sphinx", "3.5", "tox --current-env -epy39 -v --", ParserPytestV2, true},
		{"psf/requests", "2.3", "pytest -rA", ParserPytestOptions, true},
		{"pallets/flask", "2.0", "pytest -rA", ParserPytest, true},
		{"pydata/xarray", "0.12", "pytest -rA", ParserPytest, true},
		{"pylint-dev/pylint", "2.15", "pytest -rA", ParserPytestOptions, true},
		{"mwaskom/seaborn", "0.12", "pytest --no-header -rA", ParserSeaborn, true},
		{"acme/unknown", "1.0", "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.repo+"@"+tt.version, func(t *testing.T) {
			s, ok := SpecFor(tt.repo, tt.version)
			if ok != tt.wantOK || s.TestCmd != tt.wantCmd || s.LogParser != tt.wantParser {
				t.Fatalf("SpecFor = %+v, %v; want cmd %q parser %q ok %v", s, ok, tt.wantCmd, tt.wantParser, tt.wantOK)
			}
			if ok && !strings.Contains(s.Setup, "conda activate testbed") {
				t.Fatalf("setup %q does not activate the testbed environment", s.Setup)
			}
		})
	}
	if n := len(SpecRepos()); n != 12 {
		t.Fatalf("spec table has %d repositories, want the 12 common SWE-bench ones", n)
	}
}

func TestTestDirectives(t *testing.T) {
	patch := func(paths ...string) string {
		var b strings.Builder
		for _, p := range paths {
			b.WriteString("diff --git a/" + p + " b/" + p + "\n--- a/" + p + "\n+++ b/" + p + "\n@@ -1 +1 @@\n-a\n+b\n")
		}
		return b.String()
	}
	tests := []struct {
		name, repo, patch string
		want              []string
	}{
		{"pytest files", "psf/requests", patch("tests/test_utils.py", "tests/data/x.json"), []string{"tests/test_utils.py"}},
		{"django modules", "django/django", patch("tests/forms_tests/tests/test_forms.py", "tests/file_storage/models.py"),
			[]string{"forms_tests.tests.test_forms", "file_storage.models"}},
		{"data files dropped", "pallets/flask", patch("tests/static/config.toml", "tests/test_config.py", "docs/x.md"), []string{"tests/test_config.py"}},
		{"none", "pallets/flask", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := TestDirectives(tt.repo, tt.patch); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestSpecMatchesHarnessLogs rebuilds the test command of each official
// harness evaluation of the real data (internal/realdata) from its test
// patch alone.
func TestSpecMatchesHarnessLogs(t *testing.T) {
	dir := realdata.Dir(t)
	f, err := os.Open(filepath.Join(dir, "harness_logs", "index.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	n := 0
	for sc.Scan() {
		var rec struct {
			InstanceID string `json:"instance_id"`
			Repo       string `json:"repo"`
			TestCmd    string `json:"test_cmd"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatal(err)
		}
		script, err := os.ReadFile(filepath.Join(dir, "harness_logs", rec.InstanceID, "eval.sh"))
		if err != nil {
			t.Fatal(err)
		}
		testPatch := heredoc(string(script), "git apply -v - <<'EOF_114329324912'\n", "EOF_114329324912")
		in := Instance{InstanceID: rec.InstanceID, Repo: rec.Repo, TestPatch: testPatch}
		if !in.ApplySpec() {
			t.Errorf("%s: repo %s not in the spec table", rec.InstanceID, rec.Repo)
			continue
		}
		got, err := in.TestCommand()
		if err != nil || got != rec.TestCmd {
			t.Errorf("%s: test command\n got %q (%v)\nwant %q", rec.InstanceID, got, err, rec.TestCmd)
		}
		n++
	}
	if n < 25 {
		t.Fatalf("checked %d harness logs, want the 30 in realdata", n)
	}
}

func heredoc(s, open, close string) string {
	i := strings.Index(s, open)
	if i < 0 {
		return ""
	}
	s = s[i+len(open):]
	if j := strings.Index(s, "\n"+close); j >= 0 {
		return s[:j+1]
	}
	return s
}

// TestApplySpecDefaults checks what a minimal instance of a repository the
// spec table does not know gets, and that the dataset's own fields win.
func TestApplySpecDefaults(t *testing.T) {
	testPatch := "diff --git a/tests/test_w.py b/tests/test_w.py\n--- a/tests/test_w.py\n+++ b/tests/test_w.py\n@@ -1 +1 @@\n-a\n+b\n"
	tests := []struct {
		name        string
		in          Instance
		cmd, parser string
		setup       string
		checkout    bool
		derived     []string
	}{
		{"minimal", Instance{InstanceID: "acme__w-1", Repo: "acme/w", BaseCommit: "0123abc", TestPatch: testPatch},
			"python3 -m pytest -rA tests/test_w.py", ParserPytest, "", true, []string{"test_cmd", "log_parser", "checkout", "test_directives"}},
		{"own command", Instance{InstanceID: "acme__w-2", Repo: "acme/w", BaseCommit: "0123abc", TestPatch: testPatch,
			TestCmd: "python3 -m unittest -v", TestDirectives: []string{"tests.test_w"}, Setup: "true"},
			"python3 -m unittest -v tests.test_w", ParserUnittest, "true", true, []string{"log_parser", "checkout"}},
		{"known repository", Instance{InstanceID: "psf__requests-1", Repo: "psf/requests", BaseCommit: "0123abc", TestPatch: testPatch},
			"pytest -rA tests/test_w.py", ParserPytestOptions, "conda activate testbed", false, []string{"test_directives"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.in
			in.ApplySpec()
			cmd, err := in.TestCommand()
			if err != nil {
				t.Fatal(err)
			}
			if cmd != tt.cmd || in.LogParser != tt.parser || !strings.Contains(in.Setup, tt.setup) || in.CheckoutBase != tt.checkout ||
				!reflect.DeepEqual(in.Derived, tt.derived) {
				t.Errorf("cmd %q parser %q setup %q checkout %v derived %q; want %q %q %q %v %q", cmd, in.LogParser, in.Setup,
					in.CheckoutBase, in.Derived, tt.cmd, tt.parser, tt.setup, tt.checkout, tt.derived)
			}
		})
	}
	// An instance with an eval script of its own and no command gets none.
	in := Instance{InstanceID: "acme__w-3", Repo: "acme/w", EvalScript: "run.sh"}
	in.ApplySpec()
	if _, err := in.TestCommand(); err == nil || !strings.Contains(err.Error(), "acme__w-3") {
		t.Fatalf("error %v, want one naming the instance", err)
	}
}

func TestParserForCommand(t *testing.T) {
	for cmd, want := range map[string]string{"pytest -rA": ParserPytest, "python -m pytest": ParserPytest, "tox -e py -- -rA": ParserPytest,
		"python3 -m unittest -v": ParserUnittest, "./tests/runtests.py --verbosity 2": ParserDjango, "bin/test -C": ParserSympy, "make check": ""} {
		if got, ok := ParserForCommand(cmd); got != want || ok != (want != "") {
			t.Errorf("ParserForCommand(%q) = %q, %v; want %q", cmd, got, ok, want)
		}
	}
}
