package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docker/docker/api/types/container"
)

// A Session is one long-lived sandbox that an agent works in, a command at
// a time. Pool.OpenSession opens one on a host that can hold it: a
// container of a Docker host or a Pod of a Kubernetes one, with the
// confinement of an evaluation's (no network, the memory, CPU, pids and
// disk limits, a read-only root outside the work tree, the image's
// non-root user), its processes started by the daemon or the kubelet, its
// labels those of the pool's sandboxes, so that a swetui killed with -9
// leaves nothing that the next start's reaper does not remove. Nothing in
// it is trusted: its diff is graded in a fresh sandbox.
//
// A command that passes its time is killed with every process it started,
// background jobs and new sessions (setsid) included: everything in the
// sandbox but its PID 1 (an init, a Pod's pause) and the sleep that keeps
// it alive. Killing the client's exec alone leaves the command running
// (neither the daemon nor the kubelet kills an exec whose client goes).
type Session interface {
	// ID is the sandbox's id (a container's, a Pod's).
	ID() string
	// Host is the endpoint it runs on.
	Host() string
	// Exec runs command (a shell command line, /bin/sh -c) in the work
	// tree as the session's user, to its end or its timeout, keeping the
	// head and tail of its output. The error is the sandbox's failure
	// (ErrSessionLost), never the command's: that is ExitCode.
	Exec(ctx context.Context, command string, o ExecOptions) (ExecResult, error)
	// Diff is the work tree's change from commit as swetui computes it,
	// at most maxBytes.
	Diff(ctx context.Context, commit string, maxBytes int) (string, error)
	// Close removes the sandbox; on its own deadline.
	Close() error
}

// SessionBackend is a Backend that can hold sessions.
type SessionBackend interface {
	OpenSession(ctx context.Context, spec Spec) (Session, error)
}

// ErrSessionLost marks a session whose sandbox is gone or can no longer
// start a process (a fork bomb holding every pid): it takes no more
// commands.
var ErrSessionLost = errors.New("session lost")

// ExecOptions bound one command of a session.
type ExecOptions struct {
	Timeout time.Duration // wall clock; at it the command and all it started are killed
	// MaxOutput bytes of stdout and stderr are kept: the first and the
	// last halves, the middle cut (0: 64 KiB).
	MaxOutput int
}

// ExecResult is one command's outcome.
type ExecResult struct {
	ExitCode int    // 137 for a command killed at its timeout
	Output   string // stdout and stderr interleaved, head and tail as kept
	Bytes    int64  // all the output's bytes, kept or not
	TimedOut bool
	Duration time.Duration
}

// SessionScript fills an evaluation spec's required script: a session has
// no script of its own.
const SessionScript = ": a session runs its commands one by one"

// OpenSession makes and starts spec's sandbox (Image, Workdir, User, Env,
// Files, ID, and Timeout: the session's whole life, after which it is
// stale whoever owns it). The caller must Close it.
func (r *Runner) OpenSession(ctx context.Context, spec Spec) (Session, error) {
	if spec.Script == "" {
		spec.Script = SessionScript
	}
	id, err := r.Create(ctx, spec, &Durations{})
	if err != nil {
		if id != "" {
			removeNow(r, id)
		}
		return nil, fmt.Errorf("open session %s: %w", spec.ID, err)
	}
	apiCtx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	if err := r.Docker.ContainerStart(apiCtx, id, container.StartOptions{}); err != nil {
		removeNow(r, id)
		return nil, fmt.Errorf("open session %s: start container %s: %w", spec.ID, short(id), err)
	}
	s, err := NewSession(ctx, r, id, spec, dockerProcs{r: r, id: id})
	if err != nil {
		removeNow(r, id)
		return nil, err
	}
	return s, nil
}

