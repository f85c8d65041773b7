package sandbox_test

// Sessions on every kind of host, each case once: the local Docker Engine
// and the test cluster of .ci/k8s (make cluster-up). A host that is not
// there skips its half (the cluster's fails under CI=true).

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/internal/kubetest"
	"github.com/swetui/swetui/sandbox"
	"github.com/swetui/swetui/sandbox/kube"
)

// sessionHost is one kind of host the session tests run on.
type sessionHost struct {
	name string
	user string // the test image's user swetui (uid 1000) as the host takes it
	net  string // ls /sys/class/net inside: the test cluster's CNI gives a Pod a dead-end eth0
	// pids says whether the host enforces Limits.PidsLimit (a cluster's is
	// the kubelet's podPidsLimit, which the test cluster does not set).
	pids bool
	// backend opens the host alone with limits l, for this process's run.
	backend func(t testing.TB, l sandbox.Limits) sessionBackend
	// pool is what a pool needs to open the host.
	pool func(t testing.TB) sandbox.Options
	// image is the test image (repository at /testbed, committed), where
	// the host pulls it from.
	image func(t testing.TB) string
	// state is the sandbox's labels (with a Pod's annotations: owner and
	// deadline) and whether it runs; ok is false once it is gone.
	state func(t testing.TB, id string) (labels map[string]string, running, ok bool)
	// reapStale is the next start's reap: the sandboxes of dead owners.
	reapStale func(t testing.TB) (int, error)
	// kill kills a sandbox from outside.
	kill func(t testing.TB, id string)
}

// sessionBackend is a host's backend as the tests open it.
type sessionBackend interface {
	sandbox.Backend
	sandbox.SessionBackend
}

var sessionRunID = "session-test-" + sandbox.NewNonce()[:8]

func sessionLimits() sandbox.Limits {
	return sandbox.Limits{MemoryMB: 512, CPUs: 1, PidsLimit: 128, LogCap: 256 << 10}
}

var dockerHost = sessionHost{
	name: "docker", user: "swetui", net: "lo\n", pids: true,
	backend: func(t testing.TB, l sandbox.Limits) sessionBackend {
		return &sandbox.Runner{Docker: sandbox.DockerForTest(t), RunID: sessionRunID, Limits: l}
	},
	pool:  func(t testing.TB) sandbox.Options { sandbox.DockerForTest(t); return sandbox.Options{} },
	image: sandbox.PyImageForTest,
	state: func(t testing.TB, id string) (map[string]string, bool, bool) {
		c, err := sandbox.DockerForTest(t).ContainerInspect(context.Background(), id)
		if cerrdefs.IsNotFound(err) {
			return nil, false, false
		}
		if err != nil {
			t.Fatal(err)
		}
		return c.Config.Labels, c.State.Running, true
	},
	reapStale: func(t testing.TB) (int, error) {
		return sandbox.Reap(context.Background(), sandbox.DockerForTest(t))
	},
	kill: func(t testing.TB, id string) {
		if err := sandbox.DockerForTest(t).ContainerKill(context.Background(), id, "KILL"); err != nil {
			t.Error(err)
		}
	},
}

