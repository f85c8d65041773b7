package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/swetui/swetui/config"
)

// Backend is one place the pool runs evaluations: a Docker host (Runner) or
// a Kubernetes namespace (package sandbox/kube); a remote service would be a
// third. A backend makes one sandbox (a container, a Pod) per evaluation
// with the run's labels, runs the evaluation's processes in it through a
// Driver, and removes it. The pool picks backends, retries, reaps and
// publishes.
type Backend interface {
	// Name is the endpoint as the user wrote it (Result.Host, messages).
	Name() string
	// Ping answers nil when the backend can take evaluations now.
	Ping(ctx context.Context) error
	// Create makes spec's sandbox and copies its files in. It returns the
	// sandbox's id whenever one was made, also with an error, for Remove.
	Create(ctx context.Context, spec Spec, d *Durations) (id string, err error)
	// Execute runs the evaluation in sandbox id to its end and fills res.
	Execute(ctx context.Context, id string, spec Spec, onLog func([]byte), res *Result)
	// Remove deletes sandbox id at once; one already gone is removed.
	Remove(ctx context.Context, id string) error
	// Reap removes the managed sandboxes sel selects and says how many.
	Reap(ctx context.Context, sel Reaping) (int, error)
	Close() error
}

// Reaping selects what a Reap removes: with RunID "", the managed
// sandboxes of any run that are stale (their owner process is gone or
// their deadline has passed; see Stale); with a RunID, every sandbox of
// that run that Keep (if set) does not keep.
type Reaping struct {
	RunID string
	Keep  func(id string) bool
}

// Bounded is implemented by backends that can hold only so many
// evaluations at once (a namespace's quota, a cluster's CPUs): the pool
// places no more there. Capacity 0 means no bound.
type Bounded interface {
	Capacity() int
}

// Placement is implemented by backends that can say where a sandbox runs
// (a Pod's node and phase), for the console's worker rows.
type Placement interface {
	Where(id string) string
}

// BackendConfig is what the pool gives each backend it opens.
type BackendConfig struct {
	RunID      string
	Limits     Limits
	Kubernetes config.Kubernetes
}

// Opener opens the backend of an endpoint whose scheme it registered.
type Opener func(ctx context.Context, endpoint string, cfg BackendConfig) (Backend, error)

var (
	schemesMu sync.RWMutex
	schemes   = map[string]Opener{}
)

// RegisterScheme makes endpoints scheme://... open with open; the Docker
// schemes (unix, tcp, ssh, "") are the pool's own. Package sandbox/kube
// registers "k8s".
func RegisterScheme(scheme string, open Opener) {
	schemesMu.Lock()
	defer schemesMu.Unlock()
	schemes[scheme] = open
}

// openerFor is the registered opener of endpoint's scheme, or nil for a
// Docker endpoint.
func openerFor(endpoint string) Opener {
	scheme, _, ok := strings.Cut(endpoint, "://")
	if !ok {
		return nil
	}
	schemesMu.RLock()
	defer schemesMu.RUnlock()
	return schemes[scheme]
}

// Procs are the two things a Driver needs of a started sandbox.
type Procs interface {
	// Exec runs cmd in the sandbox as a process its engine starts, copies
	// its output (stdout and stderr) to out and returns the exit status
	// the engine saw. It ends when the process does or the sandbox is
	// killed.
	Exec(ctx context.Context, cmd []string, user string, out io.Writer) (int, error)
	// Kill ends every process of the sandbox now.
	Kill(ctx context.Context) error
}

// Driver runs an evaluation's processes in a started sandbox, whatever the
// backend: the prepare script, then for an eval the test runner, with the
// protocol lines (script.go) written by the host around their output; the
// log cap, the timeout, cancellation and the disk bound kill the sandbox.
// One per backend: it remembers what each image's writable folders hold.
type Driver struct {
	Limits Limits
	// diskBase remembers, per image and writable folders, what they hold
	// before an evaluation writes (KiB; see diskBaseOf).
	diskBase sync.Map
}

