package sandbox

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/pkg/stdcopy"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/swetui/swetui/event"
)

// fakeDocker is an in-memory Docker host for the pool's logic. A
// container's script (run by an exec of bash ScriptPath, as are the lines of
// bash -c) is a list of lines the fake understands:
//
//	print TEXT     write TEXT and a newline to stdout
//	sleep 200ms    pause
//	hang           run until killed
//	exit N         exit with N (default 0)
//
// Images other than those in images are missing. down makes every call fail
// as a lost daemon does, and ends running containers' streams.
type fakeDocker struct {
	Docker // not implemented: a call panics, which a test notices

	name      string
	images    map[string]bool
	down      atomic.Bool
	silent    atomic.Bool  // pings go unanswered, streams stay open: a cut link
	createErr atomic.Int32 // fail this many creates as a lost daemon would
	removeErr atomic.Int32 // and this many removals

	mu         sync.Mutex
	containers map[string]*fakeContainer
	execs      map[string]*fakeExec
	nextID     int
	created    int
	removed    int
	lost       chan struct{} // closed when the host goes down
}

type fakeContainer struct {
	id      string
	script  string
	labels  map[string]string
	running bool
	kill    chan struct{}
	killed  sync.Once
}

var errLost = errors.New("connection refused")

func newFake(name string, images ...string) *fakeDocker {
	f := &fakeDocker{name: name, images: map[string]bool{}, containers: map[string]*fakeContainer{}, lost: make(chan struct{})}
	for _, im := range images {
		f.images[im] = true
	}
	return f
}

// setDown loses the host: calls fail and running containers' streams end.
func (f *fakeDocker) setDown() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.down.Swap(true) {
		close(f.lost)
	}
}

// setUp brings a lost host back (its old containers stay lost).
func (f *fakeDocker) setUp() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down.Swap(false) {
		f.lost = make(chan struct{})
	}
}

func (f *fakeDocker) lostChan() chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lost
}

func (f *fakeDocker) counts() (created, removed, live int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.created, f.removed, len(f.containers)
}

func (f *fakeDocker) check() error {
	if f.down.Load() {
		return fmt.Errorf("%s: %w", f.name, errLost)
	}
	return nil
}

func (f *fakeDocker) Ping(ctx context.Context) (types.Ping, error) {
	if f.silent.Load() {
		<-ctx.Done()
		return types.Ping{}, ctx.Err()
	}
	return types.Ping{}, f.check()
}

func (f *fakeDocker) DaemonHost() string { return f.name }
func (f *fakeDocker) Close() error       { return nil }