// NewSession is the Session of backend b's started sandbox id, made for
// spec (its own process idling, nothing else run in it yet), whose
// processes p starts and kills: p.Exec runs a process in the work tree as
// the user it is given, p.Kill ends the whole sandbox now. Every backend's
// session is this one. On error the caller removes the sandbox.
func NewSession(ctx context.Context, b Backend, id string, spec Spec, p Procs) (Session, error) {
	s := &procSession{b: b, p: p, id: id, spec: spec}
	// The init may not have started its child yet when the sandbox is
	// reported started (seen on a loaded host): look again for a while.
	for try := 0; ; try++ {
		var out strings.Builder
		code, err := p.Exec(ctx, []string{"/bin/sh", "-c", ownProcessScript}, spec.User, &out)
		fields := strings.Fields(out.String())
		if err == nil && code == 0 && len(fields) == 1 {
			s.keep = fields[0]
			return s, nil
		}
		if err != nil || code != 0 || len(fields) > 1 || try == ownProcessTries || ctx.Err() != nil {
			return nil, fmt.Errorf("open session %s: find the sandbox's own process: exit %d, %q: %v", spec.ID, code, out.String(), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ownProcessTries is how many times more NewSession looks for the
// sandbox's own process before giving up (100 ms apart).
const ownProcessTries = 50

// ownProcessScript prints the sandbox's own process: the only one alive
// but PID 1 (Docker's init, or the pause process a Pod shares its PID
// namespace with) and the script itself, which forks nothing. A process an
// earlier exec left a zombie (a Pod's tar of the files) is not it.
const ownProcessScript = `for d in /proc/[0-9]*; do
  p=${d##*/}
  case $p in 1|$$) continue ;; esac
  st=
  read -r st < "$d/stat" 2>/dev/null || continue
  st=${st##*) }
  case ${st%% *} in Z|X) continue ;; esac
  echo "$p"
done`

// CommandProcs are Procs whose Exec ends only when every process holding
// its output has (the kubelet's exec): ExecCommand runs a session's
// command line (/bin/sh -c) and returns once its shell has exited, with
// what it wrote until then, whatever it left running, as Docker's exec
// does. Procs.Exec runs the session's own scripts, which start nothing.
// A stream cut may still write to out for a moment after either returns:
// the session drops those writes.
type CommandProcs interface {
	ExecCommand(ctx context.Context, command, user string, out io.Writer) (int, error)
}

// procSession is a Session in any backend's sandbox, driven through its
// Procs.
type procSession struct {
	b    Backend
	p    Procs
	id   string
	spec Spec
	// keep is the pid of the sandbox's own process (the sleep), which
	// every kill spares.
	keep string
	mu   sync.Mutex // one command at a time
	lost atomic.Bool
}

// killBound is how long the kill script may take before the whole
// sandbox is killed instead (a fork bomb once held it for 96 s on a busy
// host).
var killBound = 10 * time.Second

// ID implements Session.
func (s *procSession) ID() string { return s.id }

// Host implements Session.
func (s *procSession) Host() string { return s.b.Name() }

// Exec implements Session.
func (s *procSession) Exec(ctx context.Context, command string, o ExecOptions) (ExecResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lost.Load() {
		return ExecResult{ExitCode: -1}, ErrSessionLost
	}
	if o.MaxOutput <= 0 {
		o.MaxOutput = 64 << 10
	}
	start := time.Now()
	w := newHeadTail(o.MaxOutput)
	// The command ends when its shell does: the kill, not ctx, ends it;
	// once the whole sandbox is killed its stream is not waited for (a
	// deleted Pod's can take a minute to close).
	run, abandon := context.WithCancel(context.WithoutCancel(ctx))
	defer abandon()
	out := &gateWriter{w: w}
	var timedOut, killed atomic.Bool
	var killErr error
	killDone := make(chan struct{})
	kill := func() {
		if killed.Swap(true) {
			return
		}
		defer close(killDone)
		if killErr = s.killAll(context.WithoutCancel(ctx)); killErr != nil {
			abandon()
		}
	}
	timer := time.AfterFunc(o.Timeout, func() { timedOut.Store(true); kill() })
	stop := context.AfterFunc(ctx, kill)
	var code int
	var err error
	if c, ok := s.p.(CommandProcs); ok {
		code, err = c.ExecCommand(run, command, s.spec.User, out)
	} else {
		code, err = s.p.Exec(run, []string{"/bin/sh", "-c", command}, s.spec.User, out)
	}
	out.close()
	timer.Stop()
	stop()
	if killed.Load() {
		<-killDone
	}
	res := ExecResult{ExitCode: code, Output: w.String(), Bytes: w.n, TimedOut: timedOut.Load(), Duration: time.Since(start)}
	switch {
	case killErr != nil:
		s.lost.Store(true)
		return res, fmt.Errorf("session %s: %w: %v", s.spec.ID, ErrSessionLost, killErr)
	case err != nil:
		s.lost.Store(true)
		return res, fmt.Errorf("session %s: %w: %v", s.spec.ID, ErrSessionLost, err)
	case ctx.Err() != nil:
		return res, fmt.Errorf("session %s: %w", s.spec.ID, ctx.Err())
	}
	return res, nil
}

// killScript kills, as the session's user, every process of the sandbox
// but its PID 1 (an init, a Pod's pause), the sleep ($1) and itself, until none is left (in $2, the
// proc folder, /proc unless a test gives its own). Each round first stops
// every process the user may signal at once (kill -STOP -1: the kernel
// signals them all under the lock fork takes, and a process with a signal
// pending cannot fork, so a fork bomb makes no more), then kills them one
// by one and lets the sleep go on; walking /proc alone raced a fork bomb
// that refilled its pids behind the walk for minutes on a busy host. A
// zombie (state Z) or a process already past exit (X) counts as gone:
// signalling one succeeds, and on a busy host the init may not have
// reaped it yet. Only shell builtins, so it forks nothing itself.
const killScript = `round=0
freeze=; [ "${2:-/proc}" = /proc ] && freeze=1
while [ $round -lt 200 ]; do
  round=$((round+1))
  [ -n "$freeze" ] && kill -STOP -1 2>/dev/null
  n=0
  for sig in STOP KILL; do
    for d in "${2:-/proc}"/[0-9]*; do
      p=${d##*/}
      case $p in 1|"$1"|$$) continue ;; esac
      st=
      read -r st < "$d/stat" 2>/dev/null || continue
      st=${st##*) }
      case ${st%% *} in Z|X) continue ;; esac
      kill -$sig "$p" 2>/dev/null && n=$((n+1))
    done
  done
  [ -n "$freeze" ] && kill -CONT "$1" 2>/dev/null
  [ "$n" = 0 ] && exit 0
done
exit 1`

// killAll ends every process a command left; when the kill script cannot
// run (no pid is free) or does not finish within killBound, the whole
// sandbox is killed and the session lost.
func (s *procSession) killAll(ctx context.Context) error {
	type result struct {
		code int
		out  string
		err  error
	}
	done := make(chan result, 1)
	sctx, abandon := context.WithCancel(ctx)
	defer abandon()
	go func() {
		var out strings.Builder
		code, err := s.p.Exec(sctx, []string{"/bin/sh", "-c", killScript, "kill", s.keep}, s.spec.User, &out)
		done <- result{code, out.String(), err}
	}()
	bound := time.NewTimer(killBound)
	defer bound.Stop()
	var why string
	select {
	case r := <-done:
		if r.err == nil && r.code == 0 {
			return nil
		}
		why = fmt.Sprintf("exit %d, %q: %v", r.code, r.out, r.err)
	case <-bound.C:
		why = fmt.Sprintf("still running after %s", killBound)
	}
	kctx, cancel := context.WithTimeout(ctx, removeTimeout)
	defer cancel()
	if err := s.p.Kill(kctx); err != nil {
		return fmt.Errorf("the command's processes could not be killed (%s), nor the sandbox: %w", why, err)
	}
	return fmt.Errorf("the command's processes could not be killed (%s): the sandbox was", why)
}

// Diff implements Session: the change as swetui computes it (never a
// patch the agent prints): every file, new ones included, as git diff
// writes it with no external diff, text conversion or hook of the
// repository's. It is graded in a fresh sandbox, so what the agent did to
// its git can only spoil its own patch.
func (s *procSession) Diff(ctx context.Context, commit string, maxBytes int) (string, error) {
	cmd := fmt.Sprintf(`export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null GIT_INDEX_FILE=/tmp/.swetui-diff-index
rm -f "$GIT_INDEX_FILE"
git -c core.hooksPath=/dev/null -c core.fsmonitor=false add -A . >/dev/null 2>&1 &&
git -c core.hooksPath=/dev/null -c core.fsmonitor=false diff --cached --no-ext-diff --no-textconv --no-color --binary %s`, shq(commit))
	res, err := s.Exec(ctx, cmd, ExecOptions{Timeout: 2 * time.Minute, MaxOutput: maxBytes + 1})
	switch {
	case err != nil:
		return "", err
	case res.TimedOut || res.ExitCode != 0:
		return "", fmt.Errorf("session %s: git diff %s: exit %d: %s", s.spec.ID, commit, res.ExitCode, strings.TrimSpace(res.Output))
	case res.Bytes > int64(maxBytes):
		return "", fmt.Errorf("session %s: the diff is %d bytes, over %d", s.spec.ID, res.Bytes, maxBytes)
	}
	return res.Output, nil
}

// Close implements Session: the sandbox goes with its processes and
// volumes, on its own deadline, so a cancelled caller still cleans up.
func (s *procSession) Close() error {
	s.lost.Store(true)
	return removeSandbox(s.b, s.id)
}

// gateWriter passes writes on until it is closed, then drops them: a
// stream given up on may still be writing.
type gateWriter struct {
	mu     sync.Mutex
	w      io.Writer
	closed bool
}

func (g *gateWriter) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return len(p), nil
	}
	return g.w.Write(p)
}

func (g *gateWriter) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}

// headTail keeps the first and last halves of at most max bytes written,
// counting all of them: a command's output, bounded as it streams.
type headTail struct {
	max  int
	head []byte
	tail []byte // a ring of the last max/2 bytes once the head is full
	pos  int    // next write in tail
	full bool   // the ring has wrapped
	n    int64
}

func newHeadTail(max int) *headTail { return &headTail{max: max} }

func (h *headTail) Write(p []byte) (int, error) {
	h.n += int64(len(p))
	written := len(p)
	if room := h.max/2 + h.max%2 - len(h.head); room > 0 {
		k := min(room, len(p))
		h.head = append(h.head, p[:k]...)
		p = p[k:]
	}
	half := h.max / 2
	if half == 0 {
		return written, nil
	}
	for len(p) > 0 {
		if len(h.tail) < half {
			k := min(half-len(h.tail), len(p))
			h.tail = append(h.tail, p[:k]...)
			p = p[k:]
			continue
		}
		k := copy(h.tail[h.pos:], p)
		h.pos, p = (h.pos+k)%half, p[k:]
		h.full = true
	}
	return written, nil
}

// String is the kept output, the cut said where it is.
func (h *headTail) String() string {
	tail := h.tail
	if h.full {
		tail = append(append([]byte(nil), h.tail[h.pos:]...), h.tail[:h.pos]...)
	}
	if cut := h.n - int64(len(h.head)+len(tail)); cut > 0 {
		return fmt.Sprintf("%s\n... [%d bytes not shown] ...\n%s", h.head, cut, tail)
	}
	return string(h.head) + string(tail)
}

var _ SessionBackend = (*Runner)(nil)

// OpenSession opens a session (spec: Image, Workdir, User, Env, Files, ID,
// Timeout for its whole life) on the up host with the least load that can
// hold one, with the pool's limits and run id: Close gives its slot back,
// and the pool's own Close removes any left open.
func (p *Pool) OpenSession(ctx context.Context, spec Spec) (Session, error) {
	p.mu.Lock()
	var best *host
	for _, h := range p.hosts {
		if _, ok := h.backend.(SessionBackend); !ok || !h.up || p.closed {
			continue
		}
		if c := h.capacity(); c > 0 && h.active >= c {
			continue
		}
		if best == nil || h.active < best.active {
			best = h
		}
	}
	if best == nil {
		p.mu.Unlock()
		return nil, fmt.Errorf("open session %s: %w: no host that is up can hold a session (sessions run on Docker and Kubernetes hosts: each is down or full)", spec.ID, ErrNoHost)
	}
	best.active++
	p.sessions++
	p.version++
	p.mu.Unlock()
	leave := sync.OnceFunc(func() {
		p.mu.Lock()
		p.sessions--
		p.version++
		p.mu.Unlock()
		p.leave(best)
	})
	s, err := best.backend.(SessionBackend).OpenSession(ctx, spec)
	if err != nil {
		leave()
		return nil, err
	}
	return &poolSession{Session: s, leave: leave}, nil
}

// poolSession gives its host's slot back when it closes.
type poolSession struct {
	Session
	leave func()
}

func (s *poolSession) Close() error {
	defer s.leave()
	return s.Session.Close()
}
