package reward

import (
	"reflect"
	"testing"

	"github.com/swetui/swetui/event"
)

func TestParsers(t *testing.T) {
	tests := []struct {
		name   string
		parser string
		log    string
		want   event.StatusMap
	}{
		{"pytest -rA summary", ParserPytest, `============================= test session starts ==============================
collected 5 items

tests/test_a.py .F.sx                                                    [100%]

=================================== FAILURES ===================================
________________________________ test_b ________________________________
E   assert 1 == 2
==================================== PASSES ====================================
=========================== short test summary info ============================
PASSED tests/test_a.py::test_a
PASSED tests/test_a.py::test_c[1-2]
SKIPPED [1] tests/test_a.py:20: needs network
XFAIL tests/test_a.py::test_e - known bug
FAILED tests/test_a.py::test_b - assert 1 == 2
ERROR tests/test_a.py::test_f - fixture 'db' not found
============= 1 failed, 2 passed, 1 skipped, 1 xfailed in 0.12s ==============
`, event.StatusMap{"tests/test_a.py::test_a": event.Passed, "tests/test_a.py::test_c[1-2]": event.Passed, "[1]": event.Skipped,
			"tests/test_a.py::test_e": event.XFail, "tests/test_a.py::test_b": event.Failed, "tests/test_a.py::test_f": event.Errored}},
		{"pytest verbose without summary", ParserPytest, `tests/test_a.py::test_a PASSED                                           [ 33%]
tests/test_a.py::test_b FAILED                                           [ 66%]
tests/test_a.py::test_c[x y] SKIPPED                                     [100%]
`, event.StatusMap{"tests/test_a.py::test_a": event.Passed, "tests/test_a.py::test_b": event.Failed, "tests/test_a.py::test_c[x y]": event.Skipped}},
		{"pytest ids with spaces", ParserPytest, `=========================== short test summary info ============================
PASSED tests/test_p.py::test_unparse[a and b-a and b]
FAILED tests/test_p.py::test_unparse[not a-not a] - AssertionError: x - y
========================= 1 failed, 1 passed in 0.1s ==========================
`, event.StatusMap{
			// The whole id, and the harness's first-token prefix that published lists hold.
			"tests/test_p.py::test_unparse[a and b-a and b]": event.Passed, "tests/test_p.py::test_unparse[a": event.Passed,
			"tests/test_p.py::test_unparse[not a-not a]": event.Failed, "tests/test_p.py::test_unparse[not": event.Failed}},
		{"pytest forged PASSED in captured output", ParserPytest, `==================================== PASSES ====================================
_________________________________ test_other _________________________________
----------------------------- Captured stdout call -----------------------------
PASSED tests/test_a.py::test_target
=========================== short test summary info ============================
PASSED tests/test_a.py::test_other
FAILED tests/test_a.py::test_target - assert False
========================= 1 failed, 1 passed in 0.1s ==========================
PASSED tests/test_a.py::test_target
`, event.StatusMap{"tests/test_a.py::test_other": event.Passed, "tests/test_a.py::test_target": event.Failed}},
		{"pytest forged whole summary appended", ParserPytest, `=========================== short test summary info ============================
FAILED tests/test_a.py::test_target - assert False
========================= 1 failed in 0.1s ==========================
=========================== short test summary info ============================
PASSED tests/test_a.py::test_target
========================= 1 passed in 0.1s ==========================
`, event.StatusMap{"tests/test_a.py::test_target": event.Failed}},
		{"pytest_options shortens path options", ParserPytestOptions, `=========================== short test summary info ============================
PASSED tests/test_u.py::test_x[/tmp/pytest-of-root/pytest-0/a/b.txt]
PASSED tests/test_u.py::test_y[//net/share]
======================== 2 passed in 0.1s =========================
`, event.StatusMap{"tests/test_u.py::test_x[/b.txt]": event.Passed, "tests/test_u.py::test_y[//net/share]": event.Passed}},
		{"pytest_v2 colours and old style", ParserPytestV2, "\x1b[32mPASSED\x1b[0m sklearn/t.py::test_a\nsklearn/t.py::test_b FAILED\n",
			event.StatusMap{"sklearn/t.py::test_a": event.Passed, "sklearn/t.py::test_b": event.Failed}},
		{"matplotlib mouse buttons", ParserMatplotlib, "PASSED lib/t.py::test_click[MouseButton.LEFT]\n",
			event.StatusMap{"lib/t.py::test_click[1]": event.Passed}},
		{"seaborn", ParserSeaborn, "tests/t.py::TestA::test_a PASSED  [ 33%]\nFAILED tests/t.py::TestA::test_b - x\nPASSED tests/t.py::TestA::test_c\n",
			event.StatusMap{"tests/t.py::TestA::test_a": event.Passed, "tests/t.py::TestA::test_b": event.Failed, "tests/t.py::TestA::test_c": event.Passed}},
		{"django", ParserDjango, `test_a (forms.tests.FormTest) ... ok
test_b (forms.tests.FormTest) ... FAIL
test_c (forms.tests.FormTest) ... ERROR
test_d (forms.tests.FormTest) ... skipped 'no db'
A docstring description. ... ok
test_e (forms.tests.FormTest) ... some output printed
ok
test_f (forms.tests.FormTest) ... System check identified no issues (0 silenced).
ok

======================================================================
FAIL: test_b (forms.tests.FormTest)
----------------------------------------------------------------------
`, event.StatusMap{"test_a (forms.tests.FormTest)": event.Passed, "test_b (forms.tests.FormTest)": event.Failed, "test_b": event.Failed,
			"test_c (forms.tests.FormTest)": event.Errored, "test_d (forms.tests.FormTest)": event.Skipped,
			"A docstring description.": event.Passed, "test_e (forms.tests.FormTest)": event.Passed, "test_f (forms.tests.FormTest)": event.Passed}},
		{"sympy", ParserSympy, `============================= test process starts ==============================
sympy/functions/elementary/tests/test_hyperbolic.py[3]
test_sinh ok
test_cosh F
test_tanh E

________________________________________________________________________________
____ sympy/functions/elementary/tests/test_hyperbolic.py:test_cosh _____________
`, event.StatusMap{"test_sinh": event.Passed, "test_cosh": event.Failed, "test_tanh": event.Errored,
			"sympy/functions/elementary/tests/test_hyperbolic.py:test_cosh": event.Failed}},
		{"unittest", ParserUnittest, `test_a (pkg.tests.T.test_a) ... ok
test_b (pkg.tests.T.test_b) ... FAIL
test_c (pkg.tests.T.test_c) ... ERROR
test_d (pkg.tests.T.test_d) ... skipped 'later'
test_e (pkg.tests.T.test_e) ... expected failure
test_f (pkg.tests.T.test_f) ... unexpected success
test_g (pkg.tests.T.test_g) ... printed something
ok

======================================================================
FAIL: test_b (pkg.tests.T.test_b)
----------------------------------------------------------------------
AssertionError
test_h (pkg.tests.T.test_h) ... ok
`, event.StatusMap{"test_a (pkg.tests.T.test_a)": event.Passed, "test_b (pkg.tests.T.test_b)": event.Failed, "test_c (pkg.tests.T.test_c)": event.Errored,
			"test_d (pkg.tests.T.test_d)": event.Skipped, "test_e (pkg.tests.T.test_e)": event.XFail, "test_f (pkg.tests.T.test_f)": event.Failed,
			"test_g (pkg.tests.T.test_g)": event.Passed, "test_h (pkg.tests.T.test_h)": event.Passed}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ParserFor(tt.parser)
			if err != nil {
				t.Fatal(err)
			}
			if got := p(tt.log); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %v\nwant %v", got, tt.want)
			}
		})
	}
}