var k8sHost = sessionHost{
	name: "k8s", user: "1000", net: "eth0\nlo\n", pids: false,
	backend: openCluster,
	pool: func(t testing.TB) sandbox.Options {
		c := testCluster(t)
		return sandbox.Options{Hosts: []string{c.Host()}, Kubernetes: clusterConfig(c)}
	},
	image: func(t testing.TB) string {
		testCluster(t)
		return sandbox.PyImageForTest(t)
	},
	state: func(t testing.TB, id string) (map[string]string, bool, bool) {
		c := testCluster(t)
		pod, err := podClient(t).CoreV1().Pods(c.Namespace).Get(context.Background(), id, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, false, false
		}
		if err != nil {
			t.Fatal(err)
		}
		l := map[string]string{}
		for k, v := range pod.Labels {
			l[k] = v
		}
		for k, v := range pod.Annotations {
			l[k] = v
		}
		return l, pod.Status.Phase == "Running" && pod.DeletionTimestamp == nil, true
	},
	reapStale: func(t testing.TB) (int, error) {
		return openCluster(t, sessionLimits()).Reap(context.Background(), sandbox.Reaping{})
	},
	kill: func(t testing.TB, id string) {
		zero := int64(0)
		err := podClient(t).CoreV1().Pods(testCluster(t).Namespace).Delete(context.Background(), id, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		if err != nil {
			t.Error(err)
		}
	},
}

var sessionHosts = []sessionHost{dockerHost, k8sHost}

// forEachHost runs f on each kind of host, as subtests named after it.
func forEachHost(t *testing.T, f func(t *testing.T, h sessionHost)) {
	for _, h := range sessionHosts {
		t.Run(h.name, func(t *testing.T) {
			if testing.Short() {
				t.Skip("runs sandboxes")
			}
			f(t, h)
		})
	}
}

var (
	pushOnce sync.Once
	pushed   bool
)

// testCluster is the test cluster with the test image in its registry.
func testCluster(t testing.TB) kubetest.Cluster {
	t.Helper()
	c := kubetest.Up(t)
	pushOnce.Do(func() {
		c.Push(t, sandbox.PyImageForTest(t))
		pushed = true
	})
	if !pushed {
		t.Fatal("the test image could not be pushed to the cluster's registry")
	}
	return c
}

// podClient reads the cluster as the runner identity (KUBECONFIG, which
// kubetest.Up set).
func podClient(t testing.TB) kubernetes.Interface {
	t.Helper()
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(),
		&clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// openCluster opens the test cluster's namespace with limits l, for this
// process's run.
func openCluster(t testing.TB, l sandbox.Limits) sessionBackend {
	c := testCluster(t)
	b, err := kube.Open(context.Background(), c.Host(), sandbox.BackendConfig{RunID: sessionRunID, Limits: l, Kubernetes: clusterConfig(c)})
	if err != nil {
		t.Fatal(err)
	}
	return b.(*kube.Backend)
}

func clusterConfig(c kubetest.Cluster) config.Kubernetes {
	return config.Kubernetes{Registry: c.Registry, ImagePullPolicy: "IfNotPresent"}
}

func sessionSpec(t testing.TB, h sessionHost) sandbox.Spec {
	return sandbox.Spec{ID: "session-" + sandbox.NewNonce()[:8], InstanceID: "toy__calc-1", Image: h.image(t), Workdir: "/testbed",
		User: h.user, Timeout: 10 * time.Minute}
}

// openSession opens a session on the test image's repository as the
// non-root user, on h with limits l, closed when the test ends (and
// checked gone).
func openSession(t testing.TB, h sessionHost, l sandbox.Limits) (sandbox.Session, sessionBackend) {
	t.Helper()
	return openSessionSpec(t, h, l, sessionSpec(t, h))
}

// openSessionSpec is openSession of spec.
func openSessionSpec(t testing.TB, h sessionHost, l sandbox.Limits, spec sandbox.Spec) (sandbox.Session, sessionBackend) {
	t.Helper()
	b := h.backend(t, l)
	s, err := b.OpenSession(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		assertGone(t, h, s.ID())
	})
	return s, b
}

func assertGone(t testing.TB, h sessionHost, id string) {
	t.Helper()
	if _, _, ok := h.state(t, id); ok {
		t.Errorf("sandbox %s still there after its close", id)
	}
}

func sessionRun(t *testing.T, s sandbox.Session, cmd string, o sandbox.ExecOptions) sandbox.ExecResult {
	t.Helper()
	if o.Timeout == 0 {
		o.Timeout = 30 * time.Second
	}
	res, err := s.Exec(context.Background(), cmd, o)
	if err != nil {
		t.Fatalf("%s: %v", cmd, err)
	}
	return res
}

// processes lists the command lines of every process in the session but
// the listing's own: its subshell ($me: there $$ is the wrapper's pid), the
// wrapper and the wrapper's parent.
func processes(t *testing.T, s sandbox.Session) []string {
	t.Helper()
	out := sessionRun(t, s, `me=$(exec /bin/sh -c 'echo $PPID'); for d in /proc/[0-9]*; do case ${d#/proc/} in $$|$PPID|$me) continue ;; esac; tr '\0' ' ' < $d/cmdline 2>/dev/null; echo; done`, sandbox.ExecOptions{}).Output
	var ps []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			ps = append(ps, l)
		}
	}
	return ps
}

// A session keeps its state from command to command, in its work tree, as
// its user, confined as an evaluation is.
func TestSessionExec(t *testing.T) {
	forEachHost(t, func(t *testing.T, h sessionHost) {
		s, _ := openSession(t, h, sessionLimits())
		for _, tt := range []struct {
			cmd  string
			code int
			out  string
		}{
			{"pwd; id -un", 0, "/testbed\nswetui\n"},
			{"echo first > note.txt && echo written", 0, "written\n"},
			{"cat note.txt; exit 3", 3, "first\n"},
			{"echo to stderr >&2", 0, "to stderr\n"},
			{"ls /sys/class/net; grep -c . /proc/net/route", 0, h.net + "1\n"},
			{"touch /usr/x 2>&1 | sed 's/^touch: //'", 0, "cannot touch '/usr/x': Read-only file system\n"},
			{"no-such-command 2>/dev/null", 127, ""},
		} {
			res := sessionRun(t, s, tt.cmd, sandbox.ExecOptions{})
			if res.ExitCode != tt.code || res.Output != tt.out || res.TimedOut || res.Bytes != int64(len(tt.out)) {
				t.Errorf("%s: exit %d %q (%d bytes, timed out %v), want %d %q", tt.cmd, res.ExitCode, res.Output, res.Bytes, res.TimedOut, tt.code, tt.out)
			}
		}
	})
}

