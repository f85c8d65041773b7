package reward

import (
	"errors"
	"fmt"
	"strings"

	"github.com/swetui/swetui/event"
)

// Grade is the verdict on one test log.
type Grade struct {
	Statuses    event.StatusMap   `json:"statuses"`
	TestsStatus event.TestsStatus `json:"tests_status"`
	Resolved    bool              `json:"resolved"`
	F2PPassed   int               `json:"f2p_passed"`
	F2PTotal    int               `json:"f2p_total"` // len(FAIL_TO_PASS)
	P2PPassed   int               `json:"p2p_passed"`
	P2PBroken   int               `json:"p2p_broken"` // failed, errored or missing
	P2PTotal    int               `json:"p2p_total"`  // len(PASS_TO_PASS)
}

func testPassed(s event.Status, ok bool) bool { return ok && (s == event.Passed || s == event.XFail) }

func testFailed(s event.Status, ok bool) bool { return !ok || s == event.Failed || s == event.Errored }

// GradeStatuses grades a status map against an instance's FAIL_TO_PASS and
// PASS_TO_PASS lists exactly as the official harness does: a test passes when
// PASSED or XFAIL, fails when FAILED, ERROR or absent from the log, and is in
// neither list otherwise (SKIPPED); resolved means no listed test failed.
func GradeStatuses(sm event.StatusMap, f2p, p2p []string) Grade {
	g := Grade{Statuses: sm, F2PTotal: len(f2p), P2PTotal: len(p2p)}
	g.TestsStatus = event.TestsStatus{
		FailToPass: classify(sm, f2p),
		PassToPass: classify(sm, p2p),
		FailToFail: event.SuccessFailure{Success: []string{}, Failure: []string{}},
		PassToFail: event.SuccessFailure{Success: []string{}, Failure: []string{}},
	}
	g.F2PPassed = len(g.TestsStatus.FailToPass.Success)
	g.P2PPassed = len(g.TestsStatus.PassToPass.Success)
	g.P2PBroken = len(g.TestsStatus.PassToPass.Failure)
	// The harness's FULL resolution: both ratios success/(success+failure)
	// equal 1, an empty category counting as 1.
	g.Resolved = len(g.TestsStatus.FailToPass.Failure) == 0 && len(g.TestsStatus.PassToPass.Failure) == 0
	return g
}

func classify(sm event.StatusMap, tests []string) event.SuccessFailure {
	r := event.SuccessFailure{Success: []string{}, Failure: []string{}}
	for _, t := range tests {
		s, ok := sm[t]
		switch {
		case testPassed(s, ok):
			r.Success = append(r.Success, t)
		case testFailed(s, ok):
			r.Failure = append(r.Failure, t)
		}
	}
	return r
}

// The harness writes these lines into a log when an evaluation went wrong
// before or around the tests; a log carrying one is not graded.
var harnessBadCodes = []string{
	">>>>> Patch Apply Failed",
	">>>>> Reset Failed",
	">>>>> Tests Errored",
	">>>>> Tests Timed Out",
}

// Frame says where the test runner's output lies in an evaluation log.
// The zero Frame takes the whole log, as for harness logs without markers.
type Frame struct {
	Start, End string // unique per evaluation, printed around the test command
	// ExitStatus, when set, reads the runner's exit status from the text after
	// the End marker; ok false means it is missing.
	ExitStatus func(afterEnd string) (code int, ok bool)
}

// Section is the test output cut from a log by a Frame.
type Section struct {
	Text      string
	Pairs     int  // marker pairs seen; more than one means forged markers
	Exit      int  // the runner's exit status, when HaveExit
	HaveExit  bool //
	Unmarked  bool // the whole log was taken (zero Frame)
	StrayEnds int  // end markers without a start before them
}

// ErrNoTestOutput means the log has no complete marker pair: the tests never
// ran to the end (the container died, the harness timed out, or the apply
// failed before them).
var ErrNoTestOutput = errors.New("no test output between markers")

// Cut takes the test output between the LAST start/end marker pair. Markers
// are random per evaluation, so a patch cannot print them; should it print
// look-alikes anyway, later real markers still win and Pairs reports it.
func (f Frame) Cut(log string) (Section, error) {
	if f.Start == "" || f.End == "" {
		return Section{Text: log, Unmarked: true}, nil
	}
	end := strings.LastIndex(log, f.End)
	if end < 0 {
		return Section{}, fmt.Errorf("end marker %q: %w", f.End, ErrNoTestOutput)
	}
	start := strings.LastIndex(log[:end], f.Start)
	if start < 0 {
		return Section{}, fmt.Errorf("start marker %q: %w", f.Start, ErrNoTestOutput)
	}
	s := Section{Text: log[start+len(f.Start) : end]}
	s.Pairs = min(strings.Count(log, f.Start), strings.Count(log, f.End))
	if f.ExitStatus != nil {
		s.Exit, s.HaveExit = f.ExitStatus(log[end+len(f.End):])
	}
	return s, nil
}

// GradeLog grades an evaluation log: it cuts the test output with frame,
// parses it with parser and grades it against f2p and p2p. A log carrying one
// of the harness's failure codes grades as an error, as in the harness.
func GradeLog(log string, frame Frame, parser Parser, f2p, p2p []string) (Grade, Section, error) {
	for _, code := range harnessBadCodes {
		if strings.Contains(log, code) {
			return Grade{}, Section{}, fmt.Errorf("grade log: harness reported %q", code)
		}
	}
	sec, err := frame.Cut(log)
	if err != nil {
		return Grade{}, sec, fmt.Errorf("grade log: %w", err)
	}
	return GradeStatuses(parser(sec.Text), f2p, p2p), sec, nil
}
