package mine

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/reward"
	"github.com/swetui/swetui/task"
)

// SrcSetup puts a src-layout repository's package on the path: an
// environment activation, the kind of line an instance's setup holds.
const SrcSetup = "export PYTHONPATH=$PWD/src"

// TestFraction is the share of mined instances put in the test split
// (task.IsTest on the instance id, so it never changes).
const TestFraction = 0.25

// Record is a mined instance as the dataset holds it: the seven fields
// every instance needs, the problem statement and date, what the miner set
// to run its tests, and the split.
type Record struct {
	InstanceID       string   `json:"instance_id"`
	Repo             string   `json:"repo"`
	BaseCommit       string   `json:"base_commit"`
	CreatedAt        string   `json:"created_at"`
	ProblemStatement string   `json:"problem_statement"`
	Patch            string   `json:"patch"`
	TestPatch        string   `json:"test_patch"`
	FailToPass       []string `json:"FAIL_TO_PASS"`
	PassToPass       []string `json:"PASS_TO_PASS"`
	Setup            string   `json:"setup,omitempty"`
	TestDirectives   []string `json:"test_directives,omitempty"`
	Split            string   `json:"split"`
}

// InstanceID is the id of repo's ("owner/name") instance from commit:
// owner__name-<first 7 hex digits>.
func InstanceID(repo, commit string) string {
	return task.RepoDirName(repo) + "-" + commit[:min(7, len(commit))]
}

// NewRecord makes the record of a candidate of repo, its test lists still
// empty.
func NewRecord(repo string, c Candidate) Record {
	r := Record{
		InstanceID:       InstanceID(repo, c.Commit),
		Repo:             repo,
		BaseCommit:       c.Parent,
		CreatedAt:        c.Date.UTC().Format(time.RFC3339),
		ProblemStatement: c.Message,
		Patch:            c.Patch,
		TestPatch:        c.TestPatch,
		FailToPass:       []string{},
		PassToPass:       []string{},
	}
	if c.SrcLayout {
		r.Setup = SrcSetup
	}
	// A test file the commit deletes cannot be run: the directives are the
	// derived ones less those.
	if deleted := deletedFiles(c.TestPatch); len(deleted) > 0 {
		dirs := slices.DeleteFunc(task.TestDirectives(repo, c.TestPatch), func(d string) bool { return slices.Contains(deleted, d) })
		if len(dirs) > 0 {
			r.TestDirectives = dirs
		}
	}
	r.Split = task.SplitTrain
	if task.IsTest(r.InstanceID, TestFraction) {
		r.Split = task.SplitTest
	}
	return r
}

// deletedFiles lists the files a diff deletes.
func deletedFiles(diff string) []string {
	var out []string
	for _, fc := range task.PatchFiles(diff) {
		if fc.New == "" {
			out = append(out, fc.Old)
		}
	}
	return out
}

// Instance is the task.Instance the record's tests run as, with the
// execution fields derived as the loader derives them, on image.
func (r Record) Instance(image string) task.Instance {
	in := task.Instance{
		InstanceID: r.InstanceID, Repo: r.Repo, BaseCommit: r.BaseCommit, ProblemStatement: r.ProblemStatement,
		Patch: r.Patch, TestPatch: r.TestPatch, FailToPass: r.FailToPass, PassToPass: r.PassToPass,
		CreatedAt: r.CreatedAt, Setup: r.Setup, TestDirectives: r.TestDirectives, Split: r.Split,
	}
	in.ApplySpec()
	in.Image = image
	return in
}

// Reasons a candidate is not kept, as Verify gives them. A missing module
// is given as "missing module <name>".
const (
	SkipNoTestFile    = "the test patch only deletes test files"
	SkipHackFlagged   = "gold patch hack-flagged"
	SkipGoldNoApply   = "gold patch does not apply"
	SkipTestNoApply   = "test patch does not apply"
	SkipTimeout       = "tests timed out"
	SkipInfra         = "infrastructure failure"
	SkipUsageError    = "test runner usage error"
	SkipCollection    = "collection error after the fix"
	SkipNothingPasses = "no test passes after the fix"
	SkipNoFailToPass  = "no FAIL_TO_PASS"
)

