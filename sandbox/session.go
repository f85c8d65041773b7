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

// ErrSessionKilled marks a session whose sandbox swetui stopped for what
// its own commands did (more processes than a kill could end, more than
// the disk bound written, its life spent): the agent's doing, never an
// infrastructure failure. It is an ErrSessionLost.
var ErrSessionKilled = fmt.Errorf("%w: its sandbox was stopped for what its commands did", ErrSessionLost)

// ErrSessionExpired marks a session past its life (Spec.Timeout, agent.session_minutes): an
// ErrSessionKilled.
var ErrSessionExpired = fmt.Errorf("%w: its life (agent.session_minutes) is spent", ErrSessionKilled)

// ErrSessionClosed marks a command cut short by its session's Close: an
// ErrSessionLost.
var ErrSessionClosed = fmt.Errorf("%w: closed", ErrSessionLost)

// MinExecTimeout is the shortest time a command is given: a shorter (or
// no) timeout is raised to it.
const MinExecTimeout = 500 * time.Millisecond

// SessionEnv is what every command of a session runs with, besides the
// sandbox's own environment: nothing pages, prompts or asks (its stdin is
// closed too).
var SessionEnv = []string{"PAGER=cat", "GIT_PAGER=cat", "TERM=dumb", "GIT_TERMINAL_PROMPT=0", "DEBIAN_FRONTEND=noninteractive"}

// ExecOptions bound one command of a session.
type ExecOptions struct {
	// Timeout is the wall clock (at least MinExecTimeout); at it the
	// command and all it started are killed.
	Timeout time.Duration
	// MaxOutput bytes of stdout and stderr are kept: the first and the
	// last halves, the middle cut (0: 64 KiB).
	MaxOutput int
}

// ExecResult is one command's outcome.
type ExecResult struct {
	ExitCode int    // 137 for a command killed at its timeout, always
	Output   string // stdout and stderr interleaved, head and tail as kept
	Bytes    int64  // all the output's bytes, kept or not
	// Omitted is how many of them were not kept: cut from the middle,
	// where Output says so ("... [N bytes not shown] ...").
	Omitted  int64
	TimedOut bool
	Duration time.Duration
}

// SessionScript fills an evaluation spec's required script: a session has
// no script of its own.
const SessionScript = ": a session runs its commands one by one"

// OpenSession makes and starts spec's sandbox (Image, Workdir, User, Env,
// Files, ID, and Timeout: the session's whole life, after which it is
// stale whoever owns it). The caller must Close it.
//
// The sandbox's own processes (its init and the sleep that keeps it
// alive) run as a user the agent's cannot signal: root without
// capabilities, or nobody (65534) where the agent is root; every command
// runs as the agent's user (spec.User, or the image's).
func (r *Runner) OpenSession(ctx context.Context, spec Spec) (Session, error) {
	if spec.Script == "" {
		spec.Script = SessionScript
	}
	if spec.User == "" {
		apiCtx, cancel := context.WithTimeout(ctx, apiTimeout)
		img, err := r.Docker.ImageInspect(apiCtx, spec.Image)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("open session %s: the image's user: %w", spec.ID, err)
		}
		spec.User = "0"
		if img.Config != nil && img.Config.User != "" {
			spec.User = img.Config.User
		}
	}
	keep := spec
	keep.User = "0"
	if u, _, _ := strings.Cut(spec.User, ":"); u == "0" || u == "root" {
		keep.User = "65534:65534"
	}
	id, err := r.Create(ctx, keep, &Durations{})
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
	s, err := NewSession(ctx, r, id, spec, r.Limits, dockerProcs{r: r, id: id})
	if err != nil {
		removeNow(r, id)
		return nil, err
	}
	return s, nil
}

