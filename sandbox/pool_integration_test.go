package sandbox

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
)

// TestConnectUnreachable: an endpoint that does not answer is named, with
// what to do, by Connect and by NewPool. (This file holds the pool, its
// endpoints and the reaper against the real Docker Engine.)
func TestConnectUnreachable(t *testing.T) {
	realDocker(t) // the engine must answer for the contrast to mean something
	dir := t.TempDir()
	sock := "unix://" + filepath.Join(dir, "no.sock")
	tests := []struct {
		name, endpoint, env string
		want                []string
	}{
		{"missing socket", sock, "", []string{sock, "start the Docker Engine", "sandbox.hosts"}},
		{"closed tcp port", "tcp://127.0.0.1:1", "", []string{"tcp://127.0.0.1:1", "DOCKER_HOST"}},
		{"DOCKER_HOST", "", sock, []string{sock, "from DOCKER_HOST"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("DOCKER_HOST", tc.env)
			}
			_, err := Connect(context.Background(), tc.endpoint)
			if !errors.Is(err, ErrUnreachable) {
				t.Fatalf("err %v, want ErrUnreachable", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message lacks %q:\n%v", w, err)
				}
			}
			_, err = NewPool(context.Background(), Options{Hosts: []string{tc.endpoint}, Workers: 1})
			if !errors.Is(err, ErrUnreachable) {
				t.Errorf("NewPool: %v", err)
			}
		})
	}
}

// fakeSSH points sshCommand at a stand-in that serves the local daemon the
// way `ssh host docker system dial-stdio` serves a remote one.
func fakeSSH(t *testing.T) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ssh")
	script := "#!/bin/sh\n# stand-in for ssh: drop the ssh arguments, keep the remote command\nexec docker system dial-stdio\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	old := sshCommand
	sshCommand = path
	t.Cleanup(func() { sshCommand = old })
}

