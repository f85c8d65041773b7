package reward

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/swetui/swetui/sandbox"
	"github.com/swetui/swetui/task"
)

// Placer is what PoolEvaluator needs of the sandbox: *sandbox.Pool, which
// places each evaluation on a host.
type Placer interface {
	Run(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error)
}

// PoolEvaluator runs evaluations through the sandbox's pool with the
// sandbox's harness-shaped eval script, and reads the log along the script's
// protocol lines (last marker pair, runner exit status, exact nonce lines).
type PoolEvaluator struct {
	Pool    Placer
	Timeout time.Duration // per evaluation; 0 leaves the pool's default

	mu    sync.Mutex
	names map[string]*imageNames // per image, workdir and setup
}

// imageNames is one image's importable names, read once (done closes when
// they are known or the probe failed).
type imageNames struct {
	done  chan struct{}
	names []string
	err   error
}

// probeTimeout bounds the sandbox that reads an image's importable names.
const probeTimeout = 2 * time.Minute

// Evaluate implements Evaluator.
func (p *PoolEvaluator) Evaluate(ctx context.Context, req EvalRequest) EvalOutput {
	start := time.Now()
	var names []string
	if !req.ApplyOnly {
		var err error
		if names, err = p.importable(ctx, req.Instance); err != nil {
			return EvalOutput{Infra: fmt.Errorf("evaluate %s: %w", req.Instance.InstanceID, err), Duration: time.Since(start)}
		}
	}
	spec, sc, err := evalSpec(req, names)
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
	o := sandbox.ParseOutput(res.Log, sc.Nonce)
	in := req.Instance
	switch {
	case o.ApplyMethod == "":
		// The prepare script stopped before the patch (a commit the image
		// lacks, a failed repo_setup): its own words say why.
		if why := lastOwnLine(res.Log); why != "" && !res.TimedOut {
			out.Infra = fmt.Errorf("evaluate %s: %s", in.InstanceID, why)
			return out
		}
	case o.Started && sc.SetupChecked:
		if infra := setupProblem(in, o.SetupCheck); infra != nil {
			out.Infra = infra
			return out
		}
	}
	out.Output = o
	if req.ApplyOnly {
		out.Complete = out.ApplyMethod != ""
	}
	if o.TestPatch == "failed" {
		out.Infra = fmt.Errorf("evaluate %s: the reference test patch did not apply", req.Instance.InstanceID)
	}
	return out
}

