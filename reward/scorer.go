package reward

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/sandbox"
	"github.com/swetui/swetui/task"
)

// EvalRequest is one container evaluation: the instance's tests run on its
// image after Diff is applied with the fallback chain.
type EvalRequest struct {
	Instance *task.Instance
	Diff     string
	// ApplyOnly asks for the apply step alone: no test patch, no tests.
	ApplyOnly bool
}

// EvalOutput is what one container evaluation showed: its log cut along the
// eval script's protocol lines (sandbox.Output: the apply method, the
// runner's output between the last marker pair, its exit status when
// Complete, forged lines), and how the container ended. In an apply-only
// evaluation Complete says the apply line was seen.
type EvalOutput struct {
	sandbox.Output
	Log       string // the whole captured log
	TimedOut  bool   // the container hit its deadline and was killed
	DiskLimit bool   // the evaluation wrote past the disk bound and was killed
	Infra     error  // the evaluation failed for reasons that are not the model's
	Duration  time.Duration
}

// Evaluator runs container evaluations (the docker phase). PoolEvaluator is
// the sandbox-backed one.
type Evaluator interface {
	Evaluate(ctx context.Context, req EvalRequest) EvalOutput
}

// Scorer scores a group of completions of one task in a phase. Extraction,
// syntax and host-side apply checks run concurrently on the host; test runs
// go to the Evaluator. Safe for concurrent use.
type Scorer struct {
	Weights Weights
	// Applier checks applies on the host (reward.apply_on_host); nil sends
	// apply-only checks to the Evaluator as well.
	Applier *Applier
	// Evaluator runs tests in containers; nil makes docker phase (and
	// apply-only without an Applier) an infrastructure failure.
	Evaluator Evaluator
	// Parallel bounds concurrent host-side checks (default GOMAXPROCS).
	Parallel int
	// Limits bound what a patch may be before anything applies it
	// (reward.max_patch_*); the zero value sets none.
	Limits PatchLimits

	semOnce sync.Once
	sem     chan struct{}
}

// NewScorer builds a Scorer from the [reward] config: its weights, and a host
// Applier over reward.repos_dir when reward.apply_on_host is set.
func NewScorer(c config.Reward, ev Evaluator) *Scorer {
	s := &Scorer{Weights: WeightsFrom(c), Evaluator: ev, Limits: PatchLimitsFrom(c)}
	if c.ApplyOnHost {
		s.Applier = &Applier{ReposDir: c.ReposDir}
	}
	return s
}

// Close releases the Applier's temporary cache.
func (s *Scorer) Close() error {
	if s.Applier != nil {
		return s.Applier.Close()
	}
	return nil
}

