package reward

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/swetui/swetui/sandbox"
	"github.com/swetui/swetui/task"
)

// Runner is what PoolEvaluator needs of the sandbox: *sandbox.Pool.
type Runner interface {
	Run(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error)
}

// PoolEvaluator runs evaluations through the sandbox's pool with the
// sandbox's harness-shaped eval script, and reads the log along the script's
// protocol lines (last marker pair, runner exit status, exact nonce lines).
type PoolEvaluator struct {
	Pool    Runner
	Timeout time.Duration // per evaluation; 0 leaves the pool's default
}

// Evaluate implements Evaluator.
func (p *PoolEvaluator) Evaluate(ctx context.Context, req EvalRequest) EvalOutput {
	start := time.Now()
	spec, nonce, err := EvalSpec(req)
	if err != nil {
		return EvalOutput{Infra: err, Duration: time.Since(start)}
	}
	spec.Timeout = p.Timeout
	res, err := p.Pool.Run(ctx, spec)
	out := EvalOutput{Log: res.Log, TimedOut: res.TimedOut, Duration: time.Since(start)}
	switch {
	case err != nil:
		out.Infra = fmt.Errorf("evaluate %s: %w", req.Instance.InstanceID, err)
		return out
	case res.Infra != nil:
		out.Infra = fmt.Errorf("evaluate %s: %w", req.Instance.InstanceID, res.Infra)
		return out
	case res.Canceled:
		out.Infra = fmt.Errorf("evaluate %s: cancelled", req.Instance.InstanceID)
		return out
	case res.Truncated:
		// The log passed the cap and the container was killed: the end of
		// the output is lost, and with it the verdict.
		out.TimedOut = false
	}
	o := sandbox.ParseOutput(res.Log, nonce)
	out.ApplyMethod = o.ApplyMethod
	out.TestLog, out.Complete = o.TestLog, o.Complete
	if o.Complete {
		out.ExitStatus = o.ExitStatus
	}
	if req.ApplyOnly {
		out.Complete = out.ApplyMethod != ""
	}
	out.Forged = ForgedMarkers(res.Log, nonce)
	if o.TestPatch == "failed" {
		out.Infra = fmt.Errorf("evaluate %s: the reference test patch did not apply", req.Instance.InstanceID)
	}
	return out
}

// LogNonce returns the nonce of an eval log read without its script: that of
// the first protocol line. The script prints its apply line before any code
// of the patch runs, so the first one is the script's own; look-alikes the
// tests print come later, and ForgedMarkers reports them.
func LogNonce(log string) (string, bool) {
	for _, line := range strings.Split(log, "\n") {
		line = strings.TrimSuffix(line, "\r")
		for _, prefix := range []string{sandbox.ApplyPrefix, sandbox.StartPrefix} {
			if rest, ok := strings.CutPrefix(line, prefix+" "); ok {
				nonce, _, _ := strings.Cut(rest, " ")
				if nonce != "" {
					return nonce, true
				}
			}
		}
	}
	return "", false
}

// ForgedMarkers reports protocol-looking lines with another nonce, or more
// than one start marker of this one: output the script did not print.
func ForgedMarkers(log, nonce string) bool {
	starts := 0
	for _, line := range strings.Split(log, "\n") {
		line = strings.TrimSuffix(line, "\r")
		for _, prefix := range []string{sandbox.ApplyPrefix, sandbox.TestPatchPrefix, sandbox.StartPrefix, sandbox.EndPrefix, sandbox.ExitPrefix} {
			rest, ok := strings.CutPrefix(strings.TrimSpace(line), prefix+" ")
			if !ok {
				continue
			}
			if !strings.HasPrefix(rest, nonce) {
				return true
			}
			if prefix == sandbox.StartPrefix {
				starts++
			}
		}
	}
	return starts > 1
}

// EvalSpec builds the container evaluation of req: the sandbox's eval script
// (fallback-chain apply of the model patch, test files reset to the base
// commit, test patch, tests between nonce markers) and the files it reads.
func EvalSpec(req EvalRequest) (sandbox.Spec, string, error) {
	in := req.Instance
	files := map[string][]byte{sandbox.ModelPatchPath: []byte(req.Diff)}
	ss := sandbox.ScriptSpec{
		Workdir:        in.WorkdirOrDefault(),
		BaseCommit:     in.BaseCommit,
		ModelPatchPath: sandbox.ModelPatchPath,
		TestCmd:        "true",
	}
	if in.Setup != "" {
		ss.Setup = strings.Split(in.Setup, "\n")
	}
	if !req.ApplyOnly {
		cmd, err := testCommand(in)
		if err != nil {
			return sandbox.Spec{}, "", err
		}
		ss.TestCmd = cmd
		if in.TestPatch != "" {
			ss.TestPatchPath = sandbox.TestPatchPath
			ss.TestFiles = sandbox.PatchPaths(in.TestPatch)
			files[sandbox.TestPatchPath] = []byte(NormalizeDiff(in.TestPatch))
		}
	}
	script, nonce := sandbox.EvalScript(ss)
	return sandbox.Spec{
		ID:         sandbox.NewNonce()[:12],
		InstanceID: in.InstanceID,
		Image:      in.ImageName(),
		Workdir:    in.WorkdirOrDefault(),
		Files:      files,
		Script:     script,
	}, nonce, nil
}

// testCommand is the instance's test command line: test_cmd and its test
// directives (task fills both from its spec table when it loads a dataset).
func testCommand(in *task.Instance) (string, error) {
	if in.TestCmd == "" {
		return "", fmt.Errorf("instance %s: no test_cmd (repo %q not in the spec table?)", in.InstanceID, in.Repo)
	}
	if len(in.TestDirectives) == 0 {
		return in.TestCmd, nil
	}
	return in.TestCmd + " " + strings.Join(in.TestDirectives, " "), nil
}
