package kube

import (
	"context"
	"fmt"
	"io"
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
	s, err := sandbox.NewSession(ctx, b, id, spec, b.cfg.Limits, sessionProcs{podProcs{b: b, id: id}})
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

// InitKeepsAlive implements sandbox.InitKeeper: a session Pod's PID 1 is
// its own (sessionInit), which keeps it alive.
func (sessionProcs) InitKeepsAlive() bool { return true }

var _ sandbox.CommandProcs = sessionProcs{}

// leftOutput is how long what a command's leftover jobs write still
// counts once its wrapper has exited, as on Docker.
const leftOutput = time.Second

// ExecCommand implements sandbox.CommandProcs: the stream is cut a moment
// after the wrapper writes its trailer (a job the command left may hold
// the stream open), its status the one it wrote.
func (p sessionProcs) ExecCommand(ctx context.Context, cmd []string, _ string, out io.Writer, t *sandbox.Trailer) (int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		code int
		err  error
	}
	finished := make(chan result, 1)
	go func() {
		code, err := p.b.execStreams(ctx, p.id, p.limited(cmd), nil, out, t)
		finished <- result{code, err}
	}()
	var r result
	select {
	case r = <-finished:
	case <-t.Done():
		select {
		case r = <-finished:
		case <-time.After(leftOutput):
			cancel()
			r = <-finished
		}
	}
	if code, _, ok := t.Status(); ok {
		return code, nil
	}
	return r.code, r.err
}