func (s *Scorer) acquire(ctx context.Context) error {
	s.semOnce.Do(func() {
		n := s.Parallel
		if n <= 0 {
			n = runtime.GOMAXPROCS(0)
		}
		s.sem = make(chan struct{}, n)
	})
	select {
	case s.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Scorer) release() { <-s.sem }

// Score scores completions (model outputs, from which diffs are extracted) of
// inst in a curriculum phase, one Verdict per completion in order. Identical
// diffs are scored once. The error is set only for a bad phase or a cancelled ctx;
// infrastructure failures are per Result (Infra), to be masked.
func (s *Scorer) Score(ctx context.Context, inst *task.Instance, completions []string, phase string) ([]event.Verdict, error) {
	return s.score(ctx, inst, completions, phase, false)
}

// ScoreDiffs scores diffs given as such (predictions' model_patch): they are
// normalised and validated like extracted ones, but not searched for in
// prose first unless they are wrapped.
func (s *Scorer) ScoreDiffs(ctx context.Context, inst *task.Instance, diffs []string, phase string) ([]event.Verdict, error) {
	return s.score(ctx, inst, diffs, phase, true)
}

func (s *Scorer) score(ctx context.Context, inst *task.Instance, texts []string, phase string, rawDiffs bool) ([]event.Verdict, error) {
	if err := config.CheckPhase(phase); err != nil {
		return nil, fmt.Errorf("score %s: %w", inst.InstanceID, err)
	}
	results := make([]event.Verdict, len(texts))
	// Extraction first (microseconds), so that duplicates are known.
	first := map[string]int{}
	var todo []int
	parsed := make([]*Patch, len(texts))                     // the syntax-valid ones, for shaping
	testFiles := task.Paths(task.PatchFiles(inst.TestPatch)) // what the eval resets
	for i, t := range texts {
		start := time.Now()
		r := &results[i]
		*r = event.Verdict{InstanceID: inst.InstanceID, Phase: phase, NonEmpty: strings.TrimSpace(t) != ""}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("score %s: %w", inst.InstanceID, err)
		}
		// A text over the byte limit is refused unread (its diff is no
		// smaller than the limit allows): extracting it is work too.
		if over := s.Limits.overBytes(len(t)); over != "" {
			r.Oversize, r.SyntaxError = true, over
			r.Durations.Extract = time.Since(start)
			todo = append(todo, i)
			continue
		}
		var e Extraction
		if rawDiffs {
			e = Extract(NormalizeDiff(t))
		} else {
			e = Extract(t)
		}
		r.Form, r.Patch = e.Form, e.Diff
		r.SyntaxOK = e.Valid()
		if e.Err != nil {
			r.SyntaxError = e.Err.Error()
		} else if !r.SyntaxOK && r.NonEmpty {
			r.SyntaxError = "no diff found"
		}
		if e.Patch != nil {
			r.Files = len(e.Patch.Files)
			if over := s.Limits.Check(e.Patch, len(e.Diff)); over != "" {
				r.SyntaxOK, r.Oversize, r.SyntaxError = false, true, over
				r.Durations.Extract = time.Since(start)
				todo = append(todo, i)
				continue
			}
		}
		if r.Patch != "" {
			p := e.Patch
			if p == nil {
				p = e.Partial
			}
			f := CheckHacks(p, testFiles)
			r.Hacks, r.HacksUndone = f.Hacks, f.Undone
			// What the reset undoes never reaches the tests: a patch made only
			// of that changes nothing they see.
			r.Noop = f.AllReset
		}
		r.Durations.Extract = time.Since(start)
		if r.SyntaxOK {
			parsed[i] = e.Patch
			if _, dup := first[r.Patch]; dup {
				continue // scored once, copied below
			}
			first[r.Patch] = i
		}
		todo = append(todo, i)
	}
	// The shaping terms' base files are read once for the group.
	var sh *shaping
	if phase != config.PhaseSyntax && s.Weights.shapingOn() && slices.ContainsFunc(parsed, func(p *Patch) bool { return p != nil }) {
		sh = s.newShaping(ctx, inst, parsed)
	}
	var wg sync.WaitGroup
	for _, i := range todo {
		r := &results[i]
		if !r.SyntaxOK || phase == config.PhaseSyntax {
			r.Reward = s.Weights.Compose(r)
			r.Durations.Total = r.Durations.Extract
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			s.deepen(ctx, inst, r, phase)
			if sh != nil {
				sh.shape(r, parsed[i])
			}
			r.Reward = s.Weights.Compose(r)
			r.Durations.Total = r.Durations.Extract + time.Since(start)
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("score %s: %w", inst.InstanceID, err)
	}
	// Copy shared verdicts onto duplicates.
	for i := range results {
		if j, ok := first[results[i].Patch]; ok && j != i && results[i].SyntaxOK {
			dup := results[j]
			dup.NonEmpty, dup.Form = results[i].NonEmpty, results[i].Form
			dup.Durations = results[i].Durations
			results[i] = dup
		}
	}
	return results, nil
}

// deepen takes a syntactically valid diff through the apply check and, in
// docker phase, the tests.
func (s *Scorer) deepen(ctx context.Context, inst *task.Instance, r *event.Verdict, phase string) {
	if s.Applier != nil {
		if err := s.acquire(ctx); err != nil {
			r.Infra, r.InfraCause = true, err.Error()
			return
		}
		start := time.Now()
		res, err := s.Applier.CheckInstance(ctx, inst, r.Patch, nil)
		r.Durations.Apply = time.Since(start)
		s.release()
		switch {
		case err == nil:
			r.ApplyChecked, r.ApplyOnHost = true, true
			r.Applied, r.ApplyMethod, r.ApplyOutput = res.Applied, res.Method, res.Output
			if !res.Applied || phase == config.PhaseApplyOnly {
				return // a patch that does not apply runs no tests
			}
		case phase == config.PhaseApplyOnly && s.Evaluator == nil:
			r.Infra, r.InfraCause = true, err.Error()
			return
		}
		// Host apply unavailable (no local repository): the container
		// applies it instead.
	}
	if s.Evaluator == nil {
		r.Infra, r.InfraCause = true, "phase "+phase+" needs the Docker sandbox, and none is configured"
		return
	}
	parser, err := parserOf(inst)
	if err != nil && phase == config.PhaseDocker {
		r.Infra, r.InfraCause = true, err.Error()
		return
	}
	start := time.Now()
	out := s.Evaluator.Evaluate(ctx, EvalRequest{Instance: inst, Diff: r.Patch, ApplyOnly: phase == config.PhaseApplyOnly})
	r.Durations.Eval = time.Since(start)
	r.Log = out.Log
	if out.Infra != nil {
		r.Infra, r.InfraCause = true, out.Infra.Error()
		return
	}
	if out.Forged {
		r.Hacks = appendFlag(r.Hacks, HackForgedMarkers)
	}
	if out.Shadowed != "" {
		// The prepare script removed a new module that shadows one the
		// image's Python imports from elsewhere (a start-up import of the
		// runner's among them): a shadow, whatever the static check saw.
		r.Hacks = addFlag(r.Hacks, HackShadowsRunner)
		r.HacksUndone = slices.DeleteFunc(r.HacksUndone, func(f string) bool { return f == HackShadowsRunner })
	}
	hostChecked, hostApplied := r.ApplyChecked, r.Applied
	defer func() {
		// The container's verdict stands; a disagreement with the host's is
		// recorded, since the two are meant to be equal.
		r.ApplyMismatch = hostChecked && r.ApplyChecked && !r.Infra && hostApplied != r.Applied
	}()
	switch out.ApplyMethod {
	case "":
		r.Infra, r.InfraCause = true, "evaluation log has no apply line: the script did not get that far"
		return
	case ApplyFailed:
		r.ApplyChecked, r.Applied, r.ApplyMethod, r.ApplyOnHost = true, false, ApplyFailed, false
		return
	default:
		r.ApplyChecked, r.Applied, r.ApplyMethod, r.ApplyOnHost = true, true, out.ApplyMethod, false
	}
	if phase == config.PhaseApplyOnly {
		return
	}
	r.TestsRun = true
	log := out.TestLog
	switch {
	case out.Complete:
		st := out.ExitStatus
		r.ExitStatus = &st
	case out.TimedOut:
		// The patch's code ran past the deadline: the tests give no verdict,
		// so every listed test counts as failed (the harness's
		// ">>>>> Tests Timed Out").
		r.TestsError, log = "tests timed out", ""
	case out.DiskLimit:
		r.TestsError, log = "disk limit: the evaluation wrote past sandbox.disk_mb and was killed", ""
	default:
		// No end marker and exit status: the runner's output cannot be
		// trusted to be whole, so none of it is graded.
		r.TestsError, log = "test runner output incomplete (no end marker or exit status)", ""
	}
	g := GradeStatuses(parser(log), inst.FailToPass, inst.PassToPass)
	r.F2PPassed, r.F2PTotal = g.F2PPassed, g.F2PTotal
	r.P2PPassed, r.P2PBroken, r.P2PTotal = g.P2PPassed, g.P2PBroken, g.P2PTotal
	// A hack-flagged patch is never resolved, whatever its tests say.
	r.Resolved = g.Resolved && out.Complete && len(r.Hacks) == 0
	r.TestsStatus, r.Statuses = &g.TestsStatus, g.Statuses
}

// addFlag adds f to flags in hackOrder's order, once.
func addFlag(flags []string, f string) []string {
	if slices.Contains(flags, f) {
		return flags
	}
	flags = append(flags, f)
	slices.SortStableFunc(flags, func(a, b string) int {
		return slices.Index(hackOrder, a) - slices.Index(hackOrder, b)
	})
	return flags
}

func appendFlag(flags []string, f string) []string {
	for _, x := range flags {
		if x == f {
			return flags
		}
	}
	return append(flags, f)
}

// ParserNameOf is the log parser an instance's tests are read with: its own
// log_parser, else the harness's parser for its repository.
func ParserNameOf(inst *task.Instance) (string, error) {
	if inst.LogParser != "" {
		return inst.LogParser, nil
	}
	if n, ok := ParserNameForRepo(inst.Repo); ok {
		return n, nil
	}
	return "", fmt.Errorf("instance %s: no log_parser and repo %q has no harness parser", inst.InstanceID, inst.Repo)
}

func parserOf(inst *task.Instance) (Parser, error) {
	name, err := ParserNameOf(inst)
	if err != nil {
		return nil, err
	}
	p, err := ParserFor(name)
	if err != nil {
		return nil, fmt.Errorf("instance %s: %w", inst.InstanceID, err)
	}
	return p, nil
}
