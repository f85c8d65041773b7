package sandbox

// Two real Docker hosts: the machine's engine and a second dockerd that
// this test starts in a network namespace of its own (a veth pair to the
// host, its own data root), reached over TCP with mutual TLS. It needs root,
// iproute2 (ip netns), nsenter and dockerd; elsewhere than CI it skips
// without them. Everything it makes (daemon, namespace, link, mounts) goes
// at the end, on failure too.

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
)

// netHost is a second Docker host on this machine.
type netHost struct {
	ns, link         string // namespace; the host's end of the veth pair
	hostIP, peerIP   string
	dir              string
	endpoint         string // tcp://peerIP:2376
	clientCerts      string // ca.pem, cert.pem, key.pem for DOCKER_CERT_PATH
	daemon           *exec.Cmd
	daemonDone       chan struct{}
	cutAt, restoreAt time.Time
}

// hostsEnvOK skips (or, under CI, fails) the test when the machine cannot
// run a second daemon in a namespace.
func hostsEnvOK(t *testing.T) {
	t.Helper()
	skip := t.Skipf
	if os.Getenv("CI") == "true" {
		skip = t.Fatalf
	}
	if os.Geteuid() != 0 {
		skip("two-host test: needs root for a network namespace and a second dockerd")
	}
	for _, tool := range []string{"ip", "nsenter", "dockerd"} {
		if _, err := exec.LookPath(tool); err != nil {
			skip("two-host test: %s is not installed (iproute2, util-linux, docker.io)", tool)
		}
	}
}