// Drive runs spec in the sandbox behind p and fills res: ExitCode, Log, the
// kill causes, Durations.Run.
func (dr *Driver) Drive(ctx context.Context, spec Spec, p Procs, onLog func([]byte), res *Result) {
	logs := &capWriter{max: dr.Limits.LogCap, onLog: onLog, full: make(chan struct{}), panicC: make(chan struct{})}
	started := time.Now()

	// One watcher kills the sandbox for whichever reason comes first; the
	// processes in it then end, and with them the steps below.
	var (
		killMu sync.Mutex
		cause  string
	)
	done := make(chan struct{})
	watched := make(chan struct{})
	diskC := make(chan struct{})
	if dr.Limits.DiskMB > 0 {
		base, known := dr.diskBaseOf(p, spec)
		go dr.watchDisk(p, spec, base, known, done, diskC)
	}
	go func() {
		defer close(watched)
		timer := time.NewTimer(spec.Timeout)
		defer timer.Stop()
		var why string
		select {
		case <-done:
			return
		case <-timer.C:
			why = "timeout"
		case <-ctx.Done():
			why = "canceled"
			if hostLost(ctx) != nil {
				why = "lost"
			}
		case <-logs.full:
			why = "truncated"
		case <-logs.panicC:
			why = "panic"
		case <-diskC:
			why = "disk"
		}
		killMu.Lock()
		cause = why
		killMu.Unlock()
		if why == "lost" {
			return // nothing to kill there; the reaper removes it when it is back
		}
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
		defer cancel()
		if err := p.Kill(kctx); err != nil {
			killMu.Lock()
			res.Infra = errors.Join(res.Infra, err)
			killMu.Unlock()
		}
	}()
	killed := func() string {
		killMu.Lock()
		defer killMu.Unlock()
		return cause
	}

	status, err := p.Exec(ctx, []string{"bash", ScriptPath}, spec.User, logs)
	if err == nil && killed() == "" && spec.Nonce != "" {
		lines, run, exit := Opening(spec.Nonce, status, spec.Tests != "")
		_, _ = logs.Write([]byte(lines))
		status = exit
		if run && killed() == "" {
			status, err = p.Exec(ctx, []string{"bash", "-c", spec.Tests}, spec.User, logs)
			if err == nil && killed() == "" {
				_, _ = logs.Write([]byte(Closing(spec.Nonce, status)))
			}
		}
	}
	close(done)
	<-watched
	res.Durations.Run = time.Since(started)
	res.ExitCode = status
	killMu.Lock()
	defer killMu.Unlock()
	switch cause {
	case "":
		if err != nil {
			RecordFailure(ctx, res, err)
		}
	case "timeout":
		res.TimedOut, res.ExitCode = true, killedStatus
	case "canceled":
		res.Canceled = true
	case "lost":
		res.Infra = hostLost(ctx)
	case "truncated":
		res.Truncated, res.ExitCode = true, killedStatus
	case "disk":
		res.DiskLimit, res.ExitCode = true, killedStatus
		_, _ = logs.Write([]byte(fmt.Sprintf("\nswetui: disk limit: the evaluation wrote more than %d MiB; sandbox killed\n", dr.Limits.DiskMB)))
	}
	res.Log = logs.String()
	res.Truncated = res.Truncated || logs.truncated
	if v := logs.panicValue(); v != nil {
		res.Infra = errors.Join(res.Infra, fmt.Errorf("evaluation %s: log consumer %w: %v", spec.ID, ErrPanic, v))
	}
}

// RecordFailure records err on res: a cancellation when ctx ended, else an
// infrastructure failure (the loss of the backend included, which the pool
// retries elsewhere).
func RecordFailure(ctx context.Context, res *Result, err error) {
	if lost := hostLost(ctx); lost != nil {
		res.Infra = lost
		return
	}
	if ctx.Err() != nil {
		res.Canceled = true
		return
	}
	res.Infra = err
}

// finish runs sandbox id of b, made by Create (createErr is its error), to
// its end and hands it to discard on every path, panics included.
func finish(ctx context.Context, b Backend, discard func(id string) time.Duration, spec Spec, id string, createErr error,
	res Result, onLog func([]byte), hooks runHooks) (out Result) {
	out = res
	if id != "" {
		out.ContainerID = id
		defer func() {
			if v := recover(); v != nil {
				out.Infra = fmt.Errorf("evaluation %s: %w: %v", spec.ID, ErrPanic, v)
				out.Durations.Remove = discard(id)
			}
		}()
		if hooks.created != nil {
			hooks.created(id)
		}
	}
	if createErr != nil {
		if id != "" {
			out.Durations.Remove = discard(id)
		}
		RecordFailure(ctx, &out, createErr)
		return out
	}
	b.Execute(ctx, id, spec, onLog, &out)
	out.Durations.Remove = discard(id)
	return out
}

// removeNow removes sandbox id of b on its own context and says how long it
// took; errors are dropped (the reaper takes what is left).
func removeNow(b Backend, id string) time.Duration {
	t0 := time.Now()
	_ = removeSandbox(b, id)
	return time.Since(t0)
}

// Stale says whether a managed sandbox with these labels (or annotations)
// belongs to no live evaluation: its owner process is gone or its deadline
// has passed. running says whether it still runs, for sandboxes with no
// owner label.
func Stale(labels map[string]string, running bool, now time.Time) bool {
	if d, err := strconv.ParseInt(labels[LabelDeadline], 10, 64); err == nil && now.Unix() > d {
		return true
	}
	o, ok := labels[LabelOwner]
	if !ok {
		return !running
	}
	return !ownerAlive(o)
}

// DeadlineOf is the unix time after which no evaluation of spec can still
// use its sandbox, whoever owns it: it may wait for a free worker (a
// timeout at most), then run (one more), and the kill and removal take a
// little. A session's sandbox is its life (Timeout) and a minute for its
// removal: it waits for no worker, and its session ends it at its life.
func DeadlineOf(spec Spec, now time.Time) time.Time {
	if spec.Script == SessionScript {
		return now.Add(spec.Timeout + time.Minute)
	}
	return now.Add(2*spec.Timeout + 2*time.Minute)
}

// SandboxFiles are the files an evaluation's sandbox gets: spec's and its
// script.
func SandboxFiles(spec Spec) map[string][]byte {
	files := map[string][]byte{ScriptPath: []byte(spec.Script)}
	for p, b := range spec.Files {
		files[p] = b
	}
	return files
}

// CheckSpec is the check every backend makes before creating anything.
func CheckSpec(spec Spec) error {
	if spec.Image == "" || spec.Script == "" {
		return fmt.Errorf("evaluation %s: %w: image and script are required", spec.ID, ErrBadSpec)
	}
	if spec.Timeout <= 0 {
		return fmt.Errorf("evaluation %s: %w: timeout must be positive", spec.ID, ErrBadSpec)
	}
	return nil
}