// TestPoolTwoHosts spreads evaluations over two endpoints of the local
// daemon (its socket, and ssh through the stand-in), streams their logs and
// reaps only what is stale.
func TestPoolTwoHosts(t *testing.T) {
	d := realDocker(t)
	img := pyImage(t)
	fakeSSH(t)
	ctx := context.Background()

	// Leftovers: one from a dead process of this machine (reaped), one of a
	// live run elsewhere (kept).
	host, _ := os.Hostname()
	mk := func(owner string) string {
		c, err := d.ContainerCreate(ctx, &container.Config{Image: img, Cmd: []string{"true"}, Labels: map[string]string{
			LabelManaged: "true", LabelRun: "old", LabelOwner: owner,
			LabelDeadline: fmt.Sprint(time.Now().Add(time.Hour).Unix())}}, nil, nil, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		return c.ID
	}
	dead := mk(host + "/999999999/1")
	alive := mk("elsewhere.example/1/1")
	defer d.ContainerRemove(ctx, alive, container.RemoveOptions{Force: true})

	rec := newRecorder(256)
	p, err := NewPool(ctx, Options{Hosts: []string{"unix:///var/run/docker.sock", "ssh://tester@localhost:2222"},
		Workers: 2, Queue: 4, Timeout: time.Minute, Limits: Limits{MemoryMB: 256, CPUs: 1, PidsLimit: 64, LogCap: 64 << 10},
		RunID: testRunID + "-pool", Events: rec})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	if p.Reaped() < 1 {
		t.Errorf("reaped %d, want the dead process's container at least", p.Reaped())
	}
	if _, err := d.ContainerInspect(ctx, dead); !cerrdefs.IsNotFound(err) {
		t.Errorf("dead owner's container kept")
	}
	if _, err := d.ContainerInspect(ctx, alive); err != nil {
		t.Errorf("live owner's container reaped: %v", err)
	}

	logs := rec.logs
	const n = 6
	var chans []<-chan Result
	for i := 0; i < n; i++ {
		ch, err := p.Submit(ctx, Spec{ID: fmt.Sprintf("e%d", i), InstanceID: "shell", Image: img,
			Script: fmt.Sprintf("echo line-a-%d; sleep 0.3; echo line-b-%d", i, i)})
		if err != nil {
			t.Fatal(err)
		}
		chans = append(chans, ch)
	}
	hosts := map[string]int{}
	for i, ch := range chans {
		res := <-ch
		if res.Infra != nil || res.ExitCode != 0 || res.Log != fmt.Sprintf("line-a-%d\nline-b-%d\n", i, i) {
			t.Errorf("eval %d: exit %d infra %v log %q", i, res.ExitCode, res.Infra, res.Log)
		}
		hosts[res.Host]++
	}
	if len(hosts) != 2 {
		t.Errorf("evaluations by host %v, want both hosts used", hosts)
	}
	got := map[string]bool{}
	timeout := time.After(5 * time.Second)
	for len(got) < 2*n {
		select {
		case b := <-logs:
			for _, l := range b.Lines {
				got[b.EvalID+":"+l] = true
			}
		case <-timeout:
			t.Fatalf("streamed lines %v, want %d", got, 2*n)
		}
	}
	if !got["e3:line-b-3"] {
		t.Errorf("streamed %v", got)
	}
	s := p.State()
	if s.Done != n || s.P50 <= 0 || s.P95 < s.P50 || len(s.Workers) != 2 || s.InfraFailures != 0 {
		t.Errorf("state %+v", s)
	}
	if err := p.Close(ctx); err != nil {
		t.Errorf("close: %v", err)
	}
	if err := p.Close(ctx); err != nil {
		t.Errorf("second close: %v", err)
	}
	if _, err := p.Submit(ctx, Spec{}); !errors.Is(err, ErrClosed) {
		t.Errorf("submit after close: %v", err)
	}
}

// proxy forwards a unix socket to the local daemon until cut: a Docker host
// that can be lost in the middle of an evaluation, and come back.
type proxy struct {
	path, target string
	mu           sync.Mutex
	ln           net.Listener
	conns        []net.Conn
}

func newProxy(t *testing.T, target string) (*proxy, string) {
	t.Helper()
	p := &proxy{path: filepath.Join(t.TempDir(), "docker.sock"), target: target}
	p.restore(t)
	t.Cleanup(p.cut)
	return p, "unix://" + p.path
}

// restore listens again, as a daemon that came back.
func (p *proxy) restore(t *testing.T) {
	t.Helper()
	os.Remove(p.path)
	ln, err := net.Listen("unix", p.path)
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("unix", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { io.Copy(up, c); up.Close() }()
			go func() { io.Copy(c, up); c.Close() }()
		}
	}()
}

