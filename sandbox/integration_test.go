package sandbox

// Integration tests against the real Docker Engine. They skip only when the
// daemon is unreachable; everything else (a missing base image included)
// fails.

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
)

// The toy repository of the test image: pytest this time.
var (
	pyRepo = map[string]string{
		"calc.py":      repoFiles["calc.py"],
		"test_calc.py": "from calc import add, mul\n\n\ndef test_mul():\n    assert mul(2, 3) == 6\n",
	}
	pyTestPatched = pyRepo["test_calc.py"] + "\n\ndef test_add():\n    assert add(2, 3) == 5\n"
	testCmd       = "python3 -m pytest -rA -p no:cacheprovider test_calc.py"
)

var (
	dockerOnce sync.Once
	dockerCli  *client.Client
	dockerErr  error
	imageOnce  sync.Once
	testImage  string
	imageErr   error
)

// TestMain checks, after every test, that no container this process made is
// left. It is scoped to this process's owner label: other runs may share the
// daemon (docker ps -a --filter label=swetui.managed=true shows theirs too).
func TestMain(m *testing.M) {
	code := m.Run()
	if dockerCli != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		list, err := dockerCli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
			filters.Arg("label", LabelManaged+"=true"), filters.Arg("label", LabelOwner+"="+ownerID()))})
		switch {
		case err != nil:
			fmt.Fprintln(os.Stderr, "leak check: list containers:", err)
			code = 1
		case len(list) > 0:
			fmt.Fprintf(os.Stderr, "leak check: %d swetui containers left behind:\n", len(list))
			for _, c := range list {
				fmt.Fprintf(os.Stderr, "  %s %s %v\n", short(c.ID), c.State, c.Labels)
				_ = dockerCli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
			}
			code = 1
		default:
			fmt.Fprintln(os.Stderr, "leak check: no swetui container left by this test process")
		}
		cancel()
	}
	os.Exit(code)
}

// realDocker returns a client of the local engine, skipping the test when it
// does not answer.
func realDocker(t testing.TB) *client.Client {
	t.Helper()
	dockerOnce.Do(func() { dockerCli, dockerErr = Connect(context.Background(), "") })
	if dockerErr != nil {
		t.Skipf("Docker Engine unreachable, integration test skipped: %v", dockerErr)
	}
	return dockerCli
}