// A command past its time is killed with everything it started: a
// background job, one in a subshell, one in a new session (setsid); the
// session goes on.
func TestSessionTimeoutKillsEveryProcess(t *testing.T) {
	forEachHost(t, func(t *testing.T, h sessionHost) {
		s, _ := openSession(t, h, sessionLimits())
		before := processes(t, s)
		start := time.Now()
		res := sessionRun(t, s, "sleep 301 & (sleep 302 &); setsid sleep 303 & echo started; sleep 304", sandbox.ExecOptions{Timeout: time.Second})
		if !res.TimedOut || res.ExitCode != sandbox.KilledStatus || res.Output != "started\n" {
			t.Errorf("timed out %v, exit %d, %q: want killed at its timeout", res.TimedOut, res.ExitCode, res.Output)
		}
		if el := time.Since(start); el > 8*time.Second {
			t.Errorf("a 1 s timeout returned after %s", el)
		}
		after := processes(t, s)
		for _, p := range after {
			if strings.HasPrefix(p, "sleep 30") {
				t.Errorf("left running after the timeout: %q (all: %q)", p, after)
			}
		}
		if len(after) != len(before) {
			t.Errorf("processes before %q, after %q", before, after)
		}
		if res := sessionRun(t, s, "echo still here", sandbox.ExecOptions{}); res.Output != "still here\n" {
			t.Errorf("after the timeout: %q", res.Output)
		}
	})
}

// A command that leaves a job running returns once its shell exits, not at
// its timeout, though the job holds its output (the kubelet keeps a Pod's
// exec stream open while it does); the job is killed as it returns, unless
// background jobs are allowed (agent.background): then it goes on.
func TestSessionBackgroundJob(t *testing.T) {
	forEachHost(t, func(t *testing.T, h sessionHost) {
		for _, bg := range []bool{false, true} {
			spec := sessionSpec(t, h)
			spec.Background = bg
			s, _ := openSessionSpec(t, h, sessionLimits(), spec)
			start := time.Now()
			res := sessionRun(t, s, "sleep 305 & echo started; exit 4", sandbox.ExecOptions{Timeout: 30 * time.Second})
			if res.TimedOut || res.ExitCode != 4 || res.Output != "started\n" {
				t.Errorf("background %v: timed out %v, exit %d, %q: want exit 4 once the shell is gone", bg, res.TimedOut, res.ExitCode, res.Output)
			}
			if el := time.Since(start); el > 15*time.Second {
				t.Errorf("background %v: a command that left a job returned after %s, its timeout 30 s", bg, el)
			}
			if ps := processes(t, s); strings.Contains(strings.Join(ps, "\n"), "sleep 305") != bg {
				t.Errorf("background %v: the processes after the command: %q", bg, ps)
			}
		}
	})
}

// With background jobs allowed, a session's CPU time is bounded: past it,
// as a command returns, the sandbox is stopped and the session says why.
func TestSessionBackgroundCPUBound(t *testing.T) {
	forEachHost(t, func(t *testing.T, h sessionHost) {
		spec := sessionSpec(t, h)
		spec.Background, spec.CPUTime = true, time.Second
		s, _ := openSessionSpec(t, h, sessionLimits(), spec)
		sessionRun(t, s, "(while :; do :; done) & echo spinning", sandbox.ExecOptions{})
		// The spinner's CPU time grows as fast as the box lets it: look
		// every 2 s, for a minute at most.
		var err error
		for start := time.Now(); err == nil && time.Since(start) < time.Minute; {
			time.Sleep(2 * time.Second)
			_, err = s.Exec(context.Background(), "echo next", sandbox.ExecOptions{Timeout: 30 * time.Second})
		}
		if !errors.Is(err, sandbox.ErrSessionKilled) || !strings.Contains(err.Error(), "cpu limit") {
			t.Errorf("a background spinner past a 1 s CPU bound: %v", err)
		}
	})
}

