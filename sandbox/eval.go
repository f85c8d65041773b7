package sandbox

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
)

// Labels on every container the sandbox creates.
const (
	LabelManaged  = "swetui.managed"  // always "true"
	LabelRun      = "swetui.run"      // the run id
	LabelOwner    = "swetui.owner"    // hostname/pid/start of the process that made it
	LabelEval     = "swetui.eval"     // the evaluation id
	LabelDeadline = "swetui.deadline" // unix seconds after which it is stale whoever owns it
)

var (
	// ErrImageMissing marks an evaluation whose image is not on the host.
	ErrImageMissing = errors.New("image missing")
	// ErrBadSpec marks an evaluation that cannot run as specified.
	ErrBadSpec = errors.New("bad evaluation spec")
	// ErrPanic marks an evaluation during which the caller's code (a log
	// consumer) panicked: a bug, so it is not retried.
	ErrPanic = errors.New("panicked")
)

// Limits are the resources one evaluation's container may use.
type Limits struct {
	MemoryMB  int
	CPUs      float64
	PidsLimit int
	LogCap    int // bytes of log kept; output past it kills the container
}

// Spec is one evaluation: a script run as the entry point of a fresh
// container of Image, with Files copied in first.
type Spec struct {
	ID         string            // unique evaluation id (labels, logs, state)
	InstanceID string            // the task, for display
	Image      string            // image to run; must be on the host
	Workdir    string            // working directory ("" = the image's)
	Files      map[string][]byte // absolute path in the container -> content
	Script     string            // bash script, copied to ScriptPath and run as the entry point
	Timeout    time.Duration     // wall-clock limit from start; the container is killed at it
	Env        []string          // KEY=value
	User       string            // user to run as ("" = the image's)
}

// Durations say where an evaluation's time went.
type Durations struct {
	Queue  time.Duration // waiting in the pool's queue
	Create time.Duration // container create + copy of the files
	Start  time.Duration // attach + start
	Run    time.Duration // start to exit
	Remove time.Duration
	Total  time.Duration // dequeue (or Run call) to result, removal included unless deferred
}

// Result is the outcome of one evaluation. A test failure is ExitCode != 0
// with Infra nil; Infra is set only when the sandbox itself failed (daemon
// error, missing image, panic), so the caller can mask it instead of
// scoring it.
type Result struct {
	ID          string
	InstanceID  string
	Host        string // endpoint that ran it
	ContainerID string
	ExitCode    int    // the script's exit status; -1 if it never exited
	Log         string // demultiplexed stdout+stderr, at most Limits.LogCap bytes
	Truncated   bool   // output passed the cap; the container was killed
	TimedOut    bool   // the deadline passed; the container was killed
	Canceled    bool   // the caller's context ended first
	Infra       error
	Attempts    int // tries, retries after infrastructure failures included
	Durations   Durations
}

// Runner runs evaluations on one Docker host.
type Runner struct {
	Docker   Docker
	Endpoint string // for messages and Result.Host
	RunID    string
	Limits   Limits
	// Deferred removal: when set, Run hands the container's removal to it
	// instead of waiting (the pool removes in the background).
	removeAsync func(id string)
}

// apiTimeout bounds the calls that should be quick (create, copy, attach,
// start), so a wedged daemon becomes an infrastructure failure, not a hang.
var apiTimeout = 2 * time.Minute

// removeTimeout bounds cleanup calls, which run on their own context so that
// a cancelled caller still gets its container removed.
const removeTimeout = 30 * time.Second

// Run runs spec to completion, timeout or cancellation and removes the
// container on every path. onLog, if not nil, receives the kept output as it
// arrives (from one goroutine at a time).
func (r *Runner) Run(ctx context.Context, spec Spec, onLog func([]byte)) Result {
	return r.run(ctx, spec, onLog, runHooks{})
}

// runHooks let the pool follow an evaluation.
type runHooks struct {
	created func(containerID string)
}

func (r *Runner) run(ctx context.Context, spec Spec, onLog func([]byte), hooks runHooks) Result {
	start := time.Now()
	res := Result{ID: spec.ID, InstanceID: spec.InstanceID, Host: r.endpoint(), ExitCode: -1, Attempts: 1}
	id, err := r.create(ctx, spec, &res.Durations)
	res = r.finish(ctx, spec, id, err, res, onLog, hooks)
	res.Durations.Total = time.Since(start)
	return res
}

// finish runs container id, made by create (createErr is create's error),
// to its end and removes it.
func (r *Runner) finish(ctx context.Context, spec Spec, id string, createErr error, res Result, onLog func([]byte), hooks runHooks) (out Result) {
	out = res
	if id != "" {
		out.ContainerID = id
		// Whatever happens from here, panics included, the container goes.
		defer func() {
			if v := recover(); v != nil {
				out.Infra = fmt.Errorf("evaluation %s: %w: %v", spec.ID, ErrPanic, v)
				out.Durations.Remove = r.remove(id)
			}
		}()
		if hooks.created != nil {
			hooks.created(id)
		}
	}
	if createErr != nil {
		if id != "" {
			out.Durations.Remove = r.remove(id)
		}
		r.fail(ctx, &out, createErr)
		return out
	}
	r.execute(ctx, id, spec, onLog, &out)
	if r.removeAsync != nil {
		r.removeAsync(id)
	} else {
		out.Durations.Remove = r.remove(id)
	}
	return out
}