// pyImage builds (once, cached by content) the test image: the pytest toy
// repository committed at /testbed, owned by the non-root user swetui.
func pyImage(t testing.TB) string {
	t.Helper()
	d := realDocker(t)
	imageOnce.Do(func() {
		files := map[string][]byte{"Dockerfile": []byte("FROM " + BaseImage + "\n" +
			"COPY repo/ /testbed/\n" +
			"RUN cd /testbed && git init -q && git add -A && " +
			"git -c user.email=t@example.com -c user.name=t commit -qm base && chown -R swetui:swetui /testbed\n" +
			"WORKDIR /testbed\n")}
		for n, b := range pyRepo {
			files["repo/"+n] = []byte(b)
		}
		h := sha256.New()
		for _, n := range sortedKeys(files) {
			fmt.Fprintf(h, "%s\x00%s\x00", n, files[n])
		}
		testImage = "swetui/sandbox-test:" + hex.EncodeToString(h.Sum(nil))[:12]
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		missing, err := Missing(ctx, d, []string{testImage, BaseImage})
		if err != nil {
			imageErr = err
			return
		}
		for _, m := range missing {
			if m == BaseImage {
				imageErr = fmt.Errorf("base image %s missing: run .ci/base-image.sh (make setup does)", BaseImage)
				return
			}
		}
		if len(missing) > 0 {
			imageErr = Build(ctx, d, testImage, TarContext(files), "", nil)
		}
	})
	if imageErr != nil {
		t.Fatalf("test image: %v", imageErr)
	}
	return testImage
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

var testRunID = "test-" + NewNonce()[:8]

func testRunner(t testing.TB) *Runner {
	return &Runner{Docker: realDocker(t), RunID: testRunID,
		Limits: Limits{MemoryMB: 512, CPUs: 1, PidsLimit: 128, LogCap: 256 << 10}}
}

// evalSpec is the harness-shaped evaluation of modelPatch on the test image.
func evalSpec(t testing.TB, modelPatch string) (Spec, string) {
	t.Helper()
	testPatch := diffOf(t, pyRepo, map[string]string{"test_calc.py": pyTestPatched})
	sc := EvalScript(ScriptSpec{
		Workdir: "/testbed", BaseCommit: "HEAD", TestFiles: []string{"test_calc.py"},
		TestPatchPath: TestPatchPath, ModelPatchPath: ModelPatchPath, TestCmd: testCmd,
	})
	return Spec{
		ID: "eval-" + NewNonce()[:8], InstanceID: "toy__calc-1", Image: pyImage(t), Workdir: "/testbed",
		Files:  map[string][]byte{ModelPatchPath: []byte(modelPatch), TestPatchPath: []byte(testPatch)},
		Script: sc.Prepare, Tests: sc.Tests, Nonce: sc.Nonce,
		Timeout: time.Minute,
	}, sc.Nonce
}

// shellSpec runs a plain script on the test image.
func shellSpec(t testing.TB, script string, timeout time.Duration) Spec {
	return Spec{ID: "sh-" + NewNonce()[:8], InstanceID: "shell", Image: pyImage(t), Script: script, Timeout: timeout}
}

func assertGone(t *testing.T, d *client.Client, id string) {
	t.Helper()
	if id == "" {
		t.Fatal("no container id in the result")
	}
	if _, err := d.ContainerInspect(context.Background(), id); !cerrdefs.IsNotFound(err) {
		t.Errorf("container %s still there (inspect error %v)", short(id), err)
	}
}

func TestRunHarness(t *testing.T) {
	d := realDocker(t)
	gold := diffOf(t, pyRepo, map[string]string{"calc.py": goldCalc})
	wrong := diffOf(t, pyRepo, map[string]string{"calc.py": strings.Replace(pyRepo["calc.py"], "a - b", "a - b + 1", 1)})
	tests := []struct {
		name      string
		patch     string
		user      string
		capAdd    []string // the repository belongs to swetui: root needs DAC_OVERRIDE to write it
		exit      int
		method    string
		complete  bool
		wantInLog []string
	}{
		{"passing tests as non-root", gold, "swetui", nil, 0, ApplyGit, true,
			[]string{"PASSED test_calc.py::test_add", "PASSED test_calc.py::test_mul"}},
		{"failing tests as root", wrong, "", []string{"DAC_OVERRIDE"}, 1, ApplyGit, true,
			[]string{"FAILED test_calc.py::test_add", "PASSED test_calc.py::test_mul"}},
		{"patch that does not apply", "--- a/calc.py\n+++ b/calc.py\n@@ -1,1 +1,1 @@\n-no such line\n+x\n", "swetui", nil,
			ExitPatchFailed, ApplyFailed, false, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec, nonce := evalSpec(t, tc.patch)
			spec.User = tc.user
			var streamed strings.Builder
			r := testRunner(t)
			r.Limits.CapAdd = tc.capAdd
			res := r.Run(context.Background(), spec, func(b []byte) { streamed.Write(b) })
			if res.Infra != nil || res.TimedOut || res.Canceled {
				t.Fatalf("infra %v timedout %v canceled %v\n%s", res.Infra, res.TimedOut, res.Canceled, res.Log)
			}
			if res.ExitCode != tc.exit {
				t.Errorf("exit %d, want %d\n%s", res.ExitCode, tc.exit, res.Log)
			}
			if streamed.String() != res.Log {
				t.Errorf("streamed log differs from the result's")
			}
			o := ParseOutput(res.Log, nonce)
			if o.ApplyMethod != tc.method || o.Complete != tc.complete {
				t.Errorf("parsed %+v, want method %s complete %v\n%s", o, tc.method, tc.complete, res.Log)
			}
			for _, w := range tc.wantInLog {
				if !strings.Contains(o.TestLog, w) {
					t.Errorf("test log lacks %q:\n%s", w, o.TestLog)
				}
			}
			assertGone(t, d, res.ContainerID)
			t.Logf("durations %+v", res.Durations)
		})
	}
}