// Nothing runs between commands unasked: what a command leaves (a job, a
// job in a new session, a fork bomb in the background) is killed as it
// returns; the zombies it leaves are reaped by the sandbox's first
// process. Every command has its stdin closed (a bare cat returns at once)
// and a non-interactive environment.
func TestSessionNothingRunsBetweenCommands(t *testing.T) {
	forEachHost(t, func(t *testing.T, h sessionHost) {
		s, _ := openSession(t, h, sessionLimits())
		before := processes(t, s)
		res := sessionRun(t, s, "sleep 306 & setsid sleep 307 & (while :; do :; done) & sh -c 'for i in 1 2 3 4 5 6 7 8; do true & done; exec sleep 308' & sleep 0.5; echo left", sandbox.ExecOptions{Timeout: 30 * time.Second})
		if res.ExitCode != 0 || res.Output != "left\n" {
			t.Errorf("exit %d %q", res.ExitCode, res.Output)
		}
		after := processes(t, s)
		if len(after) != len(before) {
			t.Errorf("processes before %q, after %q", before, after)
		}
		zombies := sessionRun(t, s, `n=0; for d in /proc/[0-9]*; do read -r st < $d/stat 2>/dev/null || continue; st=${st##*) }; case ${st%% *} in Z) n=$((n+1)) ;; esac; done; echo $n`, sandbox.ExecOptions{})
		if strings.TrimSpace(zombies.Output) != "0" {
			t.Errorf("%s zombies left", strings.TrimSpace(zombies.Output))
		}
		start := time.Now()
		res = sessionRun(t, s, "cat; echo cat returned", sandbox.ExecOptions{Timeout: 20 * time.Second})
		if res.TimedOut || res.Output != "cat returned\n" || time.Since(start) > 10*time.Second {
			t.Errorf("a bare cat: timed out %v %q after %s", res.TimedOut, res.Output, time.Since(start))
		}
		res = sessionRun(t, s, `echo "$PAGER $GIT_PAGER $TERM $GIT_TERMINAL_PROMPT $DEBIAN_FRONTEND"`, sandbox.ExecOptions{})
		if res.Output != "cat cat dumb 0 noninteractive\n" {
			t.Errorf("the environment: %q", res.Output)
		}
	})
}

// Timeouts bind: one under the floor gives the command half a second; one
// past it kills the command with exit 137, never its own code; a client
// gone at once (its context cancelled as the command is sent) has its
// command killed within a second, whenever the kill lands.
func TestSessionTimeoutsBind(t *testing.T) {
	forEachHost(t, func(t *testing.T, h sessionHost) {
		s, _ := openSession(t, h, sessionLimits())
		res := sessionRun(t, s, "echo quick", sandbox.ExecOptions{Timeout: time.Nanosecond})
		if res.TimedOut || res.Output != "quick\n" {
			t.Errorf("a 1 ns timeout: timed out %v %q, want the floor's half second", res.TimedOut, res.Output)
		}
		res = sessionRun(t, s, "sleep 5; exit 3", sandbox.ExecOptions{Timeout: time.Second})
		if !res.TimedOut || res.ExitCode != sandbox.KilledStatus {
			t.Errorf("timed out %v exit %d, want 137", res.TimedOut, res.ExitCode)
		}
		for _, after := range []time.Duration{0, time.Millisecond, 20 * time.Millisecond, 100 * time.Millisecond} {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(after, cancel)
			start := time.Now()
			s.Exec(ctx, "sleep 4; echo ran > /tmp/ran", sandbox.ExecOptions{Timeout: time.Minute})
			if el := time.Since(start); el > 2*time.Second {
				t.Errorf("cancelled after %s: the command ran on for %s", after, el)
			}
			res := sessionRun(t, s, "sleep 4.5; cat /tmp/ran 2>/dev/null || echo not run", sandbox.ExecOptions{})
			if res.Output != "not run\n" {
				t.Errorf("cancelled after %s: the command ran to its end: %q", after, res.Output)
			}
		}
	})
}

// A dead sandbox is named at once: a command whose sandbox is killed from
// outside gets ErrSessionLost on that call, not an exit code; kill -9 -1
// from inside cannot kill the sandbox's own process (another user's), so
// the session goes on.
func TestSessionDeadSandboxNamed(t *testing.T) {
	forEachHost(t, func(t *testing.T, h sessionHost) {
		s, _ := openSession(t, h, sessionLimits())
		res, err := s.Exec(context.Background(), "sleep 60 & kill -9 -1; echo after", sandbox.ExecOptions{Timeout: 30 * time.Second})
		if err != nil {
			t.Fatalf("kill -9 -1 from inside lost the session: %v (exit %d %q)", err, res.ExitCode, res.Output)
		}
		if res := sessionRun(t, s, "echo still here", sandbox.ExecOptions{}); res.Output != "still here\n" {
			t.Errorf("after kill -9 -1: %q", res.Output)
		}
		time.AfterFunc(time.Second, func() { h.kill(t, s.ID()) })
		start := time.Now()
		res, err = s.Exec(context.Background(), "sleep 60", sandbox.ExecOptions{Timeout: 2 * time.Minute})
		if !errors.Is(err, sandbox.ErrSessionLost) || errors.Is(err, sandbox.ErrSessionKilled) {
			t.Errorf("a sandbox killed from outside: exit %d, %v; want lost, not the agent's doing", res.ExitCode, err)
		}
		if el := time.Since(start); el > 30*time.Second {
			t.Errorf("answered after %s", el)
		}
	})
}