// Outcome is what Verify found for one record.
type Outcome struct {
	FailToPass, PassToPass []string
	Skip                   string   // why it is not kept; "" = kept
	Detail                 string   // more on Skip (the error line, the flags)
	Hacks                  []string // the gold patch's penalised hack flags (reward.CheckHacks)
	Undone                 []string // its flags the evaluation's reset undoes: reported, not penalised
	Evals                  int      // container evaluations run
	Duration               time.Duration
}

// Kept says whether the record becomes an instance.
func (o Outcome) Kept() bool { return o.Skip == "" }

// Verify runs the record's test files through ev: first at base + patch +
// test patch, then, if some test passes there, at base + test patch. A test
// failing (or missing) before and passing after is FAIL_TO_PASS, one
// passing both times PASS_TO_PASS (Classify); the record is kept with at
// least one FAIL_TO_PASS test. Each evaluation is bounded by ev's timeout.
func Verify(ctx context.Context, ev reward.Evaluator, r Record, image string) (o Outcome) {
	start := time.Now()
	defer func() { o.Duration = time.Since(start) }()
	// A gold patch the scorer penalises (it reaches into the runner,
	// shadows it, ...) could never resolve. Flags the evaluation's reset
	// undoes (a fix that also edits tox.ini or setup.cfg) cost nothing:
	// such commits are kept.
	gold, _ := reward.ReadDiff(r.Patch)
	fl := reward.CheckHacks(gold, task.Paths(task.PatchFiles(r.TestPatch)))
	o.Hacks, o.Undone = fl.Hacks, fl.Undone
	if len(o.Hacks) > 0 {
		o.Skip, o.Detail = SkipHackFlagged+": "+o.Hacks[0], strings.Join(o.Hacks, ", ")
		return o
	}
	in := r.Instance(image)
	// No directive runs the whole suite (a test patch of data files only);
	// directives that all name deleted files run nothing.
	if len(in.TestDirectives) > 0 && !slices.ContainsFunc(in.TestDirectives, func(d string) bool { return !slices.Contains(deletedFiles(r.TestPatch), d) }) {
		o.Skip = SkipNoTestFile
		return o
	}
	parser, err := reward.ParserFor(in.LogParser)
	if err != nil {
		o.Skip, o.Detail = SkipInfra, err.Error()
		return o
	}
	run := func(diff string) (event.StatusMap, reward.EvalOutput, bool) {
		o.Evals++
		out := ev.Evaluate(ctx, reward.EvalRequest{Instance: &in, Diff: diff})
		switch {
		case out.Infra != nil && strings.Contains(out.Infra.Error(), "test patch did not apply"):
			o.Skip, o.Detail = SkipTestNoApply, out.Infra.Error()
		case out.Infra != nil:
			o.Skip, o.Detail = SkipInfra, out.Infra.Error()
		case out.ApplyMethod == reward.ApplyFailed:
			o.Skip = SkipGoldNoApply
		case out.TimedOut || out.DiskLimit:
			o.Skip = SkipTimeout
		case !out.Complete:
			o.Skip, o.Detail = SkipInfra, "test runner output incomplete"
		default:
			return parser(out.TestLog), out, true
		}
		return nil, out, false
	}
	after, out, ok := run(r.Patch)
	if !ok {
		return o
	}
	if !slices.ContainsFunc(mapKeys(after), func(id string) bool { return passed(after[id]) }) {
		o.Skip, o.Detail = notRunning(out.TestLog, out.ExitStatus)
		return o
	}
	before, _, ok := run("")
	if !ok {
		return o
	}
	o.FailToPass, o.PassToPass = Classify(before, after)
	if len(o.FailToPass) == 0 {
		o.Skip = SkipNoFailToPass
	}
	return o
}

var (
	missingModule = regexp.MustCompile(`No module named '([^']+)'`)
	errorLine     = regexp.MustCompile(`(?m)^E +([A-Za-z_.]*(?:Error|Exception)\b.*)$`)
)