// TestRunConfinement checks the limits inside a real container: no network
// but loopback, the memory and pids limits, the user, no capabilities, init
// as PID 1, a read-only root with the workdir and a size-limited /tmp
// writable, the labels.
func TestRunConfinement(t *testing.T) {
	d := realDocker(t)
	r := testRunner(t)
	r.Limits.TmpMB = 16
	spec := shellSpec(t, `ls /sys/class/net | tr '\n' ' '; echo
cat /sys/fs/cgroup/pids/pids.max /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/pids.max /sys/fs/cgroup/memory.max
id -un
grep -E '^Cap(Eff|Bnd):' /proc/self/status | tr -s '\t' ' '
tr '\0' ' ' < /proc/1/cmdline | cut -d' ' -f1
touch /usr/x /etc/x 2>&1 | sed 's/^touch: //'
touch /testbed/x /tmp/x && echo workdir and tmp writable
df -m /tmp | awk 'NR==2 {print "tmp", $2 " MiB"}'
`, 30*time.Second)
	spec.User, spec.Workdir = "swetui", "/testbed"
	var labels map[string]string
	hooks := runHooks{created: func(id string) {
		c, err := d.ContainerInspect(context.Background(), id)
		if err == nil {
			labels = c.Config.Labels
		}
	}}
	res := r.run(context.Background(), spec, nil, hooks)
	if res.Infra != nil || res.ExitCode != 0 {
		t.Fatalf("exit %d infra %v\n%s", res.ExitCode, res.Infra, res.Log)
	}
	want := fmt.Sprintf("lo \n128\n%d\nswetui\nCapEff: 0000000000000000\nCapBnd: 0000000000000000\n/sbin/docker-init\n"+
		"cannot touch '/usr/x': Read-only file system\ncannot touch '/etc/x': Read-only file system\n"+
		"workdir and tmp writable\ntmp 16 MiB\n", 512<<20)
	if res.Log != want {
		t.Errorf("inside the container:\n%q\nwant\n%q", res.Log, want)
	}
	if labels[LabelManaged] != "true" || labels[LabelRun] != testRunID || labels[LabelEval] != spec.ID || labels[LabelOwner] != ownerID() {
		t.Errorf("labels %v", labels)
	}
	assertGone(t, d, res.ContainerID)
}

