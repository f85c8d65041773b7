package kube

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/swetui/swetui/sandbox"
)

var _ sandbox.SessionBackend = (*Backend)(nil)

// OpenSession makes spec's Pod as an evaluation's (the same confinement,
// labels and annotations, so the reaper removes one a killed swetui
// leaves; spec.Timeout is its whole life, activeDeadlineSeconds included),
// waits until it runs and copies spec's files in. Its commands run through
// pods/exec as the Pod's user, under the disk bound; one past its time is
// killed with all it started by sandbox's kill script, and the Pod is
// deleted if even that cannot finish. The caller must Close it.
func (b *Backend) OpenSession(ctx context.Context, spec sandbox.Spec) (sandbox.Session, error) {
	if spec.Script == "" {
		spec.Script = sandbox.SessionScript
	}
	id, err := b.Create(ctx, spec, &sandbox.Durations{})
	if err != nil {
		if id != "" {
			b.removeNow(id)
		}
		return nil, fmt.Errorf("open session %s: %w", spec.ID, err)
	}
	s, err := sandbox.NewSession(ctx, b, id, spec, sessionProcs{podProcs{b: b, id: id}})
	if err != nil {
		b.removeNow(id)
		return nil, err
	}
	return s, nil
}

// removeNow deletes Pod id on its own deadline; errors are dropped (the
// reaper takes what is left).
func (b *Backend) removeNow(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
	defer cancel()
	_ = b.Remove(ctx, id)
}

// sessionProcs are a session Pod's processes.
type sessionProcs struct{ podProcs }

var _ sandbox.CommandProcs = sessionProcs{}

// statusWrapper runs the command line $1 in a shell of its own, its
// output and errors both on stdout, and then writes its status on stderr,
// which nothing the command starts holds: the kubelet's stream stays open
// while a job it left holds stdout, the status says when it is done.
const statusWrapper = `/bin/sh -c "$1" 2>&1; s=$?; echo "$s" >&2; exit "$s"`

// leftOutput is how long what a command's leftover jobs write still
// counts once its shell has exited, as on Docker.
const leftOutput = time.Second

// ExecCommand implements sandbox.CommandProcs: the stream is cut a moment
// after the command's shell exits, its status the one it wrote.
func (p sessionProcs) ExecCommand(ctx context.Context, command, _ string, out io.Writer) (int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st := &statusWriter{done: make(chan struct{})}
	type result struct {
		code int
		err  error
	}
	finished := make(chan result, 1)
	go func() {
		code, err := p.b.execStreams(ctx, p.id, p.limited([]string{"/bin/sh", "-c", statusWrapper, "swetui", command}), nil, out, st)
		finished <- result{code, err}
	}()
	var r result
	select {
	case r = <-finished:
	case <-st.done:
		select {
		case r = <-finished:
		case <-time.After(leftOutput):
			cancel()
			r = <-finished
		}
	}
	if code, ok := st.status(); ok {
		return code, nil
	}
	return r.code, r.err
}

// statusWriter takes the status line statusWrapper writes.
type statusWriter struct {
	mu   sync.Mutex
	buf  []byte
	done chan struct{}
	once sync.Once
}

func (s *statusWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.buf) < 64 {
		s.buf = append(s.buf, p...)
	}
	if bytes.IndexByte(s.buf, '\n') >= 0 {
		s.once.Do(func() { close(s.done) })
	}
	return len(p), nil
}

// status is the command's exit status, once written.
func (s *statusWriter) status() (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	line, _, ok := bytes.Cut(s.buf, []byte("\n"))
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(string(line))
	return n, err == nil
}
