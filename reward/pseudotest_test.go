package reward

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/swetui/swetui/event"
)

// pytest5227Log has the shape of a pytest-dev__pytest-5227 evaluation:
// pytest's own tests run nested sessions whose verbose output, replayed by
// -rA in the PASSES section, puts the progress column on a line of its own.
const pytest5227Log = `============================= test session starts ==============================
collected 4 items

testing/logging/test_reporting.py ....                                   [100%]

==================================== PASSES ====================================
_____________________________ test_nothing_logged ______________________________
----------------------------- Captured stdout call -----------------------------
============================= test session starts ==============================
collecting ... collected 1 item

test_nothing_logged.py::test_foo 
PASSED [100%]
=========================== 1 passed in 0.01 seconds ===========================
_____________________________ test_messages_logged _____________________________
----------------------------- Captured stdout call -----------------------------
collecting ... collected 2 items

test_messages_logged.py::test_foo 
PASSED [ 50%]
test_messages_logged.py::test_bar 
PASSED [100%]------------------------------ Captured log call -------------------------------
FAILED test_messages_logged.py::test_inner - the nested run's own failure
=========================== short test summary info ============================
PASSED testing/logging/test_reporting.py::test_nothing_logged
PASSED testing/logging/test_reporting.py::test_messages_logged
PASSED testing/logging/test_formatter.py::test_coloredlogformatter
FAILED testing/logging/test_reporting.py::test_target - before the fix
=========================== 1 failed, 3 passed in 0.30 seconds =================
`

// TestPseudoTestsAsTheHarnessCounts reproduces the official verdicts that
// count pytest's progress column ("[100%]", "[") as tests in PASS_TO_PASS:
// with the instance's published list, a log in which every real test passes
// resolves, and one in which a real test fails does not.
func TestPseudoTestsAsTheHarnessCounts(t *testing.T) {
	var p2p []string
	f, err := os.Open(filepath.Join(realdataDir(t), "swebench_lite_sample30.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var rec struct {
			ID  string `json:"instance_id"`
			P2P string `json:"PASS_TO_PASS"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatal(err)
		}
		if rec.ID == "pytest-dev__pytest-5227" {
			if err := json.Unmarshal([]byte(rec.P2P), &p2p); err != nil {
				t.Fatal(err)
			}
		}
	}
	pseudo := 0
	for _, id := range p2p {
		if isPseudoTest(id) {
			pseudo++
		}
	}
	if pseudo != 3 {
		t.Fatalf("pytest-dev__pytest-5227's PASS_TO_PASS has %d pseudo-tests, want 3: %q", pseudo, p2p)
	}
	parser, err := ParserFor(ParserPytest)
	if err != nil {
		t.Fatal(err)
	}
	sm := parser(pytest5227Log)
	for _, id := range []string{"[100%]", "[", "[100%]------------------------------"} {
		if sm[id] != event.Passed {
			t.Errorf("status of pseudo-test %q = %q, want PASSED", id, sm[id])
		}
	}
	// The nested run's ids stay out, as before: only summary sections count.
	if _, ok := sm["test_messages_logged.py::test_inner"]; ok {
		t.Errorf("a nested run's id outside the summary was read: %v", sm)
	}
	tests := []struct {
		name     string
		f2p, p2p []string
		resolved bool
	}{
		{"pseudo-tests pass", []string{"testing/logging/test_reporting.py::test_nothing_logged"},
			[]string{"[100%]", "[", "[100%]------------------------------", "testing/logging/test_formatter.py::test_coloredlogformatter"}, true},
		{"a real test fails", []string{"testing/logging/test_reporting.py::test_target"}, []string{"[100%]", "["}, false},
		{"a pseudo-test that never printed", []string{"testing/logging/test_reporting.py::test_nothing_logged"}, []string{"[ 25%]"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if g := GradeStatuses(sm, tt.f2p, tt.p2p); g.Resolved != tt.resolved {
				t.Errorf("resolved %v, want %v (%+v)", g.Resolved, tt.resolved, g.TestsStatus)
			}
		})
	}
}