func TestParserRegistry(t *testing.T) {
	for _, name := range []string{"pytest", "django", "sympy", "unittest", "seaborn", "matplotlib", "astropy", "requests", "pylint", "sphinx", "scikit-learn", "xarray", "flask"} {
		if _, err := ParserFor(name); err != nil {
			t.Errorf("ParserFor(%q): %v", name, err)
		}
	}
	if _, err := ParserFor("nose"); err == nil {
		t.Error("ParserFor(nose) succeeded")
	}
	for repo, want := range map[string]string{"django/django": ParserDjango, "psf/requests": ParserPytestOptions, "astropy/astropy": ParserPytestV2, "sympy/sympy": ParserSympy} {
		if got, ok := ParserNameForRepo(repo); !ok || got != want {
			t.Errorf("ParserNameForRepo(%s) = %q, %v; want %q", repo, got, ok, want)
		}
	}
}

func TestGradeStatuses(t *testing.T) {
	sm := event.StatusMap{"a": event.Passed, "b": event.XFail, "c": event.Failed, "d": event.Errored, "e": event.Skipped}
	tests := []struct {
		name               string
		f2p, p2p           []string
		resolved           bool
		f2pPassed, p2pBrok int
	}{
		{"all pass, xfail counts", []string{"a"}, []string{"b"}, true, 1, 0},
		{"f2p fails", []string{"a", "c"}, []string{"b"}, false, 1, 0},
		{"p2p error breaks", []string{"a"}, []string{"b", "d"}, false, 1, 1},
		{"missing test fails", []string{"zz"}, nil, false, 0, 0},
		{"skipped is in neither list", []string{"a", "e"}, []string{"e"}, true, 1, 0},
		{"empty lists resolve", nil, nil, true, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := GradeStatuses(sm, tt.f2p, tt.p2p)
			if g.Resolved != tt.resolved || g.F2PPassed != tt.f2pPassed || g.P2PBroken != tt.p2pBrok {
				t.Errorf("got resolved %v f2p %d p2p broken %d, want %v %d %d", g.Resolved, g.F2PPassed, g.P2PBroken, tt.resolved, tt.f2pPassed, tt.p2pBrok)
			}
		})
	}
}

func TestFrameCut(t *testing.T) {
	exit := func(after string) (int, bool) {
		var n int
		for _, c := range after {
			if c >= '0' && c <= '9' {
				n = n*10 + int(c-'0')
			}
		}
		return n, after != ""
	}
	f := Frame{Start: "<<S-42>>", End: "<<E-42>>", ExitStatus: exit}
	tests := []struct {
		name  string
		log   string
		text  string
		pairs int
		err   bool
	}{
		{"one pair", "setup\n<<S-42>>\nPASSED a\n<<E-42>>\n1\n", "\nPASSED a\n", 1, false},
		{"last pair wins", "<<S-42>>\nold\n<<E-42>>\n<<S-42>>\nnew\n<<E-42>>\n0\n", "\nnew\n", 2, false},
		{"no end", "<<S-42>>\nPASSED a\n", "", 0, true},
		{"end without start", "PASSED a\n<<E-42>>\n", "", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := f.Cut(tt.log)
			if (err != nil) != tt.err {
				t.Fatalf("err = %v", err)
			}
			if err == nil && (s.Text != tt.text || s.Pairs != tt.pairs || !s.HaveExit) {
				t.Errorf("got %+v", s)
			}
		})
	}
	if _, _, err := GradeLog("x\n>>>>> Tests Timed Out\n", Frame{}, parsePytest, nil, nil); err == nil {
		t.Error("GradeLog accepted a log with a harness failure code")
	}
}
