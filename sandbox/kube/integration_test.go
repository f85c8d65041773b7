package kube

// Tests against the real single-node cluster of .ci/k8s (kube-apiserver,
// kube-scheduler, kubelet, containerd), through the pool as a run uses it.

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/internal/kubetest"
	"github.com/swetui/swetui/sandbox"
)

// testImage is pushed to the cluster's registry once per test process.
var pushOnce sync.Once

func cluster(t *testing.T) kubetest.Cluster {
	t.Helper()
	c := kubetest.Up(t)
	pushOnce.Do(func() { c.Push(t, sandbox.BaseImage) })
	return c
}

func kubeConfig(c kubetest.Cluster) config.Kubernetes {
	return config.Kubernetes{Registry: c.Registry, ImagePullPolicy: "IfNotPresent"}
}

type publishFunc func(event.Event)

func (f publishFunc) Publish(e event.Event) { f(e) }

func limits() sandbox.Limits {
	return sandbox.Limits{MemoryMB: 256, CPUs: 0.5, PidsLimit: 128, LogCap: 1 << 20, TmpMB: 16}
}

func newPool(t *testing.T, c kubetest.Cluster, hosts []string, l sandbox.Limits, events event.Publisher) *sandbox.Pool {
	t.Helper()
	p, err := sandbox.NewPool(context.Background(), sandbox.Options{
		Hosts: hosts, Workers: 4, Queue: 16, Timeout: time.Minute, Retries: 2, Backoff: 200 * time.Millisecond,
		RunID: "kube-test-" + sandbox.NewNonce()[:8], Limits: l, Events: events,
		Kubernetes: kubeConfig(c),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := p.Close(ctx); err != nil {
			t.Errorf("pool close: %v", err)
		}
		assertNoPods(t, c, p.RunID())
	})
	return p
}

func open(t *testing.T, c kubetest.Cluster) *Backend {
	t.Helper()
	b, err := Open(context.Background(), c.Host(), sandbox.BackendConfig{RunID: "probe", Limits: limits(), Kubernetes: kubeConfig(c)})
	if err != nil {
		t.Fatal(err)
	}
	return b.(*Backend)
}

// assertNoPods fails when a Pod of run runID is left in the namespace.
func assertNoPods(t *testing.T, c kubetest.Cluster, runID string) {
	t.Helper()
	b := open(t, c)
	list, err := b.cs.CoreV1().Pods(c.Namespace).List(context.Background(),
		metav1.ListOptions{LabelSelector: sandbox.LabelRun + "=" + LabelValue(runID)})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		t.Errorf("pod %s of run %s left behind (%s)", p.Name, runID, p.Status.Phase)
	}
}

func shell(script string, timeout time.Duration) sandbox.Spec {
	return sandbox.Spec{ID: sandbox.NewNonce()[:12], InstanceID: "probe", Image: sandbox.BaseImage, Workdir: "/work",
		Script: "set -u\n" + script, Timeout: timeout}
}

// TestPodIsConfined runs probes in a Pod: what the spec asks for is what
// the cluster enforces.
func TestPodIsConfined(t *testing.T) {
	c := cluster(t)
	if n := open(t, c).Capacity(); n < 1 {
		t.Errorf("capacity %d on a Ready node with 2 CPUs", n)
	}
	p := newPool(t, c, []string{c.Host()}, limits(), nil)
	spec := shell(`
grep -c . /proc/net/route | sed 's/^/route lines /'
python3 - <<'EOF'
import socket
for host, port in (("10.0.0.1", 443), ("127.0.0.1", 16443), ("198.18.0.1", 53)):
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect((host, port))
        print("reached", host, port)
    except OSError:
        print("unreachable", host, port)
try:
    socket.getaddrinfo("kubernetes.default", 443)
    print("resolved")
except OSError:
    print("no dns")
EOF
test -e /var/run/secrets/kubernetes.io/serviceaccount/token && echo token || echo no token
grep CapEff /proc/self/status
grep NoNewPrivs /proc/self/status
touch /usr/x 2>&1 | sed 's/^touch: //'
touch /work/x /tmp/x && echo work and tmp writable
test -f /work/note && cat /work/note
df -m /tmp | awk 'NR==2 {print "tmp", $2 " MiB"}'
id -u
`, 30*time.Second)
	spec.Files = map[string][]byte{"/work/note": []byte("copied in\n")}
	spec.User = "1000"
	res, err := p.Run(context.Background(), spec)
	if err != nil || res.Infra != nil || res.ExitCode != 0 {
		t.Fatalf("exit %d infra %v err %v\n%s", res.ExitCode, res.Infra, err, res.Log)
	}
	want := "route lines 1\nunreachable 10.0.0.1 443\nunreachable 127.0.0.1 16443\nunreachable 198.18.0.1 53\nno dns\n" +
		"no token\nCapEff:\t0000000000000000\nNoNewPrivs:\t1\ncannot touch '/usr/x': Read-only file system\n" +
		"work and tmp writable\ncopied in\ntmp 16 MiB\n1000\n"
	if res.Log != want {
		t.Errorf("inside the pod:\n%s\nwant\n%s", res.Log, want)
	}
	if !strings.HasPrefix(res.Host, "k8s://") || res.ContainerID == "" {
		t.Errorf("host %q pod %q", res.Host, res.ContainerID)
	}
}