func run(t *testing.T, name string, args ...string) error {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// startSecondHost starts the second host, with the storage driver of the
// first (the machine's engine), and registers its teardown.
func startSecondHost(t *testing.T, driver string) *netHost {
	t.Helper()
	pid := os.Getpid()
	h := &netHost{ns: fmt.Sprintf("swetui-h2-%d", pid), link: fmt.Sprintf("swh2a%d", pid%1000000),
		dir: t.TempDir(), daemonDone: make(chan struct{})}
	// A /30 of our own for the pair, picked by pid so that two runs on one
	// machine do not meet; only these two addresses are ever used.
	block := (pid % 16000) * 4
	h.hostIP = fmt.Sprintf("10.251.%d.%d", block/256, block%256+1)
	h.peerIP = fmt.Sprintf("10.251.%d.%d", block/256, block%256+2)
	h.endpoint = "tcp://" + h.peerIP + ":2376"
	skip := t.Skipf
	if os.Getenv("CI") == "true" {
		skip = t.Fatalf
	}
	if err := run(t, "ip", "netns", "add", h.ns); err != nil {
		skip("two-host test: cannot make a network namespace: %v", err)
	}
	t.Cleanup(func() { h.teardown(t) })
	peer := fmt.Sprintf("swh2b%d", pid%1000000)
	for _, c := range [][]string{
		{"ip", "link", "add", h.link, "type", "veth", "peer", "name", peer},
		{"ip", "link", "set", peer, "netns", h.ns},
		{"ip", "addr", "add", h.hostIP + "/30", "dev", h.link},
		{"ip", "link", "set", h.link, "up"},
		{"ip", "netns", "exec", h.ns, "ip", "addr", "add", h.peerIP + "/30", "dev", peer},
		{"ip", "netns", "exec", h.ns, "ip", "link", "set", peer, "up"},
		{"ip", "netns", "exec", h.ns, "ip", "link", "set", "lo", "up"},
	} {
		if err := run(t, c[0], c[1:]...); err != nil {
			t.Fatal(err)
		}
	}
	server := filepath.Join(h.dir, "server")
	h.clientCerts = filepath.Join(h.dir, "client")
	writeTLS(t, server, h.clientCerts, h.peerIP)
	if err := os.WriteFile(filepath.Join(h.dir, "daemon.json"), []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(h.dir, "dockerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	// nsenter enters the network namespace only: `ip netns exec` would
	// also remount /sys, hiding the cgroup mounts dockerd needs.
	h.daemon = exec.Command("nsenter", "--net=/var/run/netns/"+h.ns, "--",
		"dockerd", "--config-file", filepath.Join(h.dir, "daemon.json"),
		"--data-root", filepath.Join(h.dir, "data"), "--exec-root", filepath.Join(h.dir, "exec"),
		"--pidfile", filepath.Join(h.dir, "docker.pid"), "-H", "unix://"+filepath.Join(h.dir, "docker.sock"),
		"-H", h.endpoint, "--tlsverify", "--tlscacert", filepath.Join(server, "ca.pem"),
		"--tlscert", filepath.Join(server, "cert.pem"), "--tlskey", filepath.Join(server, "key.pem"),
		"--storage-driver", driver, "--bridge", "none", "--iptables=false", "--ip-masq=false", "--ip-forward=false",
		"--cgroup-parent", "/"+h.ns)
	h.daemon.Stdout, h.daemon.Stderr = logf, logf
	// Its own process group, so that a stop reaches containerd and shims.
	h.daemon.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := h.daemon.Start(); err != nil {
		t.Fatalf("start dockerd: %v", err)
	}
	go func() { h.daemon.Wait(); logf.Close(); close(h.daemonDone) }()
	t.Setenv("DOCKER_CERT_PATH", h.clientCerts)
	t.Setenv("DOCKER_TLS_VERIFY", "1")
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		d, err := Connect(ctx, h.endpoint)
		cancel()
		if err == nil {
			d.Close()
			return h
		}
		select {
		case <-h.daemonDone:
			b, _ := os.ReadFile(filepath.Join(h.dir, "dockerd.log"))
			t.Fatalf("second dockerd exited:\n%s", tail(string(b), 30))
		default:
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(h.dir, "dockerd.log"))
			t.Fatalf("second dockerd does not answer on %s: %v\n%s", h.endpoint, err, tail(string(b), 30))
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// cut takes the host's end of the link down: the second host's packets go
// nowhere, and no error tells the client so.
func (h *netHost) cut(t *testing.T) {
	if err := run(t, "ip", "link", "set", h.link, "down"); err != nil {
		t.Fatal(err)
	}
	h.cutAt = time.Now()
}

func (h *netHost) restore(t *testing.T) {
	if err := run(t, "ip", "link", "set", h.link, "up"); err != nil {
		t.Fatal(err)
	}
	h.restoreAt = time.Now()
}

// teardown stops the daemon (its whole process group), unmounts what it
// left mounted under its folder, and removes the link and the namespace.
// Every step runs whatever the one before did.
func (h *netHost) teardown(t *testing.T) {
	if h.daemon != nil && h.daemon.Process != nil {
		_ = syscall.Kill(-h.daemon.Process.Pid, syscall.SIGTERM)
		select {
		case <-h.daemonDone:
		case <-time.After(20 * time.Second):
			_ = syscall.Kill(-h.daemon.Process.Pid, syscall.SIGKILL)
			<-h.daemonDone
		}
	}
	// Processes still in the namespace are ours (containers' shims).
	if out, err := exec.Command("ip", "netns", "pids", h.ns).Output(); err == nil {
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	for _, m := range mountsUnder(h.dir) {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
			t.Logf("teardown: unmount %s: %v", m, err)
		}
	}
	// The daemon's cgroup parent, one folder per controller, empty by now.
	if dirs, err := filepath.Glob("/sys/fs/cgroup/*/" + h.ns); err == nil {
		for _, d := range dirs {
			var sub []string
			_ = filepath.WalkDir(d, func(p string, de os.DirEntry, err error) error {
				if err == nil && de.IsDir() {
					sub = append(sub, p)
				}
				return nil
			})
			for i := len(sub) - 1; i >= 0; i-- { // deepest first
				_ = os.Remove(sub[i])
			}
		}
	}
	if dirs, _ := filepath.Glob("/sys/fs/cgroup/*/" + h.ns); len(dirs) > 0 {
		t.Logf("teardown: cgroups left: %v", dirs)
	}
	_ = run(t, "ip", "link", "del", h.link)
	if err := run(t, "ip", "netns", "del", h.ns); err != nil {
		t.Logf("teardown: %v", err)
	}
}

// mountsUnder lists mount points under dir, deepest first.
func mountsUnder(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && strings.HasPrefix(fields[4], dir+"/") {
			out = append(out, fields[4])
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// writeTLS writes a CA, a server certificate for ip and a client
// certificate, in the file names dockerd and DOCKER_CERT_PATH use.
func writeTLS(t *testing.T, serverDir, clientDir, ip string) {
	t.Helper()
	for _, d := range []string{serverDir, clientDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	write := func(path, kind string, der []byte) {
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeKey := func(path string, k *ecdsa.PrivateKey) {
		der, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		write(path, "EC PRIVATE KEY", der)
	}
	now := time.Now()
	caKey := key()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "swetui test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	issue := func(dir string, serial int64, tmpl *x509.Certificate) {
		k := key()
		tmpl.SerialNumber, tmpl.NotBefore, tmpl.NotAfter = big.NewInt(serial), now.Add(-time.Hour), now.Add(24*time.Hour)
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		write(filepath.Join(dir, "cert.pem"), "CERTIFICATE", der)
		writeKey(filepath.Join(dir, "key.pem"), k)
		write(filepath.Join(dir, "ca.pem"), "CERTIFICATE", caDER)
	}
	issue(serverDir, 2, &x509.Certificate{Subject: pkix.Name{CommonName: ip}, IPAddresses: []net.IP{net.ParseIP(ip)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	issue(clientDir, 3, &x509.Certificate{Subject: pkix.Name{CommonName: "swetui test client"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
}

// runEvals submits n evaluations and returns their results in order.
func runEvals(t *testing.T, p *Pool, n int, spec func(i int) Spec) []Result {
	t.Helper()
	ctx := context.Background()
	chans := make([]<-chan Result, n)
	for i := range chans {
		ch, err := p.Submit(ctx, spec(i))
		if err != nil {
			t.Fatal(err)
		}
		chans[i] = ch
	}
	out := make([]Result, n)
	for i, ch := range chans {
		out[i] = <-ch
	}
	return out
}

// runContainers counts the containers of a run on a host.
func runContainers(t *testing.T, d Docker, runID string) int {
	t.Helper()
	list, err := d.ContainerList(context.Background(), container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", LabelRun+"="+runID))})
	if err != nil {
		t.Fatalf("list containers on %s: %v", d.DaemonHost(), err)
	}
	return len(list)
}

// TestTwoRealHosts spreads evaluations over the machine's engine and a
// second real host, measures the throughput with one host and with two,
// cuts the second host's link while evaluations run there (they are retried
// on the first: every result comes back, none an infrastructure failure),
// brings it back (it takes evaluations again; what the cut left there is
// reaped), and leaves no container on either host.
func TestTwoRealHosts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a second Docker daemon")
	}
	hostsEnvOK(t)
	d1 := realDocker(t)
	img := pyImage(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	info, err := d1.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h := startSecondHost(t, info.Driver)
	d2, err := Connect(ctx, h.endpoint)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()

	// The image, streamed from the first host: the second has no registry.
	start := time.Now()
	rep, err := PrepareWith(ctx, d2, []ImageSource{{Name: img}}, PrepareOptions{Peers: []Docker{d1}})
	if err != nil || len(rep.Streamed) != 1 {
		t.Fatalf("prepare the second host: %+v, %v", rep, err)
	}
	t.Logf("image %s streamed to the second host in %s", img, time.Since(start).Round(time.Millisecond))

	both := []string{"unix:///var/run/docker.sock", h.endpoint}
	runID := testRunID + "-hosts"
	newPool := func(hosts []string, workers int, rec *recorder) *Pool {
		p, err := NewPool(ctx, Options{Hosts: hosts, Workers: workers, Queue: 64, Timeout: time.Minute,
			Limits: Limits{MemoryMB: 256, CPUs: 1, PidsLimit: 64, LogCap: 64 << 10}, Retries: 2,
			Backoff: 200 * time.Millisecond, HostRetry: time.Second, HealthEvery: 300 * time.Millisecond,
			HealthTimeout: 2 * time.Second, RunID: runID, Events: rec})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	gold := diffOf(t, pyRepo, map[string]string{"calc.py": goldCalc})
	harness := func(int) Spec {
		s, _ := evalSpec(t, gold)
		s.User = "swetui" // the repository's owner: root has no capability to write it
		return s
	}

	// Throughput: the harness's evaluation of a gold patch; one host with as
	// many workers as two tells the second host's share from the workers'.
	n := 12
	if s := os.Getenv("SWETUI_HOSTS_EVALS"); s != "" {
		if n, err = strconv.Atoi(s); err != nil {
			t.Fatalf("SWETUI_HOSTS_EVALS=%q: %v", s, err)
		}
	}
	for _, tc := range []struct {
		name    string
		hosts   []string
		workers int
	}{{"one host", both[:1], 2}, {"one host", both[:1], 4}, {"two hosts", both, 4}} {
		p := newPool(tc.hosts, tc.workers, newRecorder(0))
		start := time.Now()
		res := runEvals(t, p, n, harness)
		took := time.Since(start)
		used := map[string]int{}
		for i, r := range res {
			if r.Infra != nil || r.ExitCode != 0 {
				t.Errorf("%s: eval %d: exit %d infra %v\n%s", tc.name, i, r.ExitCode, r.Infra, r.Log)
			}
			used[r.Host]++
		}
		t.Logf("throughput, %s, %d workers: %d evaluations in %s = %.2f/s; by host %v", tc.name, tc.workers, n,
			took.Round(time.Millisecond), float64(n)/took.Seconds(), used)
		if len(used) != len(tc.hosts) {
			t.Errorf("%s: hosts used %v", tc.name, used)
		}
		if err := p.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	}

	// The cut: evaluations that outlast it, on both hosts.
	rec := newRecorder(0)
	p := newPool(both, 4, rec)
	defer p.Close(ctx)
	slow := func(i int) Spec {
		return Spec{ID: fmt.Sprintf("cut-%d", i), InstanceID: "shell", Image: img,
			Script: fmt.Sprintf("echo start-%d; sleep 4; echo done-%d", i, i)}
	}
	const m = 6
	chans := make([]<-chan Result, m)
	for i := range chans {
		if chans[i], err = p.Submit(ctx, slow(i)); err != nil {
			t.Fatal(err)
		}
	}
	running := func() bool {
		for _, w := range p.State().Workers {
			if w.Busy && w.Host == h.endpoint && w.Status == "running" {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(30 * time.Second); !running(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no evaluation ever ran on the second host")
		}
	}
	time.Sleep(time.Second) // well inside the script's sleep
	h.cut(t)
	retried := 0
	for i, ch := range chans {
		r := <-ch
		if r.Infra != nil || r.ExitCode != 0 || !strings.Contains(r.Log, fmt.Sprintf("done-%d", i)) {
			t.Errorf("eval %d after the cut: host %s attempts %d exit %d infra %v log %q", i, r.Host, r.Attempts, r.ExitCode, r.Infra, r.Log)
		}
		if r.Attempts > 1 {
			retried++
			if r.Host == h.endpoint {
				t.Errorf("eval %d retried on the lost host", i)
			}
		}
	}
	s := p.State()
	if retried == 0 || s.Hosts[1].Up || s.InfraFailures != 0 {
		t.Errorf("after the cut: %d retried, hosts %+v, infra failures %d; want a retry, the second host down, none failed", retried, s.Hosts, s.InfraFailures)
	}
	t.Logf("cut: %d of %d evaluations retried on the first host; detected as down: %v", retried, m, rec.said("is down"))
	// Removals run in the background: give them a moment.
	for deadline := time.Now().Add(15 * time.Second); runContainers(t, d1, runID) > 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("%d containers of the run left on the first host", runContainers(t, d1, runID))
			break
		}
	}

	// Back: the leftover of the cut is reaped, and the host takes work again.
	h.restore(t)
	for deadline := time.Now().Add(30 * time.Second); !p.State().Hosts[1].Up; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("second host not back 30s after the link was: %+v", p.State().Hosts[1])
		}
	}
	t.Logf("second host back %s after the link", time.Since(h.restoreAt).Round(time.Millisecond))
	// The reap runs beside the evaluations that the host takes again.
	for deadline := time.Now().Add(15 * time.Second); runContainers(t, d2, runID) > 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("%d containers of the run left on the second host after it came back", runContainers(t, d2, runID))
			break
		}
	}
	if !rec.said("removed 1 containers left") && !rec.said("containers left when it went away") {
		t.Logf("no leftover to reap on the second host (the removal got through before the cut took hold)")
	}
	used := map[string]int{}
	for i, r := range runEvals(t, p, 4, func(i int) Spec { return slow(100 + i) }) {
		if r.Infra != nil || r.ExitCode != 0 {
			t.Errorf("eval %d after the return: exit %d infra %v", i, r.ExitCode, r.Infra)
		}
		used[r.Host]++
	}
	if used[h.endpoint] == 0 {
		t.Errorf("the second host took no evaluation after it came back: %v", used)
	}
	if err := p.Close(ctx); err != nil {
		t.Errorf("close: %v", err)
	}
	for _, d := range []Docker{d1, d2} {
		if left := runContainers(t, d, runID); left > 0 {
			t.Errorf("%d containers of the run left on %s", left, d.DaemonHost())
		}
	}
	if all, err := d2.ContainerList(ctx, container.ListOptions{All: true}); err != nil || len(all) != 0 {
		t.Errorf("containers on the second host at the end: %d (%v), want 0", len(all), err)
	}
}
