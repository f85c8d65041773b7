package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
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
			filters.Arg("label", LabelManaged+"=true"), filters.Arg("label", LabelOwner+"="+OwnerID()))})
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
	if labels[LabelManaged] != "true" || labels[LabelRun] != testRunID || labels[LabelEval] != spec.ID || labels[LabelOwner] != OwnerID() {
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
// bound on the quick API calls. The bound is 3 s, not less: on a loaded
// 2-core box a quick call (the copy into the container) took over 1 s.
func TestRunOutlivesAPITimeout(t *testing.T) {
	old := apiTimeout
	apiTimeout = 3 * time.Second
	defer func() { apiTimeout = old }()
	res := testRunner(t).Run(context.Background(), shellSpec(t, "echo a; sleep 5; echo b; exit 4", 30*time.Second), nil)
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