// The work tree is bounded by the disk limit in all, not only file by
// file: past it the sandbox is stopped and the session says why.
func TestSessionDiskInAll(t *testing.T) {
	forEachHost(t, func(t *testing.T, h sessionHost) {
		l := sessionLimits()
		l.DiskMB = 32
		s, _ := openSession(t, h, l)
		res := sessionRun(t, s, "dd if=/dev/zero of=a bs=1M count=20 2>/dev/null; sleep 1; echo a", sandbox.ExecOptions{})
		if res.Output != "a\n" {
			t.Fatalf("20 MiB under a 32 MiB bound: %q", res.Output)
		}
		// Measured once commands have run 2 s (sandbox.DiskEvery) since
		// the last measure, as an evaluation is: by the third file.
		var err error
		for _, f := range []string{"b", "c", "d"} {
			if _, err = s.Exec(context.Background(), "dd if=/dev/zero of="+f+" bs=1M count=20 2>/dev/null; sleep 1", sandbox.ExecOptions{Timeout: 30 * time.Second}); err != nil {
				break
			}
		}
		if !errors.Is(err, sandbox.ErrSessionKilled) || !strings.Contains(err.Error(), "disk limit") || !strings.Contains(err.Error(), "32 MiB") {
			t.Errorf("files of 20 MiB in commands of their own under a 32 MiB bound: %v", err)
		}
		if _, running, _ := h.state(t, s.ID()); running {
			t.Error("the sandbox still runs past its disk bound")
		}
		s2, _ := openSession(t, h, l)
		start := time.Now()
		_, err = s2.Exec(context.Background(), "for f in a b c; do dd if=/dev/zero of=$f bs=1M count=20 2>/dev/null; sleep 2; done; sleep 20", sandbox.ExecOptions{Timeout: time.Minute})
		if !errors.Is(err, sandbox.ErrSessionKilled) || !strings.Contains(err.Error(), "disk limit") {
			t.Errorf("60 MiB in one command under a 32 MiB bound: %v", err)
		}
		if el := time.Since(start); el > 20*time.Second {
			t.Errorf("stopped after %s", el)
		}
	})
}

// A session's life is its spec's Timeout, not twice it and more: a command
// running at its end is killed and the session ends as expired; its
// sandbox's deadline is its life and a minute.
func TestSessionLife(t *testing.T) {
	forEachHost(t, func(t *testing.T, h sessionHost) {
		spec := sessionSpec(t, h)
		spec.Timeout = 20 * time.Second
		s, _ := openSessionSpec(t, h, sessionLimits(), spec)
		l, _, _ := h.state(t, s.ID())
		d, _ := strconv.ParseInt(l[sandbox.LabelDeadline], 10, 64)
		if left := time.Until(time.Unix(d, 0)); left > spec.Timeout+time.Minute+5*time.Second {
			t.Errorf("the sandbox's deadline is %s away, its life %s", left.Round(time.Second), spec.Timeout)
		}
		start := time.Now()
		_, err := s.Exec(context.Background(), "sleep 120", sandbox.ExecOptions{Timeout: 2 * time.Minute})
		if !errors.Is(err, sandbox.ErrSessionExpired) {
			t.Errorf("a command past the session's life: %v", err)
		}
		if el := time.Since(start); el > 25*time.Second {
			t.Errorf("a 20 s life ended after %s", el)
		}
	})
}