// notRunning says why no test passed after the fix: a module the image
// lacks, a collection error, the runner refusing its arguments, or tests
// that run and fail.
func notRunning(log string, exit int) (string, string) {
	if m := missingModule.FindStringSubmatch(log); m != nil {
		return "missing module " + strings.SplitN(m[1], ".", 2)[0], m[0]
	}
	detail := ""
	if m := errorLine.FindStringSubmatch(log); m != nil {
		detail = strings.TrimSpace(m[1])
	}
	switch exit {
	case 2:
		return SkipCollection, detail
	case 4:
		return SkipUsageError, lastLine(log)
	}
	return SkipNothingPasses, detail
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// unstableID matches a test id that holds an object's address: it changes
// from run to run, so no list may name it.
var unstableID = regexp.MustCompile(`0x[0-9a-fA-F]{6,}`)

// Classify compares the statuses of the tests before the fix (base + test
// patch) and after it, as the grader reads them: FAIL_TO_PASS are the tests
// that pass after and failed, errored or were missing before; PASS_TO_PASS
// those that pass both times. A test skipped before is in neither list
// (the grader would count it as passing an empty patch), nor is a test
// whose id holds an address. Both lists are sorted.
func Classify(before, after event.StatusMap) (f2p, p2p []string) {
	f2p, p2p = []string{}, []string{}
	for id, st := range after {
		if !passed(st) || unstableID.MatchString(id) || strings.HasPrefix(id, "[") {
			continue
		}
		b, ok := before[id]
		switch {
		case ok && passed(b):
			p2p = append(p2p, id)
		case !ok || b == event.Failed || b == event.Errored:
			f2p = append(f2p, id)
		}
	}
	sort.Strings(f2p)
	sort.Strings(p2p)
	return f2p, p2p
}

// passed is the grader's reading of a passing test.
func passed(s event.Status) bool { return s == event.Passed || s == event.XFail }

func mapKeys(m event.StatusMap) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// Summary counts a mining run's outcomes by reason.
type Summary struct {
	Commits    int
	Candidates int
	Verified   int
	Kept       int
	Packaging  int            // kept instances whose gold patch changes packaging or config files
	Skipped    map[string]int // by reason, Scan's and Verify's
}

// String is the summary as `swetui mine` prints it.
func (s Summary) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "commits %d, candidates %d, verified %d, kept %d (%d with packaging/config changes)\n",
		s.Commits, s.Candidates, s.Verified, s.Kept, s.Packaging)
	reasons := make([]string, 0, len(s.Skipped))
	for r := range s.Skipped {
		reasons = append(reasons, r)
	}
	sort.Slice(reasons, func(i, j int) bool {
		if s.Skipped[reasons[i]] != s.Skipped[reasons[j]] {
			return s.Skipped[reasons[i]] > s.Skipped[reasons[j]]
		}
		return reasons[i] < reasons[j]
	})
	for _, r := range reasons {
		fmt.Fprintf(&b, "  skipped %5d  %s\n", s.Skipped[r], r)
	}
	return b.String()
}

// VerifyAll verifies recs a batch of par at a time (at once within a
// batch), in recs' order, until limit are kept (0: no bound); each is told
// every record's outcome in that order, with whether it was kept (an
// outcome that would be kept past limit is not). It returns the kept
// records, their FAIL_TO_PASS and PASS_TO_PASS filled in: the first limit in
// recs' order, whatever order a batch finished in.
func VerifyAll(ctx context.Context, ev reward.Evaluator, recs []Record, image string, par, limit int, each func(i int, r Record, o Outcome, kept bool)) ([]Record, error) {
	par = max(par, 1)
	var kept []Record
	for lo := 0; lo < len(recs) && (limit == 0 || len(kept) < limit); lo += par {
		hi := min(lo+par, len(recs))
		outs := make([]Outcome, hi-lo)
		var wg sync.WaitGroup
		for i := lo; i < hi; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				outs[i-lo] = Verify(ctx, ev, recs[i], image)
			}()
		}
		wg.Wait()
		if err := ctx.Err(); err != nil {
			return kept, err
		}
		for i := lo; i < hi; i++ {
			o, r := outs[i-lo], recs[i]
			keep := o.Kept() && (limit == 0 || len(kept) < limit)
			if keep {
				r.FailToPass, r.PassToPass = o.FailToPass, o.PassToPass
				kept = append(kept, r)
			}
			each(i, r, o, keep)
		}
	}
	return kept, nil
}
