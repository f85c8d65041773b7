package sandbox

import (
	"context"
	"errors"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// scriptedProcs are a session's Procs without a sandbox: the sandbox's
// own process is 42, the kill script ends the command once it exists
// (started: the command's process has begun), and the command is run.
type scriptedProcs struct {
	mu      sync.Mutex
	killed  chan struct{} // closed by a kill that finds the command's process
	started atomic.Bool
	kills   atomic.Int32
	sandbox atomic.Int32 // Kill calls
	// run is the command: it may wait on killed.
	run func(p *scriptedProcs, ctx context.Context, out io.Writer) int
}

func newScripted(run func(p *scriptedProcs, ctx context.Context, out io.Writer) int) *scriptedProcs {
	return &scriptedProcs{killed: make(chan struct{}), run: run}
}

func (p *scriptedProcs) Exec(ctx context.Context, cmd []string, user string, out io.Writer) (int, error) {
	script := cmd[len(cmd)-1]
	if len(cmd) > 2 {
		script = cmd[2]
	}
	switch script {
	case ownProcessScript:
		io.WriteString(out, "42\n")
		return 0, nil
	case killScript:
		p.kills.Add(1)
		if p.started.Load() {
			p.mu.Lock()
			select {
			case <-p.killed:
			default:
				close(p.killed)
			}
			p.mu.Unlock()
		}
		return 0, nil
	}
	return 0, nil
}

func (p *scriptedProcs) Kill(ctx context.Context) error {
	p.sandbox.Add(1)
	p.mu.Lock()
	select {
	case <-p.killed:
	default:
		close(p.killed)
	}
	p.mu.Unlock()
	return nil
}

func (p *scriptedProcs) ExecCommand(ctx context.Context, cmd []string, user string, out io.Writer, t *Trailer) (int, error) {
	code := p.run(p, ctx, out)
	if code >= 0 {
		io.WriteString(t, strconv.Itoa(code)+" -1\n")
	}
	return code, nil
}

type nopBackend struct{ Backend }

func (nopBackend) Name() string                                { return "fake" }
func (nopBackend) Remove(ctx context.Context, id string) error { return nil }

func scriptedSession(t *testing.T, p *scriptedProcs, life time.Duration) Session {
	t.Helper()
	s, err := NewSession(context.Background(), nopBackend{}, "sb", Spec{ID: "s", Timeout: life}, Limits{}, p)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A command that ends with its own code as its timeout's kill lands is
// still the timeout's: exit 137, never the command's code beside
// timed_out.
func TestTimedOutNeverCarriesTheCommandsCode(t *testing.T) {
	p := newScripted(func(p *scriptedProcs, ctx context.Context, out io.Writer) int {
		p.started.Store(true)
		<-p.killed
		return 7 // its own code, written as the kill came
	})
	res, err := scriptedSession(t, p, time.Hour).Exec(context.Background(), "x", ExecOptions{Timeout: time.Second})
	if err != nil || !res.TimedOut || res.ExitCode != killedStatus {
		t.Errorf("timed out %v exit %d (%v), want timed out with 137", res.TimedOut, res.ExitCode, err)
	}
}

// A timeout under the floor is raised to it: 1 ns, 0 and a negative one
// give the command half a second, not a kill at once.
func TestTimeoutFloor(t *testing.T) {
	for _, d := range []time.Duration{1, 0, -time.Hour} {
		p := newScripted(func(p *scriptedProcs, ctx context.Context, out io.Writer) int {
			time.Sleep(200 * time.Millisecond)
			return 0
		})
		res, err := scriptedSession(t, p, time.Hour).Exec(context.Background(), "x", ExecOptions{Timeout: d})
		if err != nil || res.TimedOut || p.kills.Load() != 0 {
			t.Errorf("timeout %s: a 0.2 s command timed out %v (%d kills, %v)", d, res.TimedOut, p.kills.Load(), err)
		}
	}
}

// A kill that ran before the command's process existed runs again once it
// does: a client gone at once (its context cancelled as the command is
// sent) still has its command killed within a second.
func TestKillSticks(t *testing.T) {
	p := newScripted(func(p *scriptedProcs, ctx context.Context, out io.Writer) int {
		time.Sleep(300 * time.Millisecond) // the exec is still being made when the kill runs
		p.started.Store(true)
		select {
		case <-p.killed:
			return 137
		case <-time.After(20 * time.Second):
			return 0
		}
	})
	s := scriptedSession(t, p, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(10*time.Millisecond, cancel)
	start := time.Now()
	s.Exec(ctx, "sleep 20", ExecOptions{Timeout: time.Minute})
	if el := time.Since(start); el > 1500*time.Millisecond {
		t.Errorf("the command of a client gone at once ran %s", el)
	}
	if p.kills.Load() < 2 {
		t.Errorf("%d kills, want it run again once the command existed", p.kills.Load())
	}
}

// A command that outlives its kill past killBound has its sandbox killed,
// and the session is lost as the agent's doing.
func TestKillBoundKillsTheSandbox(t *testing.T) {
	old := SetKillBoundForTest(time.Second)
	defer SetKillBoundForTest(old)
	p := newScripted(func(p *scriptedProcs, ctx context.Context, out io.Writer) int {
		// The kill script finds nothing to kill; only the sandbox's end
		// ends it.
		for p.sandbox.Load() == 0 {
			time.Sleep(10 * time.Millisecond)
		}
		return -1
	})
	start := time.Now()
	_, err := scriptedSession(t, p, time.Hour).Exec(context.Background(), "x", ExecOptions{Timeout: time.Second})
	if !errors.Is(err, ErrSessionKilled) || p.sandbox.Load() == 0 {
		t.Errorf("%v (%d sandbox kills), want the sandbox killed", err, p.sandbox.Load())
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("returned after %s", el)
	}
}

// A session's life is its spec's Timeout: a command running at its end is
// killed then and the session expires, with its own error.
func TestSessionLifeEnds(t *testing.T) {
	p := newScripted(func(p *scriptedProcs, ctx context.Context, out io.Writer) int {
		p.started.Store(true)
		<-p.killed
		return 137
	})
	s := scriptedSession(t, p, 1500*time.Millisecond)
	start := time.Now()
	_, err := s.Exec(context.Background(), "sleep 60", ExecOptions{Timeout: time.Minute})
	if !errors.Is(err, ErrSessionExpired) || !errors.Is(err, ErrSessionLost) {
		t.Errorf("%v, want the session expired", err)
	}
	if el := time.Since(start); el > 4*time.Second {
		t.Errorf("a 1.5 s life ended after %s", el)
	}
	if _, err := s.Exec(context.Background(), "true", ExecOptions{Timeout: time.Second}); !errors.Is(err, ErrSessionExpired) {
		t.Errorf("after its life: %v", err)
	}
}

// Close cuts a running command short at once.
func TestCloseCutsTheCommand(t *testing.T) {
	p := newScripted(func(p *scriptedProcs, ctx context.Context, out io.Writer) int {
		p.started.Store(true)
		<-ctx.Done()
		return -1
	})
	s := scriptedSession(t, p, time.Hour)
	time.AfterFunc(200*time.Millisecond, func() { s.Close() })
	start := time.Now()
	_, err := s.Exec(context.Background(), "sleep 60", ExecOptions{Timeout: time.Minute})
	if !errors.Is(err, ErrSessionClosed) {
		t.Errorf("%v, want closed", err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("returned %s after", el)
	}
}

// countingProcs answers the session's opening exec with out and counts the
// execs; a bare du gets 99 KiB.
type countingProcs struct {
	scriptedProcs
	out   string
	execs []string
}

func (p *countingProcs) Exec(ctx context.Context, cmd []string, user string, out io.Writer) (int, error) {
	p.execs = append(p.execs, cmd[0])
	if cmd[0] == "du" {
		io.WriteString(out, "99\t/swetui\n99\ttotal\n")
		return 0, nil
	}
	io.WriteString(out, p.out)
	return 0, nil
}

// With a disk bound, opening a session finds the sandbox's own process and
// measures the work tree in one exec; a measure that did not come through
// is taken again on its own.
func TestSessionOpensInOneExec(t *testing.T) {
	for _, tt := range []struct {
		name, out string
		execs     int
		base      int64
	}{
		{"one exec", "42\n" + diskBaseMark + "\n1234\t/swetui\n1234\ttotal\n", 1, 1234},
		{"du said nothing", "42\n" + diskBaseMark + "\n", 2, 99},
		{"no mark", "42\n", 2, 99},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := &countingProcs{out: tt.out}
			s, err := NewSession(context.Background(), nopBackend{}, "sb", Spec{ID: "s", Timeout: time.Hour}, Limits{DiskMB: 10}, p)
			if err != nil {
				t.Fatal(err)
			}
			ps := s.(*procSession)
			if len(p.execs) != tt.execs || ps.diskBase != tt.base || ps.keep != "42" {
				t.Errorf("execs %v, base %d, own process %q; want %d execs, base %d, 42", p.execs, ps.diskBase, ps.keep, tt.execs, tt.base)
			}
		})
	}
}