// Close ends a session now: a command running is cut short, the sandbox
// removed, without waiting for the command.
func TestSessionCloseDoesNotWait(t *testing.T) {
	forEachHost(t, func(t *testing.T, h sessionHost) {
		b := h.backend(t, sessionLimits())
		s, err := b.OpenSession(context.Background(), sessionSpec(t, h))
		if err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() {
			_, err := s.Exec(context.Background(), "sleep 120", sandbox.ExecOptions{Timeout: 2 * time.Minute})
			errc <- err
		}()
		time.Sleep(time.Second)
		start := time.Now()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-errc:
			if !errors.Is(err, sandbox.ErrSessionClosed) {
				t.Errorf("the running command: %v, want closed", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the running command did not return after the close")
		}
		if el := time.Since(start); el > 20*time.Second {
			t.Errorf("close and the command's end took %s", el)
		}
		assertGone(t, h, s.ID())
	})
}

// When the kill script cannot finish in its bound, the whole sandbox is
// killed and the session lost, at once (here the bound is a nanosecond).
func TestSessionKillBound(t *testing.T) {
	forEachHost(t, func(t *testing.T, h sessionHost) {
		s, _ := openSession(t, h, sessionLimits())
		old := sandbox.SetKillBoundForTest(time.Nanosecond)
		defer sandbox.SetKillBoundForTest(old)
		start := time.Now()
		_, err := s.Exec(context.Background(), "sleep 600", sandbox.ExecOptions{Timeout: time.Second})
		if !errors.Is(err, sandbox.ErrSessionLost) {
			t.Errorf("a kill past its bound: %v, want the session lost", err)
		}
		if el := time.Since(start); el > 45*time.Second {
			t.Errorf("a 1 s timeout returned after %s", el)
		}
		if _, running, _ := h.state(t, s.ID()); running {
			t.Error("the sandbox still runs after its kill")
		}
		if _, err := s.Exec(context.Background(), "true", sandbox.ExecOptions{Timeout: 10 * time.Second}); !errors.Is(err, sandbox.ErrSessionLost) {
			t.Errorf("a lost session ran a command: %v", err)
		}
	})
}

// Output is kept as its head and tail while it streams, however much there
// is; all of it is counted.
func TestSessionOutputCapped(t *testing.T) {
	forEachHost(t, func(t *testing.T, h sessionHost) {
		s, _ := openSession(t, h, sessionLimits())
		res := sessionRun(t, s, "echo BEGIN; head -c 20000000 /dev/zero | tr '\\0' a; echo; echo END", sandbox.ExecOptions{MaxOutput: 1000})
		if res.Bytes != int64(20000000+len("BEGIN\n\nEND\n")) {
			t.Errorf("%d bytes counted", res.Bytes)
		}
		if !strings.HasPrefix(res.Output, "BEGIN\naaa") || !strings.HasSuffix(res.Output, "aaa\nEND\n") || !strings.Contains(res.Output, "bytes not shown") || len(res.Output) > 1100 {
			t.Errorf("kept %d bytes: %.80q ... %.80q", len(res.Output), res.Output, res.Output[max(0, len(res.Output)-80):])
		}
	})
}

// A fork bomb is held by the pids limit and ended by its timeout; the
// session either goes on or is lost, and its sandbox goes at Close. The
// command waits in a loop of builtins (a sleep would need a pid the bomb
// holds, and the shell would end at once, leaving the bomb running). A
// Pod's pids limit is its node's (podPidsLimit): where there is none the
// case skips (held by memory alone, a bomb once took 8000 of the machine's
// pids and minutes to die after its Pod was deleted).
func TestSessionForkBomb(t *testing.T) {
	forEachHost(t, func(t *testing.T, h sessionHost) {
		if !h.pids && !pidsLimited(t, h) {
			t.Skip("the node sets no pids limit (podPidsLimit): a fork bomb would be bounded by the machine's pids alone")
		}
		s, _ := openSession(t, h, sessionLimits())
		start := time.Now()
		res, err := s.Exec(context.Background(), "bomb() { bomb | bomb & }; bomb; while :; do :; done", sandbox.ExecOptions{Timeout: 3 * time.Second})
		t.Logf("fork bomb: exit %d timed out %v after %s, err %v", res.ExitCode, res.TimedOut, time.Since(start).Round(time.Millisecond), err)
		if err != nil && !errors.Is(err, sandbox.ErrSessionLost) {
			t.Fatalf("fork bomb: %v", err)
		}
		if el := time.Since(start); el > 30*time.Second {
			t.Errorf("a 3 s timeout returned after %s", el)
		}
		if err == nil {
			if !res.TimedOut {
				t.Errorf("the bomb's command ended before its timeout: exit %d, %q", res.ExitCode, res.Output)
			}
			if ps := processes(t, s); len(ps) > 3 {
				t.Errorf("%d processes left after the bomb's timeout: %q", len(ps), ps[:min(len(ps), 10)])
			}
		}
	})
}

// pidsProbe starts 300 processes, or fails to where fewer are allowed.
const pidsProbe = "i=0; while [ $i -lt 300 ]; do sleep 60 & i=$((i+1)); done; echo unlimited"

// pidsLimited says whether a sandbox of h holds fewer than 300 processes,
// in a session of its own: a Pod's pids limit is its node's
// (podPidsLimit), which the container's own cgroup does not show.
func pidsLimited(t *testing.T, h sessionHost) bool {
	t.Helper()
	s, err := h.backend(t, sessionLimits()).OpenSession(context.Background(), sessionSpec(t, h))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	}()
	res, err := s.Exec(context.Background(), pidsProbe, sandbox.ExecOptions{Timeout: 30 * time.Second})
	t.Logf("pids probe: exit %d %q %v", res.ExitCode, strings.TrimSpace(res.Output), err)
	return err == nil && !strings.Contains(res.Output, "unlimited")
}

// What the agent writes is bounded by the disk limit.
func TestSessionDiskBound(t *testing.T) {
	forEachHost(t, func(t *testing.T, h sessionHost) {
		l := sessionLimits()
		l.DiskMB = 32
		s, _ := openSession(t, h, l)
		res := sessionRun(t, s, "dd if=/dev/zero of=big bs=1M count=100 2>&1 | tail -n 3; ls -l big | awk '{print $5}'", sandbox.ExecOptions{})
		if !strings.Contains(res.Output, "File too large") && !strings.Contains(res.Output, "File size limit exceeded") || !strings.Contains(res.Output, "33554432") {
			t.Errorf("a 100 MB file under a 32 MB bound: %q", res.Output)
		}
	})
}