// TestPodFaults: what kills an evaluation's Pod on Docker kills it here,
// with the same Result, and the Pod goes.
func TestPodFaults(t *testing.T) {
	c := cluster(t)
	l := limits()
	l.LogCap, l.DiskMB = 64<<10, 16
	p := newPool(t, c, []string{c.Host()}, l, nil)
	tests := []struct {
		name   string
		spec   sandbox.Spec
		check  func(sandbox.Result) bool
		expect string
	}{
		{"the timeout kills it", shell("echo started; sleep 600", 3*time.Second),
			func(r sandbox.Result) bool {
				return r.TimedOut && r.ExitCode == 137 && strings.Contains(r.Log, "started")
			}, "timed out, 137"},
		{"a log flood past the cap kills it", shell("yes flood", time.Minute),
			func(r sandbox.Result) bool { return r.Truncated && len(r.Log) == 64<<10 }, "truncated at 64 KiB"},
		{"the memory limit kills the hog", shell(`python3 -c 'b = bytearray(600 << 20); print("allocated")'; echo "exit $?"`, time.Minute),
			func(r sandbox.Result) bool {
				return r.ExitCode == 0 && strings.Contains(r.Log, "exit 137") && !strings.Contains("\n"+r.Log, "\nallocated\n")
			}, "the hog OOM-killed (137)"},
		{"no file grows past the disk bound", shell(`head -c 40M /dev/zero > /work/big; echo "exit $?"; stat -c %s /work/big`, time.Minute),
			func(r sandbox.Result) bool {
				return strings.Contains(r.Log, "exit 153") && strings.Contains(r.Log, "16777216")
			}, "SIGXFSZ at 16 MiB"},
		{"writing past the disk bound kills it", shell(`for i in $(seq 40); do head -c 4M /dev/zero > /work/f$i; sleep 0.2; done; echo survived`, time.Minute),
			func(r sandbox.Result) bool { return r.DiskLimit && !strings.Contains(r.Log, "survived") }, "disk limit"},
		{"the exit status is the API's", shell("exit 3", time.Minute),
			func(r sandbox.Result) bool { return r.ExitCode == 3 && r.Infra == nil }, "exit 3"},
	}
	var wg sync.WaitGroup
	for _, tt := range tests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := p.Run(context.Background(), tt.spec)
			if err != nil || res.Infra != nil || !tt.check(res) {
				t.Errorf("%s: want %s; got exit %d timedout %v truncated %v disk %v infra %v err %v, log %d bytes: %.300s",
					tt.name, tt.expect, res.ExitCode, res.TimedOut, res.Truncated, res.DiskLimit, res.Infra, err, len(res.Log), res.Log)
			}
		}()
	}
	wg.Wait()
}

// TestMixedHostsSpread: a pool over the local Docker daemon and the cluster
// places evaluations on both.
func TestMixedHostsSpread(t *testing.T) {
	c := cluster(t)
	p := newPool(t, c, []string{c.Host(), "unix:///var/run/docker.sock"}, limits(), nil)
	var wg sync.WaitGroup
	var mu sync.Mutex
	on := map[string]int{}
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := p.Run(context.Background(), shell("sleep 2; echo ok", time.Minute))
			if err != nil || res.Infra != nil || res.Log != "ok\n" {
				t.Errorf("exit %d infra %v err %v: %s", res.ExitCode, res.Infra, err, res.Log)
			}
			mu.Lock()
			on[res.Host]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(on) != 2 {
		t.Errorf("evaluations ran on %v, want both hosts", on)
	}
	t.Logf("placed: %v", on)
}

