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
	case res.DiskLimit:
		out.DiskLimit = true
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
	out.Forged = o.Forged
	if o.TestPatch == "failed" {
		out.Infra = fmt.Errorf("evaluate %s: the reference test patch did not apply", req.Instance.InstanceID)
	}
	return out
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
	}
	if in.CheckoutBase {
		ss.Checkout = in.BaseCommit
	}
	if in.Setup != "" {
		ss.Setup = strings.Split(in.Setup, "\n")
	}
	if !req.ApplyOnly {
		cmd, err := in.TestCommand()
		if err != nil {
			return sandbox.Spec{}, "", err
		}
		ss.TestCmd = cmd
		if in.TestPatch != "" {
			ss.TestPatchPath = sandbox.TestPatchPath
			ss.TestFiles = task.Paths(task.PatchFiles(in.TestPatch))
			files[sandbox.TestPatchPath] = []byte(NormalizeDiff(in.TestPatch))
		}
	}
	sc := sandbox.EvalScript(ss)
	return sandbox.Spec{
		ID:         sandbox.NewNonce()[:12],
		InstanceID: in.InstanceID,
		Image:      in.ImageName(),
		Workdir:    in.WorkdirOrDefault(),
		Files:      files,
		Script:     sc.Prepare,
		Tests:      sc.Tests,
		Nonce:      sc.Nonce,
		// An environment set up by writing system files (locale-gen) needs
		// a writable root.
		WritableRoot: strings.Contains(in.Setup, "locale-gen") || strings.Contains(in.Setup, "/etc/"),
	}, sc.Nonce, nil
}