// The diff is swetui's: new files included, and whatever the agent makes of
// its git (an external diff, a text conversion, hooks) does not change it.
func TestSessionDiff(t *testing.T) {
	forEachHost(t, func(t *testing.T, h sessionHost) {
		s, _ := openSession(t, h, sessionLimits())
		sessionRun(t, s, `printf '\n\ndef sub(a, b):\n    return a - b\n' >> calc.py
mkdir -p pkg && printf 'x = 1\n' > pkg/new.py
git config diff.external /bin/false
printf '*.py diff=fake\n' > .gitattributes && git config diff.fake.textconv 'echo forged'
mkdir -p .git/hooks && printf '#!/bin/sh\necho hook ran >> /tmp/hook\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit
git config filter.evil.clean 'sed s/sub/FORGED/' && git config filter.evil.smudge cat && printf '*.py filter=evil\n' >> .gitattributes
git config core.fsmonitor 'echo fsmonitor ran >> /tmp/hook; false'
printf 'calc.py ident text eol=crlf working-tree-encoding=UTF-16\n' >> .gitattributes && printf '# $Id: forged $\n' >> calc.py`, sandbox.ExecOptions{})
		diff, err := s.Diff(context.Background(), "HEAD", 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"diff --git a/calc.py b/calc.py", "+def sub(a, b):", "diff --git a/pkg/new.py b/pkg/new.py", "new file mode", "+x = 1", "diff --git a/.gitattributes"} {
			if !strings.Contains(diff, want) {
				t.Errorf("the diff lacks %q:\n%s", want, diff)
			}
		}
		if strings.Contains(diff, "forged\n") || strings.Contains(diff, "FORGED") || !strings.Contains(diff, "+# $Id: forged $") {
			t.Errorf("the agent's text conversion, clean filter or attributes rewrote the diff:\n%s", diff)
		}
		if res := sessionRun(t, s, "cat /tmp/hook 2>/dev/null; true", sandbox.ExecOptions{}); res.Output != "" {
			t.Errorf("the agent's git ran: %q", res.Output)
		}
		if _, err := s.Diff(context.Background(), "HEAD", 10); err == nil || !strings.Contains(err.Error(), "over 10") {
			t.Errorf("a diff over its bound: %v", err)
		}
	})
}

// A session's sandbox carries the pool's labels: a session whose owner is
// gone is stale, and the reaper removes it.
func TestSessionIsReaped(t *testing.T) {
	forEachHost(t, func(t *testing.T, h sessionHost) {
		s, b := openSession(t, h, sessionLimits())
		l, _, _ := h.state(t, s.ID())
		if l[sandbox.LabelManaged] != "true" || l[sandbox.LabelRun] != sessionRunID || l[sandbox.LabelOwner] != sandbox.OwnerID() || l[sandbox.LabelDeadline] == "" {
			t.Fatalf("labels %v", l)
		}
		dead := map[string]string{}
		for k, v := range l {
			dead[k] = v
		}
		host, _ := os.Hostname()
		dead[sandbox.LabelOwner] = host + "/999999999/1" // no such process
		if !sandbox.Stale(dead, true, time.Now()) {
			t.Error("a session whose owner is gone is not stale")
		}
		if sandbox.Stale(l, true, time.Now()) {
			t.Error("a live session is stale")
		}
		n, err := b.Reap(context.Background(), sandbox.Reaping{RunID: sessionRunID, Keep: func(id string) bool { return id != s.ID() }})
		if err != nil || n != 1 {
			t.Errorf("reaped %d (%v), want the session", n, err)
		}
		if _, err := s.Exec(context.Background(), "true", sandbox.ExecOptions{Timeout: 10 * time.Second}); err == nil {
			t.Error("a reaped session still runs commands")
		}
	})
}

// BenchmarkSessionExec is one command's round trip on Docker: the exec
// created, attached, run, its output read and its status taken (the
// cluster's beside it: go test ./sandbox/kube -bench SessionExec).
func BenchmarkSessionExec(b *testing.B) {
	s, _ := openSession(b, dockerHost, sessionLimits())
	ctx := context.Background()
	for b.Loop() {
		res, err := s.Exec(ctx, "echo ok", sandbox.ExecOptions{Timeout: 30 * time.Second})
		if err != nil || res.Output != "ok\n" {
			b.Fatalf("%q %v", res.Output, err)
		}
	}
}