// importable returns the top-level names the Python of in's image imports
// from outside the work tree, read once per image (and setup, which picks
// the interpreter) in a sandbox of its own (sandbox.ImportableProbe) and
// kept for the evaluator's life; evaluations of an image wait for its one
// probe. A probe the sandbox could not run is an infrastructure failure
// and is tried again by the next evaluation; an image without Python has
// no names beyond the static ones.
func (p *PoolEvaluator) importable(ctx context.Context, in *task.Instance) ([]string, error) {
	key := in.ImageName() + "\x00" + in.WorkdirOrDefault() + "\x00" + in.Setup
	p.mu.Lock()
	if p.names == nil {
		p.names = map[string]*imageNames{}
	}
	e, ok := p.names[key]
	if !ok {
		e = &imageNames{done: make(chan struct{})}
		p.names[key] = e
	}
	p.mu.Unlock()
	if ok {
		select {
		case <-e.done:
			return e.names, e.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	e.names, e.err = p.probe(ctx, in)
	if e.err != nil {
		p.mu.Lock()
		delete(p.names, key)
		p.mu.Unlock()
	}
	close(e.done)
	return e.names, e.err
}

// probe runs sandbox.ImportableProbe in a fresh sandbox of in's image.
func (p *PoolEvaluator) probe(ctx context.Context, in *task.Instance) ([]string, error) {
	var setup []string
	if in.Setup != "" {
		setup = strings.Split(in.Setup, "\n")
	}
	res, err := p.Pool.Run(ctx, sandbox.Spec{
		ID:         sandbox.NewNonce()[:12],
		InstanceID: in.InstanceID + " (importable names)",
		Image:      in.ImageName(),
		Workdir:    in.WorkdirOrDefault(),
		Script:     sandbox.ImportableProbe(in.WorkdirOrDefault(), setup),
		Timeout:    probeTimeout,
	})
	switch {
	case err != nil:
		return nil, fmt.Errorf("read the image's importable names: %w", err)
	case res.Infra != nil:
		return nil, fmt.Errorf("read the image's importable names: %w", res.Infra)
	case res.Canceled:
		return nil, fmt.Errorf("read the image's importable names: cancelled")
	}
	names, _ := sandbox.ImportableNames(res.Log)
	return names, nil
}

// guardFiles are the files the tests must see as the prepare step left
// them: those of the model patch and of the test patch.
func guardFiles(req EvalRequest) []string {
	return task.Paths(append(task.PatchFiles(req.Diff), task.PatchFiles(req.Instance.TestPatch)...))
}

// setupProblem is the infrastructure failure a setup check reports: setup
// changed the patched files (the tests would not have run on the patches),
// or ended the process before the check. Not the model's doing: the
// instance's setup is the dataset's.
func setupProblem(in *task.Instance, check string) error {
	switch {
	case check == sandbox.SetupCheckOK:
		return nil
	case check == "":
		return fmt.Errorf("evaluate %s: setup %q ended the test process before the tests (no setup check line)", in.InstanceID, in.Setup)
	}
	return fmt.Errorf("evaluate %s: setup changed the patched files after the patches were applied, so no tests ran "+
		"(setup is for environment activation; commands that set the repository up belong in repo_setup, which runs "+
		"before the patch): setup %q %s", in.InstanceID, in.Setup, check)
}

// testPaths are the test files of in whose folders its test run puts on
// sys.path: those of the test patch, and the files pytest's test ids name
// (path.py::test).
func testPaths(in *task.Instance) []string {
	var out []string
	for _, f := range task.Paths(task.PatchFiles(in.TestPatch)) {
		if strings.HasSuffix(f, ".py") { // pytest puts only test modules' folders there
			out = append(out, f)
		}
	}
	for _, id := range append(append([]string(nil), in.FailToPass...), in.PassToPass...) {
		if f, _, ok := strings.Cut(id, "::"); ok && strings.HasSuffix(f, ".py") && !strings.HasPrefix(f, "/") && !strings.Contains(f, "..") {
			out = append(out, f)
		}
	}
	return out
}

// lastOwnLine is the last line the eval script printed about itself
// ("swetui: ..."), without the prefix.
func lastOwnLine(log string) string {
	why := ""
	for _, line := range strings.Split(log, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSuffix(line, "\r"), "swetui: "); ok && !strings.HasPrefix(rest, "setup check ") {
			why = rest
		}
	}
	return why
}

// EvalSpec builds the container evaluation of req: the sandbox's eval script
// (fallback-chain apply of the model patch, test files reset to the base
// commit, test patch, tests between nonce markers), the files it reads, and
// the scripts it was built from (their nonce, whether setup is checked).
func EvalSpec(req EvalRequest) (sandbox.Spec, sandbox.Scripts, error) {
	return evalSpec(req, nil)
}

// evalSpec is EvalSpec with the image's importable names (see
// PoolEvaluator.importable): a new module of one of them, or of the static
// ones, in a folder the tests put on sys.path is removed before the tests.
func evalSpec(req EvalRequest, importable []string) (sandbox.Spec, sandbox.Scripts, error) {
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
	if in.RepoSetup != "" {
		ss.RepoSetup = strings.Split(in.RepoSetup, "\n")
	}
	if !req.ApplyOnly {
		cmd, err := in.TestCommand()
		if err != nil {
			return sandbox.Spec{}, sandbox.Scripts{}, err
		}
		ss.TestCmd = cmd
		if in.TestPatch != "" {
			ss.TestPatchPath = sandbox.TestPatchPath
			ss.TestFiles = task.Paths(task.PatchFiles(in.TestPatch))
			files[sandbox.TestPatchPath] = []byte(NormalizeDiff(in.TestPatch))
		}
		ss.GuardFiles = guardFiles(req)
		ss.Importable = importable
		ss.TestPaths = testPaths(in)
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
	}, sc, nil
}