// cut stops accepting and drops every connection, as a daemon that died.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ln.Close()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// TestPoolDaemonLostMidRun loses the first host while an evaluation runs on
// it: the evaluation is an infrastructure failure there, the host is taken
// out, the retry runs on the other host, and once the host answers again
// the orphan is removed, all of it said.
func TestPoolDaemonLostMidRun(t *testing.T) {
	d := realDocker(t)
	img := pyImage(t)
	px, ep := newProxy(t, "/var/run/docker.sock")
	ctx := context.Background()
	runID := testRunID + "-lost"
	rec := newRecorder(16)
	p, err := NewPool(ctx, Options{Hosts: []string{ep, "unix:///var/run/docker.sock"}, Workers: 1, Timeout: time.Minute,
		Limits: Limits{PidsLimit: 64, LogCap: 64 << 10}, Retries: 2, Backoff: 100 * time.Millisecond, HostRetry: 300 * time.Millisecond,
		RunID: runID, Events: rec})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	logs := rec.logs
	ch, err := p.Submit(ctx, Spec{ID: "lost", Image: img, Script: "echo running; sleep 2; echo done"})
	if err != nil {
		t.Fatal(err)
	}
	// Cut the first host once the evaluation runs there.
	select {
	case <-logs:
	case <-time.After(30 * time.Second):
		t.Fatal("no output from the first attempt")
	}
	if h := p.State().Workers[0].Host; h != ep {
		t.Fatalf("first attempt on %s, want the proxy %s", h, ep)
	}
	px.cut()
	res := <-ch
	if res.Infra != nil || res.ExitCode != 0 || res.Attempts != 2 || res.Host != "unix:///var/run/docker.sock" {
		t.Errorf("result: attempts %d host %s exit %d infra %v log %q", res.Attempts, res.Host, res.ExitCode, res.Infra, res.Log)
	}
	s := p.State()
	if s.Retries != 1 || s.Hosts[0].Up || !s.Hosts[1].Up || s.Hosts[0].Err == "" {
		t.Errorf("state after the loss: retries %d hosts %+v", s.Retries, s.Hosts)
	}
	runLeft := func() int {
		left, err := d.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", LabelRun+"="+runID))})
		if err != nil {
			t.Fatal(err)
		}
		return len(left)
	}
	if n := runLeft(); n < 1 { // the orphan, and perhaps the retry's, being removed
		t.Errorf("%d containers of the run while the host is away, want the orphan", n)
	}
	px.restore(t)
	deadline := time.Now().Add(20 * time.Second)
	for runLeft() > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if n := runLeft(); n != 0 {
		t.Errorf("%d containers of the run left after the host came back", n)
	}
	for _, text := range []string{" is down (", "retry 1 of 2", " is back", "removed 1 containers left when it went away"} {
		// The reap's message follows the removal that the loop above saw.
		if !rec.saidWithin(text, 10*time.Second) {
			t.Errorf("no message %q in %+v", text, rec.msgs)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Logf("close: %v", err)
	}
}

// TestReapAfterKill9 kills -9 a process in the middle of an evaluation: its
// container outlives it, and the next start's Reap removes it.
func TestReapAfterKill9(t *testing.T) {
	d := realDocker(t)
	pyImage(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHoldsContainer$")
	cmd.Env = append(os.Environ(), "SWETUI_HOLD_CONTAINER=1")
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
		if rest, ok := strings.CutPrefix(sc.Text(), "holding container "); ok {
			id = rest
			break
		}
	}
	cmd.Process.Kill() // SIGKILL: no cleanup of any kind runs
	cmd.Wait()
	if id == "" {
		t.Fatal("the helper reported no container")
	}
	ctx := context.Background()
	if c, err := d.ContainerInspect(ctx, id); err != nil || !c.State.Running {
		t.Fatalf("the killed process's container is not running (%v): the test proves nothing", err)
	}
	n, err := Reap(ctx, d)
	if err != nil || n < 1 {
		t.Errorf("reaped %d (%v)", n, err)
	}
	assertGone(t, d, id)
}

// TestHelperHoldsContainer is TestReapAfterKill9's child process.
func TestHelperHoldsContainer(t *testing.T) {
	if os.Getenv("SWETUI_HOLD_CONTAINER") == "" {
		t.Skip("helper process of TestReapAfterKill9")
	}
	var id string
	var once sync.Once
	hooks := runHooks{created: func(cid string) { id = cid }}
	// Report once the container runs (its first output), not merely exists.
	onLog := func([]byte) { once.Do(func() { fmt.Printf("holding container %s\n", id) }) }
	testRunner(t).run(context.Background(), shellSpec(t, "echo started; sleep 600", 10*time.Minute), onLog, hooks)
}

// TestConnectBadEndpoints: endpoints that cannot even be tried say why and
// which endpoint.
func TestConnectBadEndpoints(t *testing.T) {
	tests := []struct {
		name, endpoint, certPath string
		want                     []string
	}{
		{"tcp with missing TLS files", "tcp://127.0.0.1:2376", "/nonexistent/certs", []string{"tcp://127.0.0.1:2376", "/nonexistent/certs/cert.pem"}},
		{"unknown scheme", "http://h:1", "", []string{`"http://h:1"`, "unix://, tcp:// or ssh://"}},
		{"ssh without host", "ssh://", "", []string{"ssh://[user@]host[:port]"}},
		{"ssh with a password", "ssh://u:secret@h", "", []string{"ssh://u@h", "ssh key"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.certPath != "" {
				t.Setenv("DOCKER_CERT_PATH", tc.certPath)
			}
			_, err := Connect(context.Background(), tc.endpoint)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q: %v", w, err)
				}
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("error shows the password: %v", err)
			}
		})
	}
}
