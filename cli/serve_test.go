package cli

// `swetui serve` against the real Docker Engine, through the Python client
// (standard library only) as other trainers use it: the embedded suite's
// gold patches, 64 requests at once against a queue of 16, the hostile
// patches of reward's integrity tests (rewarded as `swetui score` rewards
// them), promtool on /metrics, and a server killed with -9 mid-batch whose
// containers the next start removes. Without Docker they skip, except
// under CI=true.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/swetui/swetui/app"
	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/sandbox"
	"github.com/swetui/swetui/serve"
	"github.com/swetui/swetui/serve/servetest"
	"github.com/swetui/swetui/task"
)

// serveDocker connects to the local engine, skipping without one (failing
// under CI=true) or with -short.
func serveDocker(t *testing.T) *client.Client {
	t.Helper()
	if testing.Short() {
		t.Skip("runs containers")
	}
	return realReposDocker(context.Background(), t)
}

// servedCLI is `swetui serve --headless` running in this process.
type servedCLI struct {
	url    string
	runID  string
	stdout *syncBuffer
	stop   func() error // cancels it as SIGINT does and returns serveRun's error
}

// startServe runs `swetui serve --headless args...` on a loopback port
// until the test ends (or stop), and waits until it answers.
func startServe(t testing.TB, args ...string) *servedCLI {
	t.Helper()
	defaults, err := os.ReadFile("../config.toml")
	if err != nil {
		t.Fatal(err)
	}
	out := &syncBuffer{}
	env := Env{Stdout: out, Stderr: out, Stdin: strings.NewReader(""), DefaultConfig: defaults}
	runID := "serve-test-" + sandbox.NewNonce()[:8]
	o, err := newServeOptions(env, append([]string{"--headless", "run.name=" + runID}, args...))
	if err != nil {
		t.Fatal(err)
	}
	if o.listener, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serveRun(ctx, env, o) }()
	var once sync.Once
	var runErr error
	s := &servedCLI{url: "http://" + o.listener.Addr().String(), runID: runID, stdout: out, stop: func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(2 * time.Minute):
				runErr = errors.New("serve did not stop within 2 minutes")
			}
		})
		return runErr
	}}
	t.Cleanup(func() {
		if err := s.stop(); err != nil {
			t.Errorf("serve: %v\n%s", err, out)
		}
	})
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if resp, err := http.Get(s.url + "/healthz"); err == nil {
			resp.Body.Close()
			return s
		}
		select {
		case err := <-done:
			t.Fatalf("serve ended before answering: %v\n%s", err, out)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not answer in 2 minutes:\n%s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func getBody(t *testing.T, url string) []byte {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %v\n%s", url, resp.StatusCode, err, b)
	}
	return b
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// runContainers lists the containers of run runID on d.
func runContainers(t *testing.T, d *client.Client, runID string) []container.Summary {
	t.Helper()
	list, err := d.ContainerList(context.Background(), container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", sandbox.LabelRun+"="+runID))})
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// TestServeRefusals: what `swetui serve` refuses before it loads anything
// or listens.
func TestServeRefusals(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(serve.TokenEnv, "")
	for _, tt := range []struct {
		args []string
		says string
	}{
		{[]string{"--addr", "0.0.0.0:8765"}, "bearer token is required"},
		{[]string{"--addr", ":8765"}, "bearer token is required"},
		{[]string{"serve.addr=10.1.2.3:80"}, "bearer token is required"},
		{[]string{"--addr", "8765"}, "want host:port"},
		{[]string{"serve.addr=nowhere"}, "serve.addr"},
		{[]string{"--token-file", empty}, "holds no token"},
		{[]string{"serve.queue=-1"}, "serve.queue"},
	} {
		code, _, stderr := runCLI(t, append([]string{"serve", "--headless"}, tt.args...)...)
		if code != ExitUsage || !strings.Contains(stderr, tt.says) {
			t.Errorf("serve %v: exit %d, stderr %q; want %d saying %q", tt.args, code, stderr, ExitUsage, tt.says)
		}
	}
}

// TestServeGoldThroughPythonClient: the Python client sends 64 requests
// at once to a server with a queue of 16, a patch each: the gold patches
// of the embedded suite (data.mini_tasks = 32) and as many empty ones.
// None is lost (the 429s are retried), every gold patch comes back
// resolved and every empty one scores 0; promtool accepts /metrics; the
// stop leaves no container.
func TestServeGoldThroughPythonClient(t *testing.T) {
	d := serveDocker(t)
	cfg := config.Default()
	cfg.Data.MiniTasks, cfg.Data.Split = 32, task.SplitAll
	insts, err := task.Load(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var preds bytes.Buffer
	for _, in := range insts {
		for _, patch := range []string{in.Patch, ""} {
			line, _ := json.Marshal(app.Prediction{InstanceID: in.InstanceID, Model: "gold or empty", Patch: &patch})
			preds.Write(append(line, '\n'))
		}
	}
	dir := t.TempDir()
	in, out := filepath.Join(dir, "predictions.jsonl"), filepath.Join(dir, "results.jsonl")
	if err := os.WriteFile(in, preds.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	// Four workers: on two cores, containers starting overlap others' tests.
	srv := startServe(t, "data.mini_tasks=32", "serve.queue=16", "sandbox.workers=4")
	start := time.Now()
	summary := servetest.PythonClient(t, srv.url, "predictions", in, "--phase", "docker", "--concurrency", "64", "--out", out)
	t.Logf("64 requests through the server in %.1fs", time.Since(start).Seconds())
	results := servetest.ReadResults(t, out)
	if len(results) != 64 {
		t.Fatalf("%d results, want 64", len(results))
	}
	for i, r := range results {
		gold := i%2 == 0
		v := r.Verdict
		if r.Error != "" || r.InstanceID != insts[i/2].InstanceID || v.Resolved != gold || v.SyntaxOK != gold || v.Reward != b2f(gold) {
			t.Errorf("%s (gold %v): resolved %v reward %v error %q infra %q", r.InstanceID, gold, v.Resolved, v.Reward, r.Error, v.InfraCause)
		}
	}
	if !strings.Contains(summary, `"429"`) {
		t.Errorf("no request was refused: the queue of 16 was never full\n%s", summary)
	}
	metrics := getBody(t, srv.url+"/metrics")
	for _, want := range []string{`swetui_serve_evaluations_total{outcome="resolved",phase="docker"} 32`,
		`swetui_serve_evaluations_total{outcome="invalid",phase="docker"} 32`,
		"swetui_serve_docker_hosts_up 1", `swetui_serve_rejected_total{reason="queue_full"}`} {
		if !bytes.Contains(metrics, []byte(want)) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	servetest.Promtool(t, metrics)
	if err := srv.stop(); err != nil {
		t.Fatalf("stop: %v\n%s", err, srv.stdout)
	}
	if left := runContainers(t, d, srv.runID); len(left) > 0 {
		t.Errorf("%d containers of %s left after the stop", len(left), srv.runID)
	}
}

// hostileFixture has reward's TestHostileFixture write the integrity
// tests' hostile cases as a dataset, predictions and repository (building
// their image): the very cases of reward/hostile_docker_test.go.
func hostileFixture(t *testing.T) string {
	t.Helper()
	goTool := servetest.NeedTool(t, "go", "golang")
	dir := t.TempDir()
	cmd := exec.Command(goTool, "test", "-count=1", "-run", "^TestHostileFixture$", "./reward")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "SWETUI_HOSTILE_FIXTURE="+dir)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("reward's TestHostileFixture: %v\n%s", err, b)
	}
	return dir
}

// TestServeHostilePatchesAsScore: the integrity tests' hostile patches,
// sent through the Python client, earn exactly what `swetui score` gives
// them (nothing), flag for flag.
func TestServeHostilePatchesAsScore(t *testing.T) {
	serveDocker(t)
	fx := hostileFixture(t)
	ds, preds := filepath.Join(fx, "dataset.jsonl"), filepath.Join(fx, "predictions.jsonl")
	// The image's repository belongs to swetui, who runs the tests.
	args := []string{"--dataset", ds, "reward.repos_dir=" + filepath.Join(fx, "repos"), "sandbox.user=swetui"}
	report := filepath.Join(fx, "report.json")
	if code, stdout, stderr := runCLI(t, append([]string{"score", "--predictions", preds, "--phase", "docker", "--out", report}, args...)...); code != ExitOK {
		t.Fatalf("score: exit %d\n%s%s", code, stdout, stderr)
	}
	want := map[string]event.Verdict{}
	for _, e := range readScoreReport(t, report).Instances {
		want[e.InstanceID] = *e.Verdict
	}
	srv := startServe(t, args...)
	out := filepath.Join(fx, "results.jsonl")
	servetest.PythonClient(t, srv.url, "predictions", preds, "--phase", "docker", "--concurrency", "4", "--out", out)
	var cases []struct {
		InstanceID string `json:"instance_id"`
		Name       string `json:"name"`
	}
	data, err := os.ReadFile(filepath.Join(fx, "cases.json"))
	if err != nil || json.Unmarshal(data, &cases) != nil {
		t.Fatalf("cases.json: %v", err)
	}
	name := map[string]string{}
	for _, c := range cases {
		name[c.InstanceID] = c.Name
	}
	bonus := config.Default().Reward.ApplyBonus
	results := servetest.ReadResults(t, out)
	if len(results) != len(cases) || len(cases) == 0 {
		t.Fatalf("%d results for %d cases", len(results), len(cases))
	}
	for _, r := range results {
		got, w := r.Verdict, want[r.InstanceID]
		t.Logf("%s: reward %.2f resolved %v flags %v undone %v", name[r.InstanceID], got.Reward, got.Resolved, got.Hacks, got.HacksUndone)
		switch {
		case r.Error != "" || got.Infra || w.Infra:
			t.Errorf("%s: error %q infra %q (score: %q)", name[r.InstanceID], r.Error, got.InfraCause, w.InfraCause)
		case got.Reward != w.Reward || got.Resolved != w.Resolved || got.Applied != w.Applied || got.F2PPassed != w.F2PPassed ||
			fmt.Sprint(got.Hacks) != fmt.Sprint(w.Hacks) || fmt.Sprint(got.HacksUndone) != fmt.Sprint(w.HacksUndone):
			t.Errorf("%s: served reward %.3f resolved %v f2p %d flags %v %v; swetui score: %.3f %v %d %v %v", name[r.InstanceID],
				got.Reward, got.Resolved, got.F2PPassed, got.Hacks, got.HacksUndone, w.Reward, w.Resolved, w.F2PPassed, w.Hacks, w.HacksUndone)
		case got.Reward > bonus || got.Resolved:
			t.Errorf("%s: reward %.3f resolved %v: more than the apply bonus", name[r.InstanceID], got.Reward, got.Resolved)
		}
	}
}

// slowPatch is a patch of an embedded task whose module sleeps for two
// minutes on import: its evaluation's container lives while the test
// kills the server.
func slowPatch(t *testing.T, cfg config.Config, salt int) (string, string) {
	t.Helper()
	repos, err := task.MaterializeMini(context.Background(), task.DefaultCacheDir(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	insts, err := task.Load(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	in := insts[0]
	path := task.PatchFiles(in.Patch)[0].Path()
	old, err := task.RepoFile(repos[in.InstanceID], path)
	if err != nil {
		t.Fatal(err)
	}
	return in.InstanceID, task.UnifiedDiff(path, old, fmt.Sprintf("import time\ntime.sleep(120)  # %d\n", salt)+old)
}

// serveHelperEnv carries the arguments of `swetui serve` to
// TestServeHelperProcess in a child process.
const serveHelperEnv = "SWETUI_SERVE_HELPER_ARGS"

// TestServeHelperProcess is `swetui serve` in a child process of the kill
// test (this test binary, run again): it does nothing in a normal run.
func TestServeHelperProcess(t *testing.T) {
	raw := os.Getenv(serveHelperEnv)
	if raw == "" {
		t.Skip("the kill -9 test's child process")
	}
	var args []string
	if err := json.Unmarshal([]byte(raw), &args); err != nil {
		t.Fatal(err)
	}
	defaults, err := os.ReadFile("../config.toml")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := Main(ctx, Env{Stdout: os.Stdout, Stderr: os.Stderr, Stdin: strings.NewReader(""), DefaultConfig: defaults}, args)
	stop()
	os.Exit(code)
}

var (
	listeningRe = regexp.MustCompile(`listening on (http://\S+) \(run ([^,]+),`)
	reapedRe    = regexp.MustCompile(`reaped (\d+) containers`)
)

// serveProcess is `swetui serve` in a child process.
type serveProcess struct {
	cmd    *exec.Cmd
	url    string
	run    string
	reaped int
	out    *syncBuffer
}

func startServeProcess(t *testing.T, args ...string) *serveProcess {
	t.Helper()
	raw, err := json.Marshal(append([]string{"serve", "--headless", "--addr", "127.0.0.1:0"}, args...))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestServeHelperProcess$")
	cmd.Env = append(os.Environ(), serveHelperEnv+"="+string(raw))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &serveProcess{cmd: cmd, out: &syncBuffer{}}
	cmd.Stderr = p.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.out.Write([]byte(sc.Text() + "\n"))
			if m := listeningRe.FindStringSubmatch(sc.Text()); m != nil {
				lines <- sc.Text()
			}
		}
		close(lines)
	}()
	select {
	case line, ok := <-lines:
		if !ok {
			t.Fatalf("serve exited before listening:\n%s", p.out)
		}
		m := listeningRe.FindStringSubmatch(line)
		p.url, p.run = m[1], m[2]
		if r := reapedRe.FindStringSubmatch(line); r != nil {
			p.reaped, _ = strconv.Atoi(r[1])
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("serve did not listen within 2 minutes:\n%s", p.out)
	}
	return p
}

// TestServeKilledMidBatch: a server killed with -9 while its evaluations
// run leaves their containers behind; the next server's start removes
// them before it listens, and its own graceful stop (SIGTERM) leaves none.
func TestServeKilledMidBatch(t *testing.T) {
	d := serveDocker(t)
	cfg := config.Default()
	cfg.Data.MiniTasks, cfg.Data.Split = 2, task.SplitAll
	id, p1 := slowPatch(t, cfg, 1)
	_, p2 := slowPatch(t, cfg, 2)
	first := startServeProcess(t, "data.mini_tasks=2")
	body, _ := json.Marshal(map[string]any{"instance_id": id, "patches": []string{p1, p2}, "phase": "docker"})
	go func() { // cut off by the kill
		if resp, err := http.Post(first.url+"/v1/score", "application/json", bytes.NewReader(body)); err == nil {
			resp.Body.Close()
		}
	}()
	deadline := time.Now().Add(2 * time.Minute)
	for running := 0; running < 2; {
		running = 0
		for _, c := range runContainers(t, d, first.run) {
			if c.State == "running" {
				running++
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the batch's containers never ran:\n%s", first.out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	first.cmd.Wait()
	left := runContainers(t, d, first.run)
	if len(left) == 0 {
		t.Fatal("kill -9 left no container: nothing for the next start to remove")
	}
	t.Logf("kill -9 left %d containers of %s", len(left), first.run)

	second := startServeProcess(t, "data.mini_tasks=2")
	if n := len(runContainers(t, d, first.run)); n > 0 {
		t.Errorf("%d containers of the killed server are still there when the next one listens:\n%s", n, second.out)
	}
	t.Logf("the next start reaped %d containers", second.reaped)
	// The next server scores; then SIGTERM stops it cleanly.
	resp, err := http.Post(second.url+"/v1/score", "application/json", strings.NewReader(`{"instance_id": "`+id+`", "patch": "", "phase": "syntax"}`))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("the next server: %v %v", resp, err)
	}
	resp.Body.Close()
	if err := second.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := second.cmd.Wait(); err != nil {
		t.Errorf("SIGTERM: %v\n%s", err, second.out)
	}
	if !strings.Contains(second.out.String(), "stopped; the containers of run") {
		t.Errorf("no stop line:\n%s", second.out)
	}
	if n := len(runContainers(t, d, second.run)); n > 0 {
		t.Errorf("%d containers of the stopped server left", n)
	}
}