// TestKubeletLostMidEvaluation stops the node's kubelet while an
// evaluation runs in a Pod: it is an infrastructure failure, retried on the
// Docker host, nothing lost; the Pod is gone once the kubelet is back.
func TestKubeletLostMidEvaluation(t *testing.T) {
	c := cluster(t)
	started := make(chan string, 4)
	events := publishFunc(func(e event.Event) {
		if b, ok := e.(event.LogBatch); ok {
			for _, l := range b.Lines {
				if l == "started" {
					select {
					case started <- b.EvalID:
					default:
					}
				}
			}
		}
	})
	p := newPool(t, c, []string{c.Host(), "unix:///var/run/docker.sock"}, limits(), events)
	spec := shell("echo started; sleep 15; echo finished", 2*time.Minute)
	ch, err := p.Submit(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(2 * time.Minute):
		t.Fatal("the evaluation never started")
	}
	if st := p.State(); !strings.HasPrefix(busyHost(st), "k8s://") {
		t.Fatalf("the evaluation runs on %q, not on the cluster: the test proves nothing", busyHost(st))
	}
	c.Kubelet(t, "stop")
	defer c.Kubelet(t, "start")
	res := <-ch
	if res.Infra != nil || res.ExitCode != 0 || res.Attempts != 2 || !strings.HasPrefix(res.Host, "unix://") ||
		!strings.HasSuffix(res.Log, "started\nfinished\n") {
		t.Errorf("after the kubelet stopped: host %s attempts %d exit %d infra %v\n%s", res.Host, res.Attempts, res.ExitCode, res.Infra, res.Log)
	}
}

func busyHost(st event.PoolState) string {
	for _, w := range st.Workers {
		if w.Busy {
			return w.Host
		}
	}
	return ""
}

// TestReapPodsAfterKill9 kills -9 a process in the middle of an evaluation
// on the cluster: its Pod outlives it, and the next start removes it.
func TestReapPodsAfterKill9(t *testing.T) {
	c := cluster(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHoldsPod$")
	cmd.Env = append(os.Environ(), "SWETUI_HOLD_POD=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var run string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "holding run "); ok {
			run = rest
			break
		}
	}
	cmd.Process.Kill() // SIGKILL: no cleanup of any kind runs
	cmd.Wait()
	if run == "" {
		t.Fatal("the helper reported no pod")
	}
	b := open(t, c)
	list, err := b.cs.CoreV1().Pods(c.Namespace).List(context.Background(), metav1.ListOptions{LabelSelector: sandbox.LabelRun + "=" + LabelValue(run)})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("the killed process left %d pods (%v): the test proves nothing", len(list.Items), err)
	}
	// The next start: a pool's first act on the host is the reap.
	p, err := sandbox.NewPool(context.Background(), sandbox.Options{Hosts: []string{c.Host()}, Workers: 1, Limits: limits(), Kubernetes: kubeConfig(c)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	if p.Reaped() < 1 {
		t.Errorf("reaped %d", p.Reaped())
	}
	assertNoPods(t, c, run)
}

// TestHelperHoldsPod is TestReapPodsAfterKill9's child process.
func TestHelperHoldsPod(t *testing.T) {
	if os.Getenv("SWETUI_HOLD_POD") == "" {
		t.Skip("helper process of TestReapPodsAfterKill9")
	}
	c := kubetest.Up(t)
	var once sync.Once
	runID := "kube-kill9-" + sandbox.NewNonce()[:8]
	events := publishFunc(func(e event.Event) {
		if _, ok := e.(event.LogBatch); ok {
			once.Do(func() { fmt.Printf("holding run %s\n", runID) })
		}
	})
	p, err := sandbox.NewPool(context.Background(), sandbox.Options{Hosts: []string{c.Host()}, Workers: 1, RunID: runID,
		Limits: limits(), Events: events, Kubernetes: kubeConfig(c), Timeout: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	p.Run(context.Background(), shell("echo started; sleep 600", 10*time.Minute))
}

// TestMissingImageIsInfra: a Pod whose image the registry lacks is an
// infrastructure failure that says what to do, not a failed test, and its
// Pod goes.
func TestMissingImageIsInfra(t *testing.T) {
	c := cluster(t)
	p := newPool(t, c, []string{c.Host()}, limits(), nil)
	spec := shell("echo never", time.Minute)
	spec.Image = "swetui/never-pushed:1"
	res, err := p.Run(context.Background(), spec)
	if err != nil || res.Infra == nil || !strings.Contains(res.Infra.Error(), "swetui prepare") ||
		!strings.Contains(res.Infra.Error(), c.Registry+"/swetui/never-pushed:1") || res.Attempts != 3 {
		t.Errorf("attempts %d infra %v err %v", res.Attempts, res.Infra, err)
	}
}