func TestRunFaults(t *testing.T) {
	d := realDocker(t)
	tests := []struct {
		name    string
		script  string
		timeout time.Duration
		cancel  time.Duration // cancel the context after this long (0: never)
		logCap  int
		pids    int
		disk    int // Limits.DiskMB
		onLog   func([]byte)
		check   func(t *testing.T, res Result)
	}{
		{name: "timeout kills the container", script: "echo started; sleep 60", timeout: 2 * time.Second,
			check: func(t *testing.T, res Result) {
				if !res.TimedOut || res.Infra != nil || res.ExitCode != 137 {
					t.Errorf("timedout %v infra %v exit %d", res.TimedOut, res.Infra, res.ExitCode)
				}
				// From the deadline to the container's removal.
				if late := res.Durations.Run + res.Durations.Remove - 2*time.Second; late > 2*time.Second {
					t.Errorf("container gone %v after the deadline, want under 2s", late)
				} else {
					t.Logf("container gone %v after the deadline", late)
				}
				if res.Log != "started\n" {
					t.Errorf("log %q", res.Log)
				}
			}},
		{name: "cancellation kills the container", script: "sleep 60", timeout: time.Minute, cancel: 1500 * time.Millisecond,
			check: func(t *testing.T, res Result) {
				if !res.Canceled || res.TimedOut || res.Infra != nil {
					t.Errorf("canceled %v timedout %v infra %v", res.Canceled, res.TimedOut, res.Infra)
				}
				if res.Durations.Run > 4*time.Second {
					t.Errorf("ran %v after a cancel at 1.5s", res.Durations.Run)
				}
			}},
		{name: "output flood is capped and killed", script: "yes 'flood flood flood flood'", timeout: time.Minute, logCap: 64 << 10,
			check: func(t *testing.T, res Result) {
				if !res.Truncated || len(res.Log) != 64<<10 || res.ExitCode != 137 || res.TimedOut {
					t.Errorf("truncated %v log %d bytes exit %d timedout %v", res.Truncated, len(res.Log), res.ExitCode, res.TimedOut)
				}
				if res.Durations.Run > 10*time.Second {
					t.Errorf("flood ran %v", res.Durations.Run)
				}
			}},
		// The main shell forks once for a fifo, starts the bomb, then only
		// uses builtins: it must survive and see the pids limit hold.
		{name: "fork bomb is contained by the pids limit", timeout: 30 * time.Second, pids: 64,
			script: `mkfifo /tmp/f && exec 3<>/tmp/f
bomb() { bomb | bomb & }; bomb
read -t 3 -u 3
read -r cur < /sys/fs/cgroup/pids/pids.current || read -r cur < /sys/fs/cgroup/pids.current
read -r _ hits < /sys/fs/cgroup/pids/pids.events || read -r _ hits < /sys/fs/cgroup/pids.events
echo "survived pids.current=$cur refused=$hits"`,
			check: func(t *testing.T, res Result) {
				if res.Infra != nil || res.TimedOut || res.ExitCode != 0 {
					t.Errorf("exit %d infra %v timedout %v", res.ExitCode, res.Infra, res.TimedOut)
				}
				var cur, refused int
				i := strings.LastIndex(res.Log, "survived pids.current=")
				if i < 0 {
					t.Fatalf("the main shell did not survive:\n%.1000s", res.Log)
				}
				fmt.Sscanf(res.Log[i:], "survived pids.current=%d refused=%d", &cur, &refused)
				t.Logf("pids in the container at the end: %d (limit 64); forks refused at the limit: %d", cur, refused)
				if cur > 64 || refused == 0 {
					t.Errorf("pids.current %d, forks refused %d: want the bomb held at the limit of 64", cur, refused)
				}
			}},
		{name: "writing past the disk bound kills the container", script: "for i in 1 2 3 4 5 6; do head -c 12m /dev/zero > /swetui/f$i; done; sleep 30",
			timeout: time.Minute, disk: 40,
			check: func(t *testing.T, res Result) {
				if !res.DiskLimit || res.Infra != nil || res.TimedOut || !strings.Contains(res.Log, "disk limit") {
					t.Errorf("disk limit %v infra %v timedout %v log %q", res.DiskLimit, res.Infra, res.TimedOut, res.Log)
				}
				if res.Durations.Run > 10*time.Second {
					t.Errorf("killed after %v", res.Durations.Run)
				}
			}},
		{name: "no file grows past the disk bound", script: "head -c 50m /dev/zero > /swetui/big; echo status $?; ls -l /swetui/big | cut -d' ' -f5",
			timeout: time.Minute, disk: 40,
			check: func(t *testing.T, res Result) {
				if !strings.Contains(res.Log, "status 153") || !strings.Contains(res.Log, "\n41943040\n") {
					t.Errorf("log %q: want head killed by SIGXFSZ (153) at 40 MiB", res.Log)
				}
			}},
		{name: "panicking log consumer still removes the container", script: "echo hi; sleep 30", timeout: time.Minute,
			onLog: func([]byte) { panic("consumer bug") },
			check: func(t *testing.T, res Result) {
				if res.Infra == nil || !strings.Contains(res.Infra.Error(), "consumer bug") || retryable(res.Infra) {
					t.Errorf("infra %v", res.Infra)
				}
				if res.Durations.Run > 10*time.Second {
					t.Errorf("ran %v after the panic", res.Durations.Run)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := testRunner(t)
			if tc.logCap > 0 {
				r.Limits.LogCap = tc.logCap
			}
			if tc.pids > 0 {
				r.Limits.PidsLimit = tc.pids
			}
			if tc.disk > 0 {
				r.Limits.DiskMB = tc.disk
				old := DiskEvery
				DiskEvery = 300 * time.Millisecond
				defer func() { DiskEvery = old }()
			}
			ctx := context.Background()
			if tc.cancel > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				time.AfterFunc(tc.cancel, cancel)
			}
			res := r.Run(ctx, shellSpec(t, tc.script, tc.timeout), tc.onLog)
			tc.check(t, res)
			assertGone(t, d, res.ContainerID)
		})
	}
}

// TestRunOutlivesAPITimeout: the attach stream and the wait outlive the
// bound on the quick API calls.
func TestRunOutlivesAPITimeout(t *testing.T) {
	old := apiTimeout
	apiTimeout = time.Second
	defer func() { apiTimeout = old }()
	res := testRunner(t).Run(context.Background(), shellSpec(t, "echo a; sleep 2; echo b; exit 4", 30*time.Second), nil)
	if res.Infra != nil || res.ExitCode != 4 || res.Log != "a\nb\n" {
		t.Errorf("exit %d infra %v log %q", res.ExitCode, res.Infra, res.Log)
	}
}

func TestRunMissingImage(t *testing.T) {
	r := testRunner(t)
	spec := Spec{ID: "missing", Image: "swetui/no-such-image:none", Script: "true", Timeout: time.Minute}
	res := r.Run(context.Background(), spec, nil)
	if !errors.Is(res.Infra, ErrImageMissing) || retryable(res.Infra) {
		t.Fatalf("infra %v, want ErrImageMissing", res.Infra)
	}
	for _, want := range []string{"swetui/no-such-image:none", "swetui prepare"} {
		if !strings.Contains(res.Infra.Error(), want) {
			t.Errorf("message lacks %q: %v", want, res.Infra)
		}
	}
}

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
		if !rec.said(text) {
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