func (f *fakeDocker) ContainerCreate(ctx context.Context, cfg *container.Config, _ *container.HostConfig, _ *network.NetworkingConfig, _ *ocispec.Platform, _ string) (container.CreateResponse, error) {
	if err := f.check(); err != nil {
		return container.CreateResponse{}, err
	}
	if f.createErr.Add(-1) >= 0 {
		return container.CreateResponse{}, fmt.Errorf("%s: %w", f.name, errLost)
	}
	if !f.images[cfg.Image] {
		return container.CreateResponse{}, fmt.Errorf("No such image: %s: %w", cfg.Image, cerrdefs.ErrNotFound)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextID++
	f.created++
	id := fmt.Sprintf("%s-%064d", f.name, f.nextID)
	f.containers[id] = &fakeContainer{id: id, labels: cfg.Labels, kill: make(chan struct{})}
	return container.CreateResponse{ID: id}, nil
}

func (f *fakeDocker) get(id string) (*fakeContainer, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.containers[id]
	if !ok {
		return nil, fmt.Errorf("no such container %s: %w", id, cerrdefs.ErrNotFound)
	}
	return c, nil
}

func (f *fakeDocker) CopyToContainer(ctx context.Context, id, dst string, content io.Reader, _ container.CopyToContainerOptions) error {
	c, err := f.get(id)
	if err != nil {
		return err
	}
	// The script is the only file the fake reads.
	files, err := untar(content, dst)
	if err != nil {
		return err
	}
	if sc, ok := files[ScriptPath]; ok {
		c.script = sc
	}
	return nil
}

// untar reads a tar stream extracted at dst into path -> content.
func untar(r io.Reader, dst string) (map[string]string, error) {
	files := map[string]string{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, nil
		}
		if err != nil {
			return nil, err
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		files[path.Join(dst, h.Name)] = string(b)
	}
}

func (f *fakeDocker) ContainerStart(ctx context.Context, id string, _ container.StartOptions) error {
	c, err := f.get(id)
	if err != nil {
		return err
	}
	c.running = true
	return nil
}

// fakeExec is one process started in a fake container: the script (bash
// ScriptPath), a command line (bash -c), or du, which reports nothing
// written.
type fakeExec struct {
	c      *fakeContainer
	script string
	done   chan struct{}
	code   int
}

func (f *fakeDocker) ContainerExecCreate(ctx context.Context, id string, opts container.ExecOptions) (container.ExecCreateResponse, error) {
	c, err := f.get(id)
	if err != nil {
		return container.ExecCreateResponse{}, err
	}
	e := &fakeExec{c: c, done: make(chan struct{})}
	switch {
	case len(opts.Cmd) == 2 && opts.Cmd[0] == "bash" && opts.Cmd[1] == ScriptPath:
		e.script = c.script
	case len(opts.Cmd) == 3 && opts.Cmd[0] == "bash" && opts.Cmd[1] == "-c":
		e.script = opts.Cmd[2]
	case len(opts.Cmd) > 0 && opts.Cmd[0] == "du":
		e.script = "print 0\ttotal"
	default:
		return container.ExecCreateResponse{}, fmt.Errorf("fake: cannot run %v", opts.Cmd)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextID++
	eid := fmt.Sprintf("exec-%d", f.nextID)
	if f.execs == nil {
		f.execs = map[string]*fakeExec{}
	}
	f.execs[eid] = e
	return container.ExecCreateResponse{ID: eid}, nil
}

func (f *fakeDocker) exec(id string) (*fakeExec, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.execs[id]
	if !ok {
		return nil, fmt.Errorf("no such exec %s: %w", id, cerrdefs.ErrNotFound)
	}
	return e, nil
}

func (f *fakeDocker) ContainerExecAttach(ctx context.Context, id string, _ container.ExecAttachOptions) (types.HijackedResponse, error) {
	e, err := f.exec(id)
	if err != nil {
		return types.HijackedResponse{}, err
	}
	mine, theirs := net.Pipe()
	go f.runExec(e, theirs, f.lostChan())
	return types.HijackedResponse{Conn: mine, Reader: bufio.NewReader(mine)}, nil
}

func (f *fakeDocker) ContainerExecInspect(ctx context.Context, id string) (container.ExecInspect, error) {
	e, err := f.exec(id)
	if err != nil {
		return container.ExecInspect{}, err
	}
	select {
	case <-e.done:
		return container.ExecInspect{ExecID: id, ExitCode: e.code}, nil
	default:
		return container.ExecInspect{ExecID: id, Running: true}, nil
	}
}

func (f *fakeDocker) runExec(e *fakeExec, out net.Conn, lost chan struct{}) {
	w := stdcopy.NewStdWriter(out, stdcopy.Stdout)
	finish := func(code int) {
		e.code = code
		out.Close()
		close(e.done)
	}
	for _, line := range strings.Split(e.script, "\n") {
		cmd, arg, _ := strings.Cut(strings.TrimSpace(line), " ")
		var wait <-chan time.Time
		switch cmd {
		case "print":
			w.Write([]byte(strings.ReplaceAll(arg, `\t`, "\t") + "\n"))
			continue
		case "sleep":
			d, _ := time.ParseDuration(arg)
			wait = time.After(d)
		case "hang":
		case "exit":
			n, _ := strconv.Atoi(arg)
			finish(n)
			return
		default:
			continue
		}
		select {
		case <-wait:
		case <-e.c.kill:
			finish(137)
			return
		case <-lost:
			out.Close() // the stream dies with the daemon; the process lives on
			return
		}
	}
	finish(0)
}

func (f *fakeDocker) ContainerKill(ctx context.Context, id, _ string) error {
	c, err := f.get(id)
	if err != nil {
		return err
	}
	c.killed.Do(func() { close(c.kill) })
	return nil
}

func (f *fakeDocker) ContainerRemove(ctx context.Context, id string, _ container.RemoveOptions) error {
	c, err := f.get(id)
	if err != nil {
		return err
	}
	if f.removeErr.Add(-1) >= 0 {
		return fmt.Errorf("%s: %w", f.name, errLost)
	}
	c.killed.Do(func() { close(c.kill) })
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.containers, id)
	f.removed++
	return nil
}

func (f *fakeDocker) ContainerList(ctx context.Context, opts container.ListOptions) ([]container.Summary, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	want := opts.Filters.Get("label")
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []container.Summary
	for _, c := range f.containers {
		match := true
		for _, kv := range want {
			k, v, _ := strings.Cut(kv, "=")
			if c.labels[k] != v {
				match = false
			}
		}
		if match {
			out = append(out, container.Summary{ID: c.id, Labels: c.labels})
		}
	}
	return out, nil
}

// recorder is an event.Publisher that keeps what a pool publishes: log
// batches on a buffered channel (dropped when full, as the bus would), the
// messages and pool states in order.
type recorder struct {
	logs   chan event.LogBatch
	mu     sync.Mutex
	msgs   []event.Message
	states []event.PoolState
}

func newRecorder(buffer int) *recorder { return &recorder{logs: make(chan event.LogBatch, buffer)} }

func (r *recorder) Publish(ev event.Event) {
	switch e := ev.(type) {
	case event.LogBatch:
		select {
		case r.logs <- e:
		default:
		}
	case event.Message:
		r.mu.Lock()
		r.msgs = append(r.msgs, e)
		r.mu.Unlock()
	case event.PoolState:
		r.mu.Lock()
		r.states = append(r.states, e)
		r.mu.Unlock()
	}
}

// said reports whether a message containing text was published.
func (r *recorder) said(text string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.msgs {
		if strings.Contains(m.Text, text) {
			return true
		}
	}
	return false
}

// saidWithin waits up to d for a message containing text: messages published
// by work beside the caller (a reap once a host is back) may land just after
// what the caller can observe of that work.
func (r *recorder) saidWithin(text string, d time.Duration) bool {
	for end := time.Now().Add(d); ; time.Sleep(20 * time.Millisecond) {
		if r.said(text) {
			return true
		}
		if time.Now().After(end) {
			return false
		}
	}
}

func (r *recorder) lastState() (event.PoolState, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.states) == 0 {
		return event.PoolState{}, false
	}
	return r.states[len(r.states)-1], true
}