// NewSession is the Session of backend b's started sandbox id, made for
// spec (its own process idling, nothing else run in it yet) under limits l
// (the disk bound), whose processes p starts and kills: p.Exec runs a
// process in the work tree as the user it is given, p.Kill ends the whole
// sandbox now. Every backend's session is this one. On error the caller
// removes the sandbox. Its life (spec.Timeout) starts now.
func NewSession(ctx context.Context, b Backend, id string, spec Spec, l Limits, p Procs) (Session, error) {
	s := &procSession{b: b, p: p, id: id, spec: spec, diskMB: l.DiskMB, ends: time.Now().Add(spec.Timeout)}
	s.closing, s.close = context.WithCancel(context.Background())
	// The disk's base rides on the same exec where there is one: an exec
	// is the most of what opening a session costs on a busy host.
	argv := []string{"/bin/sh", "-c", ownProcessScript}
	if s.diskMB > 0 {
		argv = append([]string{"/bin/sh", "-c", ownProcessScript + diskBaseTrailer, "swetui"}, WritableDirs(spec)...)
	}
	haveBase := false
	// The init may not have started its child yet when the sandbox is
	// reported started (seen on a loaded host): look again for a while.
	for try := 0; ; try++ {
		if k, ok := p.(InitKeeper); ok && k.InitKeepsAlive() {
			break // nothing to spare but PID 1
		}
		var out strings.Builder
		code, err := p.Exec(ctx, argv, spec.User, &out)
		own, du, measured := strings.Cut(out.String(), diskBaseMark)
		fields := strings.Fields(own)
		if err == nil && code == 0 && len(fields) == 1 {
			s.keep = fields[0]
			if kb := duTotal(du); measured && kb > 0 {
				s.diskBase, haveBase = kb, true
			}
			break
		}
		if err != nil || code != 0 || len(fields) > 1 || try == ownProcessTries || ctx.Err() != nil {
			return nil, fmt.Errorf("open session %s: find the sandbox's own process: exit %d, %q: %v", spec.ID, code, out.String(), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if s.diskMB > 0 && !haveBase {
		// What the image's work tree holds is no write of the agent's.
		kb, ok := diskUsage(p, spec)
		if !ok {
			return nil, fmt.Errorf("open session %s: measure its work tree", spec.ID)
		}
		s.diskBase = kb
	}
	return s, nil
}

// An InitKeeper's sandbox is kept alive by its PID 1 alone (which no
// process of the agent's can signal): no other process is spared.
type InitKeeper interface {
	InitKeepsAlive() bool
}

// ownProcessTries is how many times more NewSession looks for the
// sandbox's own process before giving up (100 ms apart).
const ownProcessTries = 50

// ownProcessScript prints the sandbox's own process: the only one alive
// but PID 1 (Docker's init, or the pause process a Pod shares its PID
// namespace with) and the script itself, which forks nothing. On Docker it
// is another user's, which the agent's cannot signal. A process an
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

// diskBaseTrailer follows ownProcessScript when the session has a disk
// bound: du of the writable folders (its arguments), after the process
// listing so that the listing never sees du. diskBaseMark parts the two.
const (
	diskBaseMark    = "--disk-base--"
	diskBaseTrailer = "\necho " + diskBaseMark + "\ndu -skxc -- \"$@\" 2>/dev/null\nexit 0"
)

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
	// lostWhy is the error every command gets once the session is lost.
	lostMu  sync.Mutex
	lostWhy error
	// closing ends with Close: a command running then is abandoned.
	closing context.Context
	close   context.CancelFunc
	ends    time.Time // its life's end
	// diskMB bounds what the work tree may grow by over diskBase (KiB).
	diskMB   int
	diskBase int64
	// sinceDisk is the commands' time since the work tree was last
	// measured (guarded by mu).
	sinceDisk time.Duration
}

// stickEvery is how long after a kill the command may still run before it
// is killed again (the kill may have run before the command's processes
// existed); killBound after the first the sandbox is killed.
var stickEvery = 500 * time.Millisecond

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
	if err := s.gone(); err != nil {
		return ExecResult{ExitCode: -1}, err
	}
	if err := ctx.Err(); err != nil {
		return ExecResult{ExitCode: -1}, fmt.Errorf("session %s: %w", s.spec.ID, err)
	}
	left := time.Until(s.ends)
	if left <= 0 {
		return ExecResult{ExitCode: -1}, s.expire()
	}
	if o.MaxOutput <= 0 {
		o.MaxOutput = 64 << 10
	}
	o.Timeout = max(o.Timeout, MinExecTimeout)
	lastWords := o.Timeout >= left // the session's life ends first
	o.Timeout = min(o.Timeout, left)
	start := time.Now()
	w := newHeadTail(o.MaxOutput)
	// The command ends when its shell does: the kill, not ctx, ends it;
	// once the whole sandbox is killed (or the session closed) its stream
	// is not waited for (a deleted Pod's can take a minute to close).
	run, abandon := context.WithCancel(s.closing)
	defer abandon()
	out := &gateWriter{w: w}
	var timedOut atomic.Bool
	var killErr error
	killC := make(chan struct{})
	kill := sync.OnceFunc(func() { close(killC) })
	done := make(chan struct{})
	killDone := make(chan struct{})
	// The kill sticks: it runs again while the command has not returned
	// (the first may have run before its processes existed), and past
	// killBound the whole sandbox is killed.
	go func() {
		defer close(killDone)
		select {
		case <-done:
			return
		case <-killC:
		}
		first := time.Now()
		for {
			if err := s.killAll(context.WithoutCancel(ctx), killBound-time.Since(first)); err != nil {
				killErr = err
				abandon()
				return
			}
			select {
			case <-done:
				return
			case <-time.After(stickEvery):
			}
			if time.Since(first) >= killBound {
				kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
				err := s.p.Kill(kctx)
				cancel()
				killErr = fmt.Errorf("%w: the command still ran %s after its kill: the sandbox was killed (%v)", ErrSessionKilled, killBound, err)
				abandon()
				return
			}
		}
	}()
	timer := time.AfterFunc(o.Timeout, func() { timedOut.Store(true); kill() })
	stop := context.AfterFunc(ctx, kill)
	var diskC chan struct{}
	if s.diskMB > 0 {
		diskC = make(chan struct{})
		go s.watchDisk(done, diskC, kill)
	}
	var code int
	var err error
	tr := NewTrailer()
	c, isCmd := s.p.(CommandProcs)
	if isCmd {
		bg := "0"
		if s.spec.Background {
			bg = "1"
		}
		// The work tree is measured (a du, 10 ms a command on a busy
		// 2-core box) once commands have run DiskEvery since the last
		// measure, as an evaluation's every DiskEvery; a longer command
		// is measured while it runs too.
		measure := "0"
		if s.diskMB > 0 && s.sinceDisk >= DiskEvery {
			measure = "1"
		}
		argv := append([]string{"/bin/sh", "-c", commandWrapper, "swetui", command, s.keep, bg, measure}, WritableDirs(s.spec)...)
		code, err = c.ExecCommand(run, argv, s.spec.User, out, tr)
	} else {
		code, err = s.p.Exec(run, []string{"/bin/sh", "-c", command}, s.spec.User, out)
	}
	out.close()
	timer.Stop()
	stop()
	close(done)
	<-killDone
	res := ExecResult{ExitCode: code, Output: w.String(), Bytes: w.n, Omitted: w.omitted(), TimedOut: timedOut.Load(), Duration: time.Since(start)}
	if res.TimedOut {
		res.ExitCode = killedStatus // never the command's own code
	}
	over := false
	if diskC != nil {
		select {
		case <-diskC:
			over = true
		default:
		}
	}
	trailed, cpuOver := false, false
	if isCmd {
		s.sinceDisk += res.Duration
		if _, kb, ok := tr.Status(); ok {
			trailed = true
			if kb >= 0 {
				s.sinceDisk = 0
			}
			if s.diskMB > 0 && kb >= 0 && kb-s.diskBase > int64(s.diskMB)<<10 {
				over = true
			}
		}
		if cpu, ok := tr.CPU(); ok && s.spec.Background && s.spec.CPUTime > 0 && cpu > s.spec.CPUTime {
			cpuOver = true
		}
	}
	switch {
	case s.closing.Err() != nil:
		return res, s.lose(ErrSessionClosed)
	case over:
		return res, s.overDisk()
	case cpuOver:
		err := s.stopSandbox()
		return res, s.lose(fmt.Errorf("session %s: %w: cpu limit: its processes used more than %s of CPU time (agent.background_cpu_s); the sandbox was stopped (%v)",
			s.spec.ID, ErrSessionKilled, s.spec.CPUTime, orNone(err)))
	case killErr != nil:
		if lastWords && res.TimedOut {
			return res, s.expire()
		}
		return res, s.lose(fmt.Errorf("session %s: %w", s.spec.ID, killErr))
	case err != nil:
		return res, s.lose(fmt.Errorf("session %s: %w: %v", s.spec.ID, ErrSessionLost, err))
	case lastWords && res.TimedOut:
		return res, s.expire()
	case ctx.Err() != nil:
		return res, fmt.Errorf("session %s: %w", s.spec.ID, ctx.Err())
	case isCmd && !trailed && !res.TimedOut:
		// The wrapper did not finish: killed by the agent's own kill
		// -9 -1, or with its sandbox. A dead sandbox is named now.
		if err := s.alive(); err != nil {
			return res, s.lose(fmt.Errorf("session %s: %w: the sandbox is gone (%v)", s.spec.ID, ErrSessionLost, err))
		}
	}
	return res, nil
}

// gone is the error a lost session's commands get (nil while it is not).
func (s *procSession) gone() error {
	if !s.lost.Load() {
		return nil
	}
	s.lostMu.Lock()
	defer s.lostMu.Unlock()
	if s.lostWhy != nil {
		return s.lostWhy
	}
	return fmt.Errorf("session %s: %w", s.spec.ID, ErrSessionLost)
}

// lose marks the session lost for err (the first cause stays) and
// returns it.
func (s *procSession) lose(err error) error {
	s.lostMu.Lock()
	defer s.lostMu.Unlock()
	if s.lostWhy == nil {
		if errors.Is(err, ErrSessionClosed) {
			err = fmt.Errorf("session %s: %w", s.spec.ID, err)
		}
		s.lostWhy = err
	}
	s.lost.Store(true)
	return s.lostWhy
}

// stopSandbox kills the whole sandbox, on its own deadline.
func (s *procSession) stopSandbox() error {
	kctx, cancel := context.WithTimeout(context.Background(), removeTimeout)
	defer cancel()
	return s.p.Kill(kctx)
}

// expire ends a session whose life is spent: its sandbox is stopped.
func (s *procSession) expire() error {
	err := s.stopSandbox()
	return s.lose(fmt.Errorf("session %s: %w after %s (%v)", s.spec.ID, ErrSessionExpired, s.spec.Timeout, orNone(err)))
}

// overDisk ends a session whose work tree grew past the disk bound.
func (s *procSession) overDisk() error {
	err := s.stopSandbox()
	return s.lose(fmt.Errorf("session %s: %w: disk limit: its work tree grew by more than %d MiB (sandbox.disk_mb); the sandbox was stopped (%v)",
		s.spec.ID, ErrSessionKilled, s.diskMB, orNone(err)))
}

func orNone(err error) string {
	if err == nil {
		return "stopped"
	}
	return err.Error()
}

// alive checks that the sandbox still starts a process.
func (s *procSession) alive() error {
	ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
	defer cancel()
	code, err := s.p.Exec(ctx, []string{"/bin/sh", "-c", ":"}, s.spec.User, io.Discard)
	if err == nil && code != 0 {
		err = fmt.Errorf("a process of the sandbox exited %d", code)
	}
	return err
}

// SessionDiskAfter is how long a session's command runs before its work
// tree is measured while it runs (then every DiskEvery). Shorter commands
// are measured as they return, once commands have run DiskEvery since the
// last measure. A measure while a command runs is a process exec of its
// own: measured at DiskEvery, the 32 sessions of a busy 2-core box, whose
// commands then take seconds, doubled the execs and took 8 s a round
// instead of 3.
var SessionDiskAfter = 10 * time.Second

// watchDisk measures the work tree while a command runs (SessionDiskAfter,
// then every DiskEvery) and, past the bound, closes over and kills the
// command.
func (s *procSession) watchDisk(done <-chan struct{}, over chan<- struct{}, kill func()) {
	first := time.NewTimer(SessionDiskAfter)
	defer first.Stop()
	select {
	case <-done:
		return
	case <-first.C:
	}
	t := time.NewTicker(DiskEvery)
	defer t.Stop()
	for {
		if kb, ok := diskUsage(s.p, s.spec); ok && kb-s.diskBase > int64(s.diskMB)<<10 {
			close(over)
			kill()
			return
		}
		select {
		case <-done:
			return
		case <-t.C:
		}
	}
}

// Diff implements Session: the change as swetui computes it (never a
// patch the agent prints): every file of the work tree, new ones included,
// taken through a git directory of swetui's own in /tmp that borrows the
// session's objects (alternates) and reads nothing else of the agent's
// git: not its config (filters, fsmonitor, hooks, external diffs), and no
// attribute of its tree that converts content (text, eol, ident, filter,
// working-tree-encoding, all unset in the git directory's own
// info/attributes, which overrides .gitattributes). It is graded in a
// fresh sandbox, so what the agent did to its git can only spoil its own
// patch, never rewrite it.
func (s *procSession) Diff(ctx context.Context, commit string, maxBytes int) (string, error) {
	res, err := s.Exec(ctx, fmt.Sprintf(diffScript, shq(commit)), ExecOptions{Timeout: 2 * time.Minute, MaxOutput: maxBytes + 1})
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

// diffScript is Diff's, the commit its %s.
const diffScript = `set -e
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
unset GIT_DIR GIT_WORK_TREE GIT_INDEX_FILE GIT_OBJECT_DIRECTORY GIT_ALTERNATE_OBJECT_DIRECTORIES
c=$(git -c core.fsmonitor=false -c core.hooksPath=/dev/null rev-parse --verify -q %s^{commit})
o=$PWD/.git/objects
[ -d "$o" ] || { echo "no git objects at $o" >&2; exit 1; }
g=$(mktemp -d /tmp/.swetui-diff-XXXXXX)
trap 'rm -rf "$g"' EXIT
git init -q --template= "$g/w"
echo "$o" > "$g/w/.git/objects/info/alternates"
mkdir -p "$g/w/.git/info"
printf '* -text !eol -ident -filter -working-tree-encoding !diff\n' > "$g/w/.git/info/attributes"
export GIT_DIR="$g/w/.git" GIT_WORK_TREE="$PWD" GIT_INDEX_FILE="$g/index" HOME="$g"
git add -A . >/dev/null 2>&1
git diff --cached --no-ext-diff --no-textconv --no-color --binary "$c"`

// Close implements Session: the sandbox goes with its processes and
// volumes, on its own deadline, so a cancelled caller still cleans up.
// A command running then is cut short at once (ErrSessionClosed).
func (s *procSession) Close() error {
	s.lose(ErrSessionClosed)
	s.close()
	return removeSandbox(s.b, s.id)
}