// The pool opens sessions on its hosts with its limits and run id; a session
// left open is removed by the pool's Close.
func TestPoolSessions(t *testing.T) {
	forEachHost(t, func(t *testing.T, h sessionHost) {
		ctx := context.Background()
		o := h.pool(t)
		o.Workers, o.Queue, o.Timeout, o.RunID = 1, 1, time.Minute, sessionRunID+"-pool"
		o.Limits = sandbox.Limits{MemoryMB: 512, CPUs: 1, PidsLimit: 64, LogCap: 256 << 10}
		p, err := sandbox.NewPool(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		closed, err := p.OpenSession(ctx, sessionSpec(t, h))
		if err != nil {
			t.Fatal(err)
		}
		if n := p.State().Sessions; n != 1 {
			t.Errorf("the pool counts %d sessions, want 1", n)
		}
		if l, _, _ := h.state(t, closed.ID()); l[sandbox.LabelRun] != o.RunID {
			t.Errorf("the session's labels %v lack the pool's run", l)
		}
		if h.pids {
			res, err := closed.Exec(ctx, "cat /sys/fs/cgroup/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids/pids.max", sandbox.ExecOptions{Timeout: 10 * time.Second})
			if err != nil || strings.TrimSpace(res.Output) != "64" {
				t.Errorf("the pool's pids limit in the session: %q %v", res.Output, err)
			}
		}
		if err := closed.Close(); err != nil {
			t.Fatal(err)
		}
		assertGone(t, h, closed.ID())
		if n := p.State().Sessions; n != 0 {
			t.Errorf("the pool counts %d sessions after the close, want 0", n)
		}
		open, err := p.OpenSession(ctx, sessionSpec(t, h))
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Close(ctx); err != nil {
			t.Fatal(err)
		}
		assertGone(t, h, open.ID())
		if _, err := p.OpenSession(ctx, sessionSpec(t, h)); !errors.Is(err, sandbox.ErrNoHost) {
			t.Errorf("a closed pool opened a session: %v", err)
		}
	})
}

// TestSessionReapedAfterKill9: a process killed with -9 while a command of
// its session runs leaves the session's sandbox; the next start's reap
// removes it.
func TestSessionReapedAfterKill9(t *testing.T) {
	forEachHost(t, func(t *testing.T, h sessionHost) {
		h.image(t)
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHoldsSession$")
		cmd.Env = append(os.Environ(), "SWETUI_HOLD_SESSION="+h.name)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var id string
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "holding session "); ok {
				id = rest
				break
			}
		}
		time.Sleep(300 * time.Millisecond) // its command is running
		cmd.Process.Kill()                 // SIGKILL: no cleanup of any kind runs
		cmd.Wait()
		if id == "" {
			t.Fatal("the helper reported no session")
		}
		if _, running, _ := h.state(t, id); !running {
			t.Fatal("the killed process's session is not running: the test proves nothing")
		}
		n, err := h.reapStale(t)
		if err != nil || n < 1 {
			t.Errorf("reaped %d (%v)", n, err)
		}
		assertGone(t, h, id)
	})
}

// TestHelperHoldsSession is TestSessionReapedAfterKill9's child process.
func TestHelperHoldsSession(t *testing.T) {
	name := os.Getenv("SWETUI_HOLD_SESSION")
	if name == "" {
		t.Skip("helper process of TestSessionReapedAfterKill9")
	}
	for _, h := range sessionHosts {
		if h.name != name {
			continue
		}
		s, err := h.backend(t, sessionLimits()).OpenSession(context.Background(), sessionSpec(t, h))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("holding session %s\n", s.ID())
		s.Exec(context.Background(), "sleep 600", sandbox.ExecOptions{Timeout: 10 * time.Minute})
	}
}

// TestSessionOpenCancelled: a caller that gives up while its session is
// being made (a run ending while its next group opens sessions) leaves no
// sandbox behind, whenever it gives up: the create finishes and its
// sandbox is removed. The pool is not closed before the count, since its
// Close would remove the leftovers.
func TestSessionOpenCancelled(t *testing.T) {
	forEachHost(t, func(t *testing.T, h sessionHost) {
		o := h.pool(t)
		o.Workers, o.Queue, o.Timeout, o.RunID = 1, 1, time.Minute, sessionRunID+"-cancel"
		o.Limits = sessionLimits()
		p, err := sandbox.NewPool(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close(context.Background())
		opened := 0
		for i := range 12 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i*i)*5*time.Millisecond)
			s, err := p.OpenSession(ctx, sessionSpec(t, h))
			cancel()
			if err == nil {
				opened++
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
			} else if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("open %d: %v, want the caller's deadline", i, err)
			}
		}
		time.Sleep(2 * time.Second) // a create the daemon finishes late
		n, err := h.backend(t, sessionLimits()).Reap(context.Background(), sandbox.Reaping{RunID: o.RunID})
		if err != nil || n != 0 {
			t.Errorf("%d sandboxes left by cancelled opens (%d opened), %v", n, opened, err)
		}
	})
}
