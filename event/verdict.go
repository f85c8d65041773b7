package event

import "time"

// What the verifier's gate did with a patch (Verdict.Gate).
const (
	GateSpared  = "spared"
	GateAudited = "audited"
)

// Verdict is one completion's score with every component that led to it, so
// that a reward can always be explained. The reward engine makes it; the
// trainer, rollouts.jsonl, the score report and the console carry it as is.
type Verdict struct {
	InstanceID string  `json:"instance_id"`
	Phase      string  `json:"phase"` // the curriculum phase it was scored in
	Reward     float64 `json:"reward"`

	NonEmpty    bool   `json:"nonempty"`        // the completion had any text
	Form        string `json:"form"`            // how the diff was found: fenced, tagged, bare, none
	Patch       string `json:"patch,omitempty"` // the extracted, normalised diff
	SyntaxOK    bool   `json:"syntax_ok"`       // well-formed, non-empty diff
	SyntaxError string `json:"syntax_error,omitempty"`
	Files       int    `json:"files"` // files the patch touches
	// Oversize: the patch breaks reward.max_patch_* (SyntaxError says
	// which): its own failure, scored before anything applies it.
	Oversize bool `json:"oversize,omitempty"`

	// Gate is what the verifier's gate in front of Docker did with it
	// (reward.verifier): GateSpared (not run: it earns what an applied,
	// unresolved patch earns), GateAudited (run though the verifier would
	// have spared it) or "" (run, or no gate); VerifierScore is the
	// verifier's probability that it resolves, where one scored it.
	Gate          string   `json:"verifier_gate,omitempty"`
	VerifierScore *float64 `json:"verifier_score,omitempty"`

	// Apply check (phases apply-only and docker).
	ApplyChecked bool   `json:"apply_checked"`
	Applied      bool   `json:"applied"`
	ApplyMethod  string `json:"apply_method,omitempty"` // which step of the fallback chain applied it
	ApplyOutput  string `json:"apply_output,omitempty"`
	ApplyOnHost  bool   `json:"apply_on_host,omitempty"`
	// ApplyMismatch: the host and the container disagreed (the container's
	// verdict is kept). It should never happen; it is counted if it does.
	ApplyMismatch bool `json:"apply_mismatch,omitempty"`

	// Shaping (phases apply-only and docker, syntax-valid patches).
	// Similarity is SWE-RL's patch similarity to the gold patch, in [0, 1].
	Similarity float64 `json:"similarity,omitempty"`
	// HunksApplied of HunksTotal text hunks apply: all of them for a patch
	// that applies; for one that does not, those that apply on their own
	// (both 0 when the base files are unknown).
	HunksApplied int `json:"hunks_applied,omitempty"`
	HunksTotal   int `json:"hunks_total,omitempty"`
	// Noop: the patch changes nothing (a removed line re-added, only
	// trailing whitespace or blank lines, or a result equal to the base).
	Noop bool `json:"noop,omitempty"`

	// Tests (phase docker).
	TestsRun    bool         `json:"tests_run"`
	F2PPassed   int          `json:"f2p_passed"`
	F2PTotal    int          `json:"f2p_total"`
	P2PPassed   int          `json:"p2p_passed"`
	P2PBroken   int          `json:"p2p_broken"`
	P2PTotal    int          `json:"p2p_total"`
	Resolved    bool         `json:"resolved"`
	TestsStatus *TestsStatus `json:"tests_status,omitempty"`
	Statuses    StatusMap    `json:"statuses,omitempty"`
	ExitStatus  *int         `json:"exit_status,omitempty"` // the test runner's
	TestsError  string       `json:"tests_error,omitempty"` // why tests gave no verdict (timeout, incomplete output)

	// Log is the container evaluation's whole captured log, for the trainer
	// to keep beside the run (not in rollouts.jsonl: see CompletionScored's
	// LogFile); "" when no container ran.
	Log string `json:"-"`

	// Infra failures are not the model's: masked out of the advantage.
	Infra      bool   `json:"infra_failure"`
	InfraCause string `json:"infra_cause,omitempty"`

	// Hacks cost the patch its resolved status and reward.hack_penalty;
	// HacksUndone were raised only by files the evaluation resets before the
	// tests (runner configuration, the test patch's files): reported, free.
	Hacks       []string  `json:"hacks,omitempty"`
	HacksUndone []string  `json:"hacks_undone,omitempty"`
	Durations   Durations `json:"durations"`
}

// Problem is the first thing that kept the completion from a higher reward,
// in words: the infrastructure failure, the syntax error or why the tests
// gave no verdict; "" when none of those happened.
func (v *Verdict) Problem() string {
	switch {
	case v.Infra:
		return v.InfraCause
	case v.SyntaxError != "":
		return v.SyntaxError
	case v.TestsError != "":
		return v.TestsError
	}
	return ""
}

// Durations are the time each stage of a score took.
type Durations struct {
	Extract time.Duration `json:"extract_ns"`
	Apply   time.Duration `json:"apply_ns,omitempty"`
	Eval    time.Duration `json:"eval_ns,omitempty"`
	Total   time.Duration `json:"total_ns"`
}

// Status is one test's outcome as a log parser reports it. The values are the
// official harness's TestStatus strings.
type Status string

// Test statuses. XFAIL counts as passing when grading, as in the harness.
const (
	Passed  Status = "PASSED"
	Failed  Status = "FAILED"
	Skipped Status = "SKIPPED"
	Errored Status = "ERROR"
	XFail   Status = "XFAIL"
)

// StatusMap maps a test id to its status.
type StatusMap map[string]Status

// SuccessFailure is one category of the official report's tests_status.
type SuccessFailure struct {
	Success []string `json:"success"`
	Failure []string `json:"failure"`
}

// TestsStatus is the official harness report's tests_status object.
// FAIL_TO_FAIL and PASS_TO_FAIL stay empty, as the harness leaves them when it
// is not asked to compute them.
type TestsStatus struct {
	FailToPass SuccessFailure `json:"FAIL_TO_PASS"`
	PassToPass SuccessFailure `json:"PASS_TO_PASS"`
	FailToFail SuccessFailure `json:"FAIL_TO_FAIL"`
	PassToFail SuccessFailure `json:"PASS_TO_FAIL"`
}

// VerifierSure is how far from 0.5 a verifier's score must be for its
// disagreement with the grader to be flagged.
const VerifierSure = 0.9

// VerifierDisagrees reports whether a verifier sure of v (VerifierSure
// either way) was contradicted by the grader: where reward hacking or a
// broken test shows first. A spared patch was not graded in Docker, and an
// infrastructure failure graded nothing: neither disagrees.
func (v Verdict) VerifierDisagrees() bool {
	if v.VerifierScore == nil || v.Infra || v.Gate == GateSpared {
		return false
	}
	p := *v.VerifierScore
	return p >= VerifierSure && !v.Resolved || p <= 1-VerifierSure && v.Resolved
}