// fail records err: a cancellation when ctx ended, else an infrastructure
// failure.
func (r *Runner) fail(ctx context.Context, res *Result, err error) {
	if ctx.Err() != nil {
		res.Canceled = true
		return
	}
	res.Infra = err
}

// create makes the container and copies the script and files in. On error
// it returns the container's id if one was made, for removal.
func (r *Runner) create(ctx context.Context, spec Spec, d *Durations) (string, error) {
	if spec.Image == "" || spec.Script == "" {
		return "", fmt.Errorf("evaluation %s: %w: image and script are required", spec.ID, ErrBadSpec)
	}
	if spec.Timeout <= 0 {
		return "", fmt.Errorf("evaluation %s: %w: timeout must be positive", spec.ID, ErrBadSpec)
	}
	t0 := time.Now()
	// After this no evaluation can still use the container, whoever owns
	// it: it may wait for a free worker (a timeout at most), then run (one
	// more), and the kill and removal take a little.
	deadline := time.Now().Add(2*spec.Timeout + 2*time.Minute)
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	cfg := &container.Config{
		Image:           spec.Image,
		Cmd:             []string{"bash", ScriptPath},
		WorkingDir:      spec.Workdir,
		Env:             spec.Env,
		User:            spec.User,
		AttachStdout:    true,
		AttachStderr:    true,
		NetworkDisabled: true,
		Labels: map[string]string{
			LabelManaged:  "true",
			LabelRun:      r.RunID,
			LabelOwner:    ownerID(),
			LabelEval:     spec.ID,
			LabelDeadline: strconv.FormatInt(deadline.Unix(), 10),
		},
	}
	pids := int64(r.Limits.PidsLimit)
	host := &container.HostConfig{
		NetworkMode: "none",
		// Output goes to the attach stream only: a flood must not fill the
		// host's disk through the json-file log.
		LogConfig:   container.LogConfig{Type: "none"},
		SecurityOpt: []string{"no-new-privileges"},
		Resources: container.Resources{
			Memory:     int64(r.Limits.MemoryMB) << 20,
			MemorySwap: int64(r.Limits.MemoryMB) << 20, // no swap on top
			NanoCPUs:   int64(r.Limits.CPUs * 1e9),
		},
	}
	if pids > 0 {
		host.Resources.PidsLimit = &pids
	}
	if r.Limits.MemoryMB <= 0 {
		host.Resources.Memory, host.Resources.MemorySwap = 0, 0
	}
	created, err := r.Docker.ContainerCreate(ctx, cfg, host, nil, nil, "")
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return "", fmt.Errorf("create container: %w: %s is not on %s; build or pull it with `swetui prepare` (%v)",
				ErrImageMissing, spec.Image, r.endpoint(), err)
		}
		return "", fmt.Errorf("create container from %s on %s: %w", spec.Image, r.endpoint(), err)
	}
	files := map[string][]byte{ScriptPath: []byte(spec.Script)}
	for p, b := range spec.Files {
		files[p] = b
	}
	archive, err := tarFiles(files)
	if err != nil {
		return created.ID, fmt.Errorf("evaluation %s: %w: %v", spec.ID, ErrBadSpec, err)
	}
	if err := r.Docker.CopyToContainer(ctx, created.ID, "/", bytes.NewReader(archive), container.CopyToContainerOptions{}); err != nil {
		return created.ID, fmt.Errorf("copy files into container %s: %w", short(created.ID), err)
	}
	d.Create = time.Since(t0)
	return created.ID, nil
}

