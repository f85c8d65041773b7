package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
)

const fakeImage = "img:1"

// fakePool starts a pool over fakes (endpoint = the fake's name); down
// names endpoints whose dial fails at start.
func fakePool(t *testing.T, opts Options, fakes ...*fakeDocker) *Pool {
	t.Helper()
	byName := map[string]*fakeDocker{}
	for _, f := range fakes {
		byName[f.name] = f
		opts.Hosts = append(opts.Hosts, f.name)
	}
	opts.Dial = func(ctx context.Context, ep string) (Docker, error) {
		f := byName[ep]
		if err := f.check(); err != nil {
			return nil, unreachable(ep, ep, err)
		}
		return f, nil
	}
	if opts.Timeout == 0 {
		opts.Timeout = time.Minute
	}
	if opts.Backoff == 0 {
		opts.Backoff = 10 * time.Millisecond
	}
	p, err := NewPool(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	return p
}

func fspec(id, script string) Spec {
	return Spec{ID: id, InstanceID: "inst-" + id, Image: fakeImage, Script: script}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestPoolOutcomes(t *testing.T) {
	tests := []struct {
		name      string
		script    string
		image     string
		timeout   time.Duration
		createErr int32 // creates that fail as on a lost daemon
		retries   int
		check     func(t *testing.T, res Result, s event.PoolState)
	}{
		{name: "exit status and log", script: "print a\nprint b\nexit 3",
			check: func(t *testing.T, res Result, s event.PoolState) {
				if res.ExitCode != 3 || res.Log != "a\nb\n" || res.Infra != nil || res.Attempts != 1 {
					t.Errorf("%+v", res)
				}
			}},
		{name: "timeout kills", script: "print started\nhang", timeout: 50 * time.Millisecond,
			check: func(t *testing.T, res Result, s event.PoolState) {
				if !res.TimedOut || res.ExitCode != 137 || res.Infra != nil || s.Timeouts != 1 {
					t.Errorf("%+v timeouts %d", res, s.Timeouts)
				}
			}},
		{name: "missing image is not retried", script: "exit 0", image: "nope:1", retries: 3,
			check: func(t *testing.T, res Result, s event.PoolState) {
				if !errors.Is(res.Infra, ErrImageMissing) || res.Attempts != 1 || s.InfraFailures != 1 || s.Retries != 0 {
					t.Errorf("%+v state %+v", res, s)
				}
			}},
		{name: "infra failure retried", script: "exit 0", createErr: 1, retries: 2,
			check: func(t *testing.T, res Result, s event.PoolState) {
				if res.Infra != nil || res.Attempts != 2 || s.Retries != 1 || s.InfraFailures != 0 {
					t.Errorf("%+v state %+v", res, s)
				}
			}},
		{name: "retries are bounded", script: "exit 0", createErr: 10, retries: 2,
			check: func(t *testing.T, res Result, s event.PoolState) {
				if res.Infra == nil || res.Attempts != 3 || s.Retries != 2 || s.InfraFailures != 1 {
					t.Errorf("%+v state %+v", res, s)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake("a", fakeImage)
			f.createErr.Store(tc.createErr)
			p := fakePool(t, Options{Workers: 1, Retries: tc.retries}, f)
			spec := fspec("e", tc.script)
			spec.Timeout = tc.timeout
			if tc.image != "" {
				spec.Image = tc.image
			}
			res, err := p.Run(context.Background(), spec)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, res, p.State())
			waitFor(t, "removals", func() bool { _, _, live := f.counts(); return live == 0 })
		})
	}
}

// TestPoolLostHostFailsOver loses host a mid-run: the evaluation is retried
// on b, a is taken out, and a comes back once it answers again.
func TestPoolLostHostFailsOver(t *testing.T) {
	a, b := newFake("a", fakeImage), newFake("b", fakeImage)
	rec := newRecorder(8)
	p := fakePool(t, Options{Workers: 1, Retries: 2, HostRetry: 100 * time.Millisecond, Events: rec}, a, b)
	logs := rec.logs
	ch, err := p.Submit(context.Background(), fspec("e", "print running\nsleep 100ms\nprint done"))
	if err != nil {
		t.Fatal(err)
	}
	<-logs // running on a (the first of two idle hosts)
	a.setDown()
	res := <-ch
	if res.Infra != nil || res.Attempts != 2 || res.Host != "b" || res.Log != "running\ndone\n" {
		t.Fatalf("%+v", res)
	}
	s := p.State()
	if s.Hosts[0].Up || s.Hosts[0].Err == "" || !s.Hosts[1].Up {
		t.Errorf("hosts %+v", s.Hosts)
	}
	// a answers again: after HostRetry the monitor probes it and, being the
	// first of two idle hosts, it is used.
	a.setUp()
	waitFor(t, "a to be back", func() bool { return p.State().Hosts[0].Up })
	res, _ = p.Run(context.Background(), fspec("f", "exit 0"))
	if res.Host != "a" || res.Infra != nil || !p.State().Hosts[0].Up {
		t.Errorf("after recovery ran on %s: %v", res.Host, res.Infra)
	}
	// What a console sees: the host going down and coming back, the retry,
	// and a published state that shows both hosts.
	for _, text := range []string{"docker host a is down", "docker host a is back", "retry 1 of 2"} {
		if !rec.said(text) {
			t.Errorf("no message %q in %+v", text, rec.msgs)
		}
	}
	waitFor(t, "a published state", func() bool { s, ok := rec.lastState(); return ok && len(s.Hosts) == 2 && s.Done == 2 })
	if s, _ := rec.lastState(); s.Retries != 1 || s.Hosts[0].Err == "" {
		t.Errorf("published state %+v: want 1 retry and host a's last error", s)
	}
}

// TestPoolOutageLeavesNoContainer: the container of the evaluation cut by
// a lost host is removed as soon as the host answers again (and not one
// that an evaluation started since uses), a removal that failed is tried
// again, and every step of it is said.
func TestPoolOutageLeavesNoContainer(t *testing.T) {
	a, b := newFake("a", fakeImage), newFake("b", fakeImage)
	rec := newRecorder(8)
	p := fakePool(t, Options{Workers: 1, Retries: 2, HostRetry: 50 * time.Millisecond, Events: rec}, a, b)
	ch, err := p.Submit(context.Background(), fspec("cut", "print running\nhang"))
	if err != nil {
		t.Fatal(err)
	}
	<-rec.logs // running on a
	a.setDown()
	if _, _, live := a.counts(); live != 1 {
		t.Fatalf("%d containers on a, want the cut one", live)
	}
	// The retry runs on b, where it hangs too: end it.
	waitFor(t, "the retry on b", func() bool { _, _, live := b.counts(); return live == 1 })
	a.setUp()
	waitFor(t, "a back and its orphan gone", func() bool { _, _, live := a.counts(); return p.State().Hosts[0].Up && live == 0 })
	b.mu.Lock()
	for _, c := range b.containers {
		c.killed.Do(func() { close(c.kill) })
	}
	b.mu.Unlock()
	<-ch
	for _, text := range []string{"docker host a is down", "retry 1 of 2", "docker host a is back", "docker host a: removed 1 containers left when it went away"} {
		if !rec.said(text) {
			t.Errorf("no message %q in %+v", text, rec.msgs)
		}
	}

	// A removal that fails (the daemon blinked) is tried again.
	a.removeErr.Store(1)
	res, _ := p.Run(context.Background(), fspec("blink", "exit 0"))
	if res.Host != "a" {
		t.Fatalf("ran on %s", res.Host)
	}
	waitFor(t, "the failed removal tried again", func() bool { _, _, live := a.counts(); return live == 0 })
	if !rec.said("docker host a answers again: removed 1 containers whose removal had failed") {
		t.Errorf("no message about the second removal in %+v", rec.msgs)
	}
}

// TestPoolSilentHostFailsOver: a host whose link is cut sends no error
// (pings go unanswered, the evaluation's stream stays open); the health
// check takes it out and the evaluation is retried on the other host, long
// before its timeout. When it answers again it is used again.
func TestPoolSilentHostFailsOver(t *testing.T) {
	a, b := newFake("a", fakeImage), newFake("b", fakeImage)
	rec := newRecorder(8)
	p := fakePool(t, Options{Workers: 1, Retries: 2, HostRetry: 50 * time.Millisecond, HealthEvery: 20 * time.Millisecond,
		HealthTimeout: 50 * time.Millisecond, Events: rec}, a, b)
	ch, err := p.Submit(context.Background(), fspec("e", "print running\nsleep 300ms\nprint done"))
	if err != nil {
		t.Fatal(err)
	}
	<-rec.logs // running on a
	a.silent.Store(true)
	start := time.Now()
	res := <-ch
	if res.Infra != nil || res.Attempts != 2 || res.Host != "b" || res.Log != "running\ndone\n" {
		t.Fatalf("%+v", res)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("failover took %s", took)
	}
	if s := p.State(); s.Hosts[0].Up || !strings.Contains(s.Hosts[0].Err, "deadline") {
		t.Errorf("hosts %+v, want a down for its unanswered ping", s.Hosts)
	}
	a.silent.Store(false)
	waitFor(t, "a to be back", func() bool { return p.State().Hosts[0].Up })
	if res, _ := p.Run(context.Background(), fspec("f", "exit 0")); res.Host != "a" || res.Infra != nil {
		t.Errorf("after recovery ran on %s: %v", res.Host, res.Infra)
	}
}

// TestPoolAllHostsLost: with every host gone, attempts fail as
// infrastructure failures after a bounded wait instead of hanging the run.
func TestPoolAllHostsLost(t *testing.T) {
	a := newFake("a", fakeImage)
	p := fakePool(t, Options{Workers: 1, Retries: 1, HostRetry: time.Hour}, a)
	p.noHostWait = 50 * time.Millisecond
	a.setDown()
	start := time.Now()
	res, _ := p.Run(context.Background(), fspec("e", "exit 0"))
	if !errors.Is(res.Infra, ErrNoHost) || res.Attempts != 2 || !strings.Contains(res.Infra.Error(), "connection refused") {
		t.Errorf("%+v", res)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %v", d)
	}
	if s := p.State(); s.InfraFailures != 1 || s.Hosts[0].Up {
		t.Errorf("state %+v", s)
	}
}

func TestPoolStuckEvaluationDoesNotBlockOthers(t *testing.T) {
	f := newFake("a", fakeImage)
	p := fakePool(t, Options{Workers: 2, Queue: 8}, f)
	ctx, cancel := context.WithCancel(context.Background())
	stuck, err := p.Submit(ctx, fspec("stuck", "hang"))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the stuck evaluation to run", func() bool { return p.State().Workers[0].Busy || p.State().Workers[1].Busy })
	start := time.Now()
	for i := 0; i < 6; i++ {
		res, err := p.Run(context.Background(), fspec(fmt.Sprint(i), "sleep 10ms\nexit 0"))
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("eval %d: %v %+v", i, err, res)
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("6 short evaluations took %v beside a stuck one", d)
	}
	s := p.State()
	busy := 0
	for _, w := range s.Workers {
		if w.Busy {
			busy++
			if w.EvalID != "stuck" || w.ContainerID == "" || w.InstanceID != "inst-stuck" || w.Host != "a" || w.Status != "running" {
				t.Errorf("busy worker %+v", w)
			}
		}
	}
	if busy != 1 || s.Done != 6 || s.P50 <= 0 || s.P95 < s.P50 {
		t.Errorf("state %+v", s)
	}
	cancel()
	if res := <-stuck; !res.Canceled || res.TimedOut {
		t.Errorf("stuck: %+v", res)
	}
	waitFor(t, "removals", func() bool { c, r, _ := f.counts(); return c == 7 && r == 7 })
}

// TestPoolQueueBounded: with one worker (and its preparer) busy, Queue more
// evaluations wait and the next Submit blocks until its context ends.
func TestPoolQueueBounded(t *testing.T) {
	f := newFake("a", fakeImage)
	p := fakePool(t, Options{Workers: 1, Queue: 2}, f)
	ctx := context.Background()
	var chans []<-chan Result
	for i := 0; i < 4; i++ { // running, prepared, and two queued
		ch, err := p.Submit(ctx, fspec(fmt.Sprint(i), "hang"))
		if err != nil {
			t.Fatal(err)
		}
		chans = append(chans, ch)
	}
	waitFor(t, "the queue to fill", func() bool { return p.State().Queue == 3 })
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := p.Submit(short, fspec("extra", "hang")); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("submit to a full queue: %v", err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for i, ch := range chans {
		if res := <-ch; !res.Canceled {
			t.Errorf("eval %d after close: %+v", i, res)
		}
	}
	if c, r, live := f.counts(); c != r || live != 0 {
		t.Errorf("created %d removed %d live %d after close", c, r, live)
	}
	if err := p.Close(ctx); err != nil {
		t.Errorf("second close: %v", err)
	}
}

// TestPoolCancelWhileWaiting cancels evaluations that wait (queued, or
// prepared with no free worker): they end at once and their containers go.
func TestPoolCancelWhileWaiting(t *testing.T) {
	f := newFake("a", fakeImage)
	p := fakePool(t, Options{Workers: 1, Queue: 4}, f)
	busy, err := p.Submit(context.Background(), fspec("busy", "hang"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	type out struct {
		res Result
		err error
	}
	done := make(chan out, 3)
	for i := 0; i < 3; i++ { // one prepared, two queued
		go func() {
			res, err := p.Run(ctx, fspec(fmt.Sprint(i), "exit 0"))
			done <- out{res, err}
		}()
	}
	waitFor(t, "three waiting", func() bool { return p.State().Queue == 3 })
	cancel()
	for i := 0; i < 3; i++ {
		select {
		case o := <-done:
			if o.err != nil || !o.res.Canceled {
				t.Errorf("cancelled waiting evaluation: %+v %v", o.res, o.err)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("a cancelled evaluation is still waiting")
		}
	}
	waitFor(t, "the waiting ones cleaned up", func() bool { c, r, live := f.counts(); return live == 1 && c == r+1 && p.State().Queue == 0 })
	p.Close(context.Background())
	if res := <-busy; !res.Canceled {
		t.Errorf("busy after close: %+v", res)
	}
}

func TestPoolSlowSubscriberDropsNotBlocks(t *testing.T) {
	f := newFake("a", fakeImage)
	bus := event.NewBus()
	defer bus.Close()
	sub := bus.Subscribe(1) // never read
	p := fakePool(t, Options{Workers: 1, Events: bus}, f)
	script := strings.Repeat("print x\nsleep 1ms\n", 20)
	res, _ := p.Run(context.Background(), fspec("e", script))
	if res.ExitCode != 0 || strings.Count(res.Log, "x\n") != 20 {
		t.Fatalf("%+v", res)
	}
	if d := sub.Dropped().Logs; d == 0 {
		t.Errorf("no batch dropped for a subscriber that never reads")
	}
}

func TestPoolNoHost(t *testing.T) {
	f := newFake("a", fakeImage)
	f.setDown()
	_, err := NewPool(context.Background(), Options{Workers: 1, Hosts: []string{"a"},
		Dial: func(ctx context.Context, ep string) (Docker, error) { return nil, unreachable(ep, ep, f.check()) }})
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "at a") {
		t.Errorf("err %v", err)
	}
}

func TestStale(t *testing.T) {
	host, _ := os.Hostname()
	now := time.Now()
	future, past := fmt.Sprint(now.Add(time.Hour).Unix()), fmt.Sprint(now.Add(-time.Second).Unix())
	tests := []struct {
		name   string
		labels map[string]string
		state  string
		want   bool
	}{
		{"this process", map[string]string{LabelOwner: OwnerID(), LabelDeadline: future}, "running", false},
		{"this process past its deadline", map[string]string{LabelOwner: OwnerID(), LabelDeadline: past}, "running", true},
		{"dead pid here", map[string]string{LabelOwner: host + "/999999999/5", LabelDeadline: future}, "running", true},
		{"reused pid here", map[string]string{LabelOwner: fmt.Sprintf("%s/%d/1", host, os.Getpid()), LabelDeadline: future}, "running", true},
		{"other machine", map[string]string{LabelOwner: "elsewhere/1/1", LabelDeadline: future}, "running", false},
		{"no owner, exited", map[string]string{}, "exited", true},
		{"no owner, running", map[string]string{}, "running", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := stale(container.Summary{Labels: tc.labels, State: tc.state}, now); got != tc.want {
				t.Errorf("stale = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestFromConfig(t *testing.T) {
	o := FromConfig(config.Default(), "r1")
	if o.Workers != 2 || o.Timeout != 300*time.Second || o.Limits.LogCap != 1024<<10 || o.Limits.PidsLimit != 256 ||
		o.Limits.MemoryMB != 2048 || o.Limits.CPUs != 1 || o.Retries != 2 || o.RunID != "r1" || o.Queue != 64 ||
		o.Kubernetes.ImagePullPolicy != "IfNotPresent" || o.Kubernetes.Registry != "" {
		t.Errorf("%+v", o)
	}
	cfg := config.Default()
	cfg.Prepare.Registry = "registry.example:5000/team"
	if got := FromConfig(cfg, "r1").Kubernetes.Registry; got != cfg.Prepare.Registry {
		t.Errorf("the Pods pull from %q, want prepare.registry %q", got, cfg.Prepare.Registry)
	}
	cfg.Sandbox.Kubernetes.Registry = "other:5000"
	if got := FromConfig(cfg, "r1").Kubernetes.Registry; got != "other:5000" {
		t.Errorf("sandbox.kubernetes.registry is not taken: %q", got)
	}
}

// boundedRunner is a Docker backend that says it holds only room
// evaluations, as a Kubernetes namespace does.
type boundedRunner struct {
	*Runner
	room int
}

func (b boundedRunner) Capacity() int { return b.room }

// TestPoolHonoursCapacity: a host that holds one evaluation at a time never
// runs two, and the second waits for the first rather than failing.
func TestPoolHonoursCapacity(t *testing.T) {
	f := newFake("bounded", fakeImage)
	RegisterScheme("bounded", func(ctx context.Context, ep string, cfg BackendConfig) (Backend, error) {
		return boundedRunner{Runner: &Runner{Docker: f, Endpoint: ep, RunID: cfg.RunID, Limits: cfg.Limits}, room: 1}, nil
	})
	rec := newRecorder(64)
	p := fakePool(t, Options{Workers: 3, Queue: 8, Hosts: []string{"bounded://one"}, Events: rec})
	var chans []<-chan Result
	for i := range 3 {
		ch, err := p.Submit(context.Background(), fspec(fmt.Sprint(i), "sleep 100ms\nprint ok"))
		if err != nil {
			t.Fatal(err)
		}
		chans = append(chans, ch)
	}
	most := 0
	done := 0
	for done < 3 {
		select {
		case res := <-chans[0]:
			chans[0] = nil
			checkOK(t, res)
			done++
		case res := <-chans[1]:
			chans[1] = nil
			checkOK(t, res)
			done++
		case res := <-chans[2]:
			chans[2] = nil
			checkOK(t, res)
			done++
		case <-time.After(5 * time.Millisecond):
		}
		busy := 0
		for _, w := range p.State().Workers {
			if w.Busy {
				busy++
			}
		}
		most = max(most, busy)
		if h := p.State().Hosts[0]; h.Active > 1 {
			t.Fatalf("%d evaluations on a host that holds 1", h.Active)
		}
	}
	if most != 1 {
		t.Errorf("at most %d ran at once, want 1", most)
	}
}

func checkOK(t *testing.T, res Result) {
	t.Helper()
	if res.Infra != nil || res.ExitCode != 0 || res.Log != "ok\n" {
		t.Errorf("exit %d infra %v log %q", res.ExitCode, res.Infra, res.Log)
	}
}
