package task

import (
	"fmt"
	"slices"
	"strings"
)

// Log parser names, as package reward registers them. They live here, in one
// place, because the spec table and the embedded suite both name them.
const (
	ParserPytest        = "pytest"         // pytest -rA summary lines
	ParserPytestOptions = "pytest_options" // pytest with parametrised ids (requests, pylint)
	ParserPytestV2      = "pytest_v2"      // pytest with ANSI/verbose lines (astropy, scikit-learn, sphinx)
	ParserMatplotlib    = "matplotlib"
	ParserSeaborn       = "seaborn"
	ParserDjango        = "django"
	ParserSympy         = "sympy"
	ParserUnittest      = "unittest"
)

// Test commands of the official SWE-bench harness
// (swebench/harness/constants/python.py). TEST_PYTEST is assigned twice
// there; the second value, "pytest -rA", is the one in effect.
const (
	testPytest          = "pytest -rA"
	testAstropyPytest   = "pytest -rA -vv -o console_output_style=classic --tb=no -p no:nose"
	testDjango          = "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1"
	testDjangoNoParalel = "./tests/runtests.py --verbosity 2"
	testSeaborn         = "pytest --no-header -rA"
	testSphinx          = "tox --current-env -epy39 -v --"
	testSympy           = "PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose"
)

// condaSetup activates the environment every official instance image holds.
const condaSetup = "source /opt/miniconda3/bin/activate\nconda activate testbed"

// Spec says how to run one repository's tests: the command the test
// directives are appended to, the parser of its log, and shell lines to run
// first (environment activation, locale exports).
type Spec struct {
	TestCmd   string
	LogParser string
	Setup     string
}

// repoSpec is a repository's default spec plus per-version exceptions.
type repoSpec struct {
	Spec
	versions map[string]Spec
}

var djangoLocale = condaSetup + "\nexport LANG=en_US.UTF-8\nexport LC_ALL=en_US.UTF-8\nexport PYTHONIOENCODING=utf8\nexport LANGUAGE=en_US:en"
var djangoLocaleGen = condaSetup + "\nsed -i '/en_US.UTF-8/s/^# //g' /etc/locale.gen && locale-gen\nexport LANG=en_US.UTF-8\nexport LANGUAGE=en_US:en\nexport LC_ALL=en_US.UTF-8"

// specs follows the official harness's MAP_REPO_VERSION_TO_SPECS (test_cmd,
// eval_commands) and MAP_REPO_TO_PARSER.
var specs = map[string]repoSpec{
	"django/django": {Spec{testDjango, ParserDjango, condaSetup}, map[string]Spec{
		"1.7": {testDjango, ParserDjango, djangoLocale}, "1.8": {testDjango, ParserDjango, djangoLocale},
		"1.9": {testDjangoNoParalel, ParserDjango, djangoLocale}, "1.10": {testDjango, ParserDjango, djangoLocale},
		"1.11": {testDjango, ParserDjango, djangoLocale}, "2.0": {testDjango, ParserDjango, djangoLocale},
		"2.1": {testDjango, ParserDjango, djangoLocale}, "2.2": {testDjango, ParserDjango, djangoLocale},
		"3.0": {testDjango, ParserDjango, djangoLocaleGen}, "3.1": {testDjango, ParserDjango, djangoLocaleGen},
		"3.2": {testDjango, ParserDjango, djangoLocaleGen},
	}},
	"sympy/sympy": {Spec{testSympy, ParserSympy, condaSetup}, nil},
	"astropy/astropy": {Spec{testPytest, ParserPytestV2, condaSetup}, map[string]Spec{
		"0.1": {testAstropyPytest, ParserPytestV2, condaSetup}, "0.2": {testAstropyPytest, ParserPytestV2, condaSetup},
		"0.3": {testAstropyPytest, ParserPytestV2, condaSetup}, "0.4": {testAstropyPytest, ParserPytestV2, condaSetup},
		"1.1": {testAstropyPytest, ParserPytestV2, condaSetup}, "1.2": {testAstropyPytest, ParserPytestV2, condaSetup},
		"1.3": {testAstropyPytest, ParserPytestV2, condaSetup},
	}},
	"matplotlib/matplotlib":     {Spec{testPytest, ParserMatplotlib, condaSetup}, nil},
	"scikit-learn/scikit-learn": {Spec{testPytest, ParserPytestV2, condaSetup}, nil},
	"pytest-dev/pytest":         {Spec{testPytest, ParserPytest, condaSetup}, nil},
	"sphinx-doc/sphinx":         {Spec{testSphinx, ParserPytestV2, condaSetup}, nil},
	"psf/requests":              {Spec{testPytest, ParserPytestOptions, condaSetup}, nil},
	"pallets/flask":             {Spec{testPytest, ParserPytest, condaSetup}, nil},
	"pydata/xarray":             {Spec{testPytest, ParserPytest, condaSetup}, nil},
	"pylint-dev/pylint":         {Spec{testPytest, ParserPytestOptions, condaSetup}, nil},
	"mwaskom/seaborn":           {Spec{testSeaborn, ParserSeaborn, condaSetup}, nil},
}