// execute attaches, starts and waits for the container, killing it at the
// deadline, on cancellation or when the output passes the cap.
func (r *Runner) execute(ctx context.Context, id string, spec Spec, onLog func([]byte), res *Result) {
	t0 := time.Now()
	apiCtx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	att, err := r.Docker.ContainerAttach(apiCtx, id, container.AttachOptions{Stream: true, Stdout: true, Stderr: true})
	if err != nil {
		r.fail(ctx, res, fmt.Errorf("attach to container %s: %w", short(id), err))
		return
	}
	defer att.Close()
	// The wait outlives ctx: after a kill we still want the exit status.
	waitCtx, stopWait := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWait()
	waitC, waitErrC := r.Docker.ContainerWait(waitCtx, id, container.WaitConditionNextExit)
	waited := false
	defer func() {
		if !waited {
			// The client's wait goroutine sends its result unbuffered; take
			// it (or the error that stopWait causes) so the goroutine ends.
			go func() {
				select {
				case <-waitC:
				case <-waitErrC:
				}
			}()
		}
	}()

	logs := &capWriter{max: r.Limits.LogCap, onLog: onLog, full: make(chan struct{}), panicC: make(chan struct{})}
	fullC, panicC := logs.full, logs.panicC
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		defer func() {
			if v := recover(); v != nil {
				logs.setPanic(v)
			}
		}()
		_, _ = stdcopy.StdCopy(logs, logs, att.Reader)
	}()

	if err := r.Docker.ContainerStart(apiCtx, id, container.StartOptions{}); err != nil {
		r.fail(ctx, res, fmt.Errorf("start container %s: %w", short(id), err))
		return
	}
	res.Durations.Start = time.Since(t0)
	started := time.Now()
	timer := time.NewTimer(spec.Timeout)
	defer timer.Stop()

	kill := func() {
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
		defer cancel()
		// The container may have exited on its own meanwhile.
		if err := r.Docker.ContainerKill(kctx, id, "KILL"); err != nil && !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) {
			res.Infra = errors.Join(res.Infra, fmt.Errorf("kill container %s: %w", short(id), err))
		}
	}
	var exited bool
	for !exited {
		select {
		case w := <-waitC:
			exited, waited = true, true
			res.ExitCode = int(w.StatusCode)
			if w.Error != nil && w.Error.Message != "" {
				res.Infra = fmt.Errorf("wait for container %s: %s", short(id), w.Error.Message)
			}
		case err := <-waitErrC:
			exited, waited = true, true
			res.Infra = fmt.Errorf("wait for container %s on %s: %w", short(id), r.endpoint(), err)
		case <-timer.C:
			res.TimedOut = true
			kill()
		case <-ctx.Done():
			res.Canceled = true
			kill()
			ctx = context.WithoutCancel(ctx) // don't select on it again
		case <-fullC:
			res.Truncated = true
			fullC = nil
			kill()
		case <-panicC:
			panicC = nil
			kill()
		}
		if (res.TimedOut || res.Canceled) && !exited {
			// Bound the wait for the exit after a kill; the removal forces it.
			select {
			case w := <-waitC:
				res.ExitCode, waited = int(w.StatusCode), true
			case <-waitErrC:
				waited = true
			case <-time.After(5 * time.Second):
			}
			exited = true
		}
	}
	res.Durations.Run = time.Since(started)
	// The stream ends when the container does; don't hang on a daemon that
	// keeps it open.
	select {
	case <-copied:
	case <-time.After(2 * time.Second):
		att.Close()
		<-copied
	}
	res.Log = logs.String()
	res.Truncated = res.Truncated || logs.truncated
	if p := logs.panicValue(); p != nil {
		res.Infra = errors.Join(res.Infra, fmt.Errorf("evaluation %s: log consumer %w: %v", spec.ID, ErrPanic, p))
	}
}

// remove force-removes the container on its own context and reports how
// long it took. Errors are dropped: the reaper catches what is left.
func (r *Runner) remove(id string) time.Duration {
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), removeTimeout)
	defer cancel()
	_ = r.Docker.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	return time.Since(t0)
}

func (r *Runner) endpoint() string {
	if r.Endpoint != "" {
		return r.Endpoint
	}
	return r.Docker.DaemonHost()
}

// tarFiles packs files (absolute paths) into a tar archive rooted at /.
// Parent folders are created by the daemon; scripts get mode 0755.
func tarFiles(files map[string][]byte) ([]byte, error) {
	names := make([]string, 0, len(files))
	for p := range files {
		if !path.IsAbs(p) || path.Clean(p) != p || p == "/" {
			return nil, fmt.Errorf("file path %q must be absolute and clean", p)
		}
		names = append(names, p)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Now()
	for _, p := range names {
		mode := int64(0o644)
		if strings.HasSuffix(p, ".sh") {
			mode = 0o755
		}
		hdr := &tar.Header{Name: strings.TrimPrefix(p, "/"), Mode: mode, Size: int64(len(files[p])), ModTime: now, Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("tar %s: %w", p, err)
		}
		if _, err := tw.Write(files[p]); err != nil {
			return nil, fmt.Errorf("tar %s: %w", p, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("tar: %w", err)
	}
	return buf.Bytes(), nil
}

// capWriter keeps the first max bytes written and signals full once when
// more arrive. It never fails a write, so the stream keeps draining.
type capWriter struct {
	mu        sync.Mutex
	max       int
	buf       bytes.Buffer
	truncated bool
	onLog     func([]byte)
	full      chan struct{}
	fullOnce  sync.Once
	panicV    any
	panicC    chan struct{} // closed when onLog panicked
}

func (w *capWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	keep := p
	if w.max > 0 {
		room := w.max - w.buf.Len()
		if room < 0 {
			room = 0
		}
		if len(keep) > room {
			keep = keep[:room]
			w.truncated = true
			w.fullOnce.Do(func() { close(w.full) })
		}
	}
	w.buf.Write(keep)
	w.mu.Unlock()
	if len(keep) > 0 && w.onLog != nil {
		w.onLog(keep)
	}
	return len(p), nil
}

func (w *capWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

func (w *capWriter) setPanic(v any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.panicV = v
	close(w.panicC)
}

func (w *capWriter) panicValue() any {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.panicV
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
