package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"
)

// What runs around each command of a session: the wrapper and its
// trailer, and the walk that kills what a command left.

// CommandProcs are the Procs of a session's sandbox: ExecCommand runs a
// session's command (cmd, its wrapper) as user with its stdout to out and
// its stderr to t (the wrapper's last word, written once the command is
// done), and returns once the wrapper has exited, with what it wrote until
// then, whatever it left running (a Pod's exec stream stays open while a
// job holds it: t says when the wrapper is done). A stream cut may still
// write to out for a moment after it returns: the session drops those
// writes.
type CommandProcs interface {
	ExecCommand(ctx context.Context, cmd []string, user string, out io.Writer, t *Trailer) (int, error)
}

// A Trailer takes the line a session's command wrapper writes on its
// stderr once the command is done: its exit status and what the work tree
// holds.
type Trailer struct {
	mu   sync.Mutex
	buf  []byte
	done chan struct{}
	once sync.Once
}

// NewTrailer is an empty Trailer.
func NewTrailer() *Trailer { return &Trailer{done: make(chan struct{})} }

func (t *Trailer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.buf) < 256 {
		t.buf = append(t.buf, p...)
	}
	if bytes.IndexByte(t.buf, '\n') >= 0 {
		t.once.Do(func() { close(t.done) })
	}
	return len(p), nil
}

// Done is closed once the line is written.
func (t *Trailer) Done() <-chan struct{} { return t.done }

// CPU is the sandbox's CPU time the line says, if it says it.
func (t *Trailer) CPU() (time.Duration, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	line, _, found := bytes.Cut(t.buf, []byte("\n"))
	f := strings.Fields(string(line))
	if !found || len(f) < 3 {
		return 0, false
	}
	us, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil || us < 0 {
		return 0, false
	}
	return time.Duration(us) * time.Microsecond, true
}

// Status is the command's exit status and the work tree's KiB (-1 when
// not measured), once the line is written.
func (t *Trailer) Status() (code int, kb int64, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	line, _, found := bytes.Cut(t.buf, []byte("\n"))
	f := strings.Fields(string(line))
	if !found || len(f) < 1 {
		return 0, 0, false
	}
	code, err := strconv.Atoi(f[0])
	if err != nil {
		return 0, 0, false
	}
	kb = -1
	if len(f) > 1 {
		if n, err := strconv.ParseInt(f[1], 10, 64); err == nil {
			kb = n
		}
	}
	return code, kb, true
}

// commandWrapper runs a session's command line ($1) in a subshell of its
// own (a fork: a second shell's exec cost 2 ms a command on a 2-core box;
// there $$ is the wrapper's pid) with stdin closed and SessionEnv, its stdout and stderr together on
// stdout; then, unless $3 is 1 (background jobs allowed), kills every
// process the command left (killScript, sparing the sandbox's own process
// $2, PID 1 and itself); then writes on stderr, which nothing the command
// started holds, its status, the KiB the writable folders ($5...) hold
// when $4 is 1 (-1 otherwise) and the sandbox's CPU time in µs (its
// cgroup's; -1 where it cannot be read).
var commandWrapper = `export ` + strings.Join(SessionEnv, " ") + `
swetui_cmd=$1
(set --; eval "unset swetui_cmd
$swetui_cmd") </dev/null 2>&1
s=$?
exec 3>&2 2>/dev/null
killall_() {
` + strings.ReplaceAll(strings.ReplaceAll(killScript, "exit ", "return "), `"${2:-/proc}"`, "/proc") + `
}
[ "$3" = 1 ] || killall_ "$2"
m=$4
shift 4
d=-1
[ "$m" = 1 ] && for x in $(du -skxc -- "$@" 2>/dev/null); do [ "$x" = total ] && break; d=$x; done
u=-1
if read -r l < /sys/fs/cgroup/cpu.stat 2>/dev/null; then u=${l#usage_usec }
elif read -r l < /sys/fs/cgroup/cpuacct/cpuacct.usage 2>/dev/null; then u=$((l/1000))
fi
echo "$s $d $u" >&3
exit $s`

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
// reaped it yet. A process it may not signal (another user's) is passed
// over before its state is read. Only shell builtins, so it forks nothing
// itself. Its rounds are bounded high (20000, seconds of work): the time
// bound is the caller's (killBound), since a process killed on a loaded
// node can take longer to leave than 200 tight rounds, which lost a Pod's
// session once in CI.
const killScript = `round=0
freeze=; [ "${2:-/proc}" = /proc ] && freeze=1
while [ $round -lt 20000 ]; do
  round=$((round+1))
  [ -n "$freeze" ] && kill -STOP -1 2>/dev/null
  n=0
  for sig in STOP KILL; do
    for d in "${2:-/proc}"/[0-9]*; do
      p=${d##*/}
      case $p in 1|"$1"|$$) continue ;; esac
      kill -0 "$p" 2>/dev/null || continue
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
func (s *procSession) killAll(ctx context.Context, bound time.Duration) error {
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
	timer := time.NewTimer(max(bound, 0))
	defer timer.Stop()
	var why string
	select {
	case r := <-done:
		if r.err == nil && r.code == 0 {
			return nil
		}
		why = fmt.Sprintf("exit %d, %q: %v", r.code, r.out, r.err)
	case <-timer.C:
		why = fmt.Sprintf("still running after %s", killBound)
	}
	kctx, cancel := context.WithTimeout(ctx, removeTimeout)
	defer cancel()
	if err := s.p.Kill(kctx); err != nil {
		return fmt.Errorf("%w: the command's processes could not be killed (%s), nor the sandbox: %w", ErrSessionLost, why, err)
	}
	return fmt.Errorf("%w: the command's processes could not be killed (%s): the sandbox was", ErrSessionKilled, why)
}