// SpecFor returns the spec of a repository ("owner/name") at a version, and
// whether the table knows the repository.
func SpecFor(repo, version string) (Spec, bool) {
	rs, ok := specs[repo]
	if !ok {
		return Spec{}, false
	}
	if s, ok := rs.versions[version]; ok {
		return s, true
	}
	return rs.Spec, true
}

// SpecRepos lists the repositories the spec table knows.
func SpecRepos() []string {
	out := make([]string, 0, len(specs))
	for r := range specs {
		out = append(out, r)
	}
	return out
}

// nonTestExts are files a test patch may touch that are not tests to run
// (the harness's NON_TEST_EXTS).
var nonTestExts = []string{".json", ".png", "csv", ".txt", ".md", ".jpg", ".jpeg", ".pkl", ".yml", ".yaml", ".toml"}

// TestDirectives returns what the harness appends to the test command: the
// files the test patch touches, less data files; for django, modules as
// dotted paths relative to tests/. It follows harness v2.0.x, whose logs the
// tests check it against (internal/realdata; newer harnesses also drop
// django non-test modules).
func TestDirectives(repo, testPatch string) []string {
	var out []string
	for _, c := range PatchFiles(testPatch) {
		d := c.Path()
		if hasAnySuffix(d, nonTestExts) {
			continue
		}
		if repo == "django/django" {
			d = strings.TrimSuffix(d, ".py")
			d = strings.TrimPrefix(d, "tests/")
			d = strings.ReplaceAll(d, "/", ".")
		}
		out = append(out, d)
	}
	return out
}

func hasAnySuffix(s string, suffixes []string) bool {
	for _, x := range suffixes {
		if strings.HasSuffix(s, x) {
			return true
		}
	}
	return false
}

// ApplySpec fills the execution fields an instance leaves empty (test_cmd,
// log_parser, setup, test_directives) from the spec table and its test
// patch. It reports whether the repository was in the table; an instance
// that carries its own test_cmd needs no entry. A repository the table does
// not know gets defaults that suit a minimal instance (instance_id, repo,
// base_commit, patch, test_patch, FAIL_TO_PASS, PASS_TO_PASS): the base
// commit checked out before the patch, pytest on the files the test patch touches, the
// parser of that command. Derived lists what was filled so.
func (in *Instance) ApplySpec() bool {
	s, ok := SpecFor(in.Repo, in.Version)
	if ok {
		if in.TestCmd == "" {
			in.TestCmd = s.TestCmd
		}
		if in.LogParser == "" {
			in.LogParser = s.LogParser
		}
		// Setup belongs to the official images; an instance with its own
		// image says its own setup.
		if in.Setup == "" && in.Image == "" {
			in.Setup = s.Setup
		}
	} else {
		if in.TestCmd == "" && in.EvalScript == "" {
			in.TestCmd = DefaultTestCmd
			in.derive("test_cmd")
		}
		if in.LogParser == "" {
			if p, known := ParserForCommand(in.TestCmd); known {
				in.LogParser = p
				in.derive("log_parser")
			}
		}
		// An image may hold other commits than this one (one image per
		// repository): the evaluation starts from the base commit.
		if in.BaseCommit != "" {
			in.CheckoutBase = true
			in.derive("checkout")
		}
	}
	if len(in.TestDirectives) == 0 && in.TestPatch != "" {
		in.TestDirectives = TestDirectives(in.Repo, in.TestPatch)
		if len(in.TestDirectives) > 0 {
			in.derive("test_directives")
		}
	}
	return ok
}

// DefaultTestCmd runs the tests of a repository the spec table does not
// know: pytest with the harness's -rA, through the interpreter so that the
// repository's root is importable as it is under the harness's installs.
const DefaultTestCmd = "python3 -m pytest -rA"

// ParserForCommand names the log parser that reads a test command's output,
// and whether the command is one it knows.
func ParserForCommand(cmd string) (string, bool) {
	switch {
	case strings.Contains(cmd, "runtests.py"):
		return ParserDjango, true
	case strings.Contains(cmd, "bin/test"):
		return ParserSympy, true
	case strings.Contains(cmd, "unittest"):
		return ParserUnittest, true
	case strings.Contains(cmd, "pytest"), strings.Contains(cmd, "py.test"), strings.Contains(cmd, "tox"):
		return ParserPytest, true
	}
	return "", false
}

func (in *Instance) derive(field string) {
	if !slices.Contains(in.Derived, field) {
		in.Derived = append(in.Derived, field)
	}
}

// TestCommand is the full command that runs the instance's tests: test_cmd
// followed by its test directives.
func (in *Instance) TestCommand() (string, error) {
	if in.TestCmd == "" {
		return "", fmt.Errorf("instance %s: no test_cmd, and repo %q is not in the spec table", in.InstanceID, in.Repo)
	}
	if len(in.TestDirectives) == 0 {
		return in.TestCmd, nil
	}
	return in.TestCmd + " " + strings.Join(in.TestDirectives, " "), nil
}
