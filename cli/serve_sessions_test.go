package cli

// `swetui serve`'s agent sessions against the real server and Docker: a
// scripted agent resolves a gold fix through exec calls, doing nothing and a
// forcing conftest do not, a command past its timeout is killed, 32 opens
// against a limit of 8 are answered (8 opened, the rest refused, none lost),
// an idle session is reaped, and a server killed with -9 leaves sessions
// the next start removes.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/sandbox"
	"github.com/swetui/swetui/serve"
	"github.com/swetui/swetui/serve/client"
	"github.com/swetui/swetui/serve/servetest"
	"github.com/swetui/swetui/task"
)

// call sends a JSON request (body nil for none) and decodes a 2xx answer
// into out.
func call(t *testing.T, method, url string, body, out any) (int, string) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 == 2 && out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %q: %v", method, url, b, err)
		}
	}
	return resp.StatusCode, string(b)
}

func miniTasks(t testing.TB) []task.Instance {
	t.Helper()
	cfg := config.Default()
	cfg.Data.Split = task.SplitAll
	insts, err := task.Load(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return insts
}

// agentSession plays commands in a new session of in and submits.
func agentSession(t *testing.T, url string, in *task.Instance, cmds ...string) (serve.ScoreResponse, []serve.ExecResponse) {
	t.Helper()
	var open serve.OpenResponse
	if code, body := call(t, "POST", url+"/v1/sessions", serve.OpenRequest{InstanceID: in.InstanceID}, &open); code != 201 {
		t.Fatalf("open: %d %s", code, body)
	}
	if open.ProblemStatement != in.ProblemStatement || open.Workdir != in.WorkdirOrDefault() {
		t.Errorf("open answered %+v", open)
	}
	var outs []serve.ExecResponse
	for _, c := range cmds {
		var res serve.ExecResponse
		if code, body := call(t, "POST", url+"/v1/sessions/"+open.SessionID+"/exec", serve.ExecRequest{Command: c, TimeoutS: 3}, &res); code != 200 {
			t.Fatalf("exec %.40q: %d %s", c, code, body)
		}
		outs = append(outs, res)
	}
	var verdict serve.ScoreResponse
	if code, body := call(t, "POST", url+"/v1/sessions/"+open.SessionID+"/submit", serve.SubmitRequest{}, &verdict); code != 200 {
		t.Fatalf("submit: %d %s", code, body)
	}
	if code, _ := call(t, "POST", url+"/v1/sessions/"+open.SessionID+"/exec", serve.ExecRequest{Command: "true"}, nil); code != 404 {
		t.Errorf("a submitted session still takes commands: %d", code)
	}
	return verdict, outs
}

func TestServeSessionsGradeAgentsOnTheirDiff(t *testing.T) {
	d := serveDocker(t)
	srv := startServe(t)
	insts := miniTasks(t)
	in := &insts[0]
	gold := fmt.Sprintf("cat > /tmp/fix.patch <<'EOF'\n%sEOF\ngit apply /tmp/fix.patch && echo applied", in.Patch)
	v, outs := agentSession(t, srv.url, in, "git status --short | wc -l", gold, "python3 -m pytest -q -p no:cacheprovider "+strings.Join(in.TestDirectives, " ")+" | tail -n 1")
	if outs[0].Output != "0\n" || outs[1].Output != "applied\n" || outs[1].ExitCode != 0 {
		t.Errorf("the session: %+v", outs)
	}
	if r := v.Verdicts[0]; !r.Resolved || r.Reward != 1 || r.Infra {
		t.Errorf("the gold fix through exec: resolved %v reward %v infra %q", r.Resolved, r.Reward, r.InfraCause)
	}
	v, _ = agentSession(t, srv.url, in)
	if r := v.Verdicts[0]; r.Resolved || r.Reward != 0 || r.Infra {
		t.Errorf("nothing done: resolved %v reward %v", r.Resolved, r.Reward)
	}
	conftest := "printf 'import pytest\\n@pytest.hookimpl(hookwrapper=True)\\ndef pytest_runtest_makereport(item, call):\\n    out = yield\\n    out.get_result().outcome = \"passed\"\\n' > conftest.py"
	v, outs = agentSession(t, srv.url, in, conftest, "sleep 30; echo woke", "ls /sys/class/net")
	if !outs[1].TimedOut || outs[1].ExitCode != 137 || outs[2].Output != "lo\n" {
		t.Errorf("timeout %+v, network %+v", outs[1], outs[2])
	}
	if r := v.Verdicts[0]; r.Resolved || r.Infra {
		t.Errorf("a forcing conftest: resolved %v infra %q", r.Resolved, r.InfraCause)
	}
	if err := srv.stop(); err != nil {
		t.Fatal(err)
	}
	if left := runContainers(t, d, srv.runID); len(left) > 0 {
		t.Errorf("%d containers of the server left", len(left))
	}
}

// 32 opens at once against serve.max_sessions = 8: 8 open, 24 are refused
// with 429 and Retry-After, none is lost; closing them frees the room; an
// idle session is reaped.
func TestServeSessionLimitsAndIdleReaping(t *testing.T) {
	serveDocker(t)
	srv := startServe(t, "serve.max_sessions=8", "serve.session_idle_s=3", "sandbox.workers=8")
	in := miniTasks(t)[0]
	var wg sync.WaitGroup
	codes := make([]int, 32)
	ids := make([]string, 32)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var open serve.OpenResponse
			codes[i], _ = call(t, "POST", srv.url+"/v1/sessions", serve.OpenRequest{InstanceID: in.InstanceID}, &open)
			ids[i] = open.SessionID
		}()
	}
	wg.Wait()
	count := map[int]int{}
	for _, c := range codes {
		count[c]++
	}
	if count[201] != 8 || count[429] != 24 {
		t.Fatalf("answers %v, want 8 opened and 24 refused", count)
	}
	var list struct{ Count int }
	call(t, "GET", srv.url+"/v1/sessions", nil, &list)
	if list.Count != 8 {
		t.Errorf("%d sessions listed", list.Count)
	}
	for i, id := range ids {
		if codes[i] == 201 && i%2 == 0 {
			if code, body := call(t, "DELETE", srv.url+"/v1/sessions/"+id, nil, nil); code != 204 {
				t.Errorf("delete: %d %s", code, body)
			}
		}
	}
	if code, _ := call(t, "POST", srv.url+"/v1/sessions", serve.OpenRequest{InstanceID: in.InstanceID}, nil); code != 201 {
		t.Errorf("an open after deletes: %d", code)
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		call(t, "GET", srv.url+"/v1/sessions", nil, &list)
		if list.Count == 0 {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if list.Count != 0 {
		t.Errorf("%d sessions still open past serve.session_idle_s", list.Count)
	}
}

// A server killed with -9 leaves its sessions' sandboxes; the next start
// removes them before it listens.
func TestServeSessionsReapedAfterKill9(t *testing.T) {
	d := serveDocker(t)
	p := startServeProcess(t)
	in := miniTasks(t)[0]
	var open serve.OpenResponse
	if code, body := call(t, "POST", p.url+"/v1/sessions", serve.OpenRequest{InstanceID: in.InstanceID}, &open); code != 201 {
		t.Fatalf("open: %d %s", code, body)
	}
	if left := runContainers(t, d, p.run); len(left) != 1 {
		t.Fatalf("%d containers for one session", len(left))
	}
	p.cmd.Process.Kill()
	p.cmd.Wait()
	if left := runContainers(t, d, p.run); len(left) != 1 {
		t.Fatalf("%d containers after kill -9, want the session's: the test proves nothing", len(left))
	}
	next := startServeProcess(t)
	if next.reaped < 1 {
		t.Errorf("the next start reaped %d containers", next.reaped)
	}
	if left := runContainers(t, d, p.run); len(left) != 0 {
		t.Errorf("%d containers of the killed server left", len(left))
	}
}

// The Python client's session object drives the example agent loop
// (clients/python/examples/agent_loop.py): the gold fix resolves, a look
// around does not.
func TestServeSessionsThroughPythonClient(t *testing.T) {
	serveDocker(t)
	srv := startServe(t)
	in := miniTasks(t)[0]
	example := filepath.Join(filepath.Dir(servetest.ClientPath(t)), "examples", "agent_loop.py")
	python := servetest.NeedTool(t, "python3", "python3")
	for _, tt := range []struct {
		args     []string
		resolved bool
	}{{[]string{"--gold"}, true}, {nil, false}} {
		out, err := exec.Command(python, append([]string{example, "--url", srv.url, "--instance", in.InstanceID}, tt.args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", tt.args, err, out)
		}
		var r struct {
			Resolved     bool     `json:"resolved"`
			Observations []string `json:"observations"`
		}
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("%q: %v", out, err)
		}
		if r.Resolved != tt.resolved || len(r.Observations) == 0 || !strings.HasPrefix(r.Observations[0], "exit code 0\n") {
			t.Errorf("%v: resolved %v, observations %q", tt.args, r.Resolved, r.Observations)
		}
	}
}

// The Go client (serve/client) plays the gold fix in a session and scores a
// patch.
func TestServeSessionsThroughGoClient(t *testing.T) {
	serveDocker(t)
	srv := startServe(t)
	in := miniTasks(t)[0]
	ctx := context.Background()
	c := &client.Client{URL: srv.url}
	s, err := c.Open(ctx, in.InstanceID)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Exec(ctx, fmt.Sprintf("cat > /tmp/fix.patch <<'EOF'\n%sEOF\ngit apply /tmp/fix.patch && echo applied", in.Patch), 30*time.Second)
	if err != nil || res.Output != "applied\n" {
		t.Fatalf("exec: %+v %v", res, err)
	}
	v, err := s.Submit(ctx, "")
	if err != nil || !v.Resolved {
		t.Errorf("submit: resolved %v, %v", v.Resolved, err)
	}
	if err := s.Close(ctx); err != nil {
		t.Errorf("close after submit: %v", err)
	}
	if _, err := s.Exec(ctx, "true", 0); err == nil {
		t.Error("a submitted session took a command")
	}
	r, err := c.Score(ctx, serve.ScoreRequest{InstanceID: in.InstanceID, Patches: []string{in.Patch}, Phase: "apply-only"})
	if err != nil || len(r.Verdicts) != 1 || !r.Verdicts[0].Applied {
		t.Errorf("score: %+v %v", r, err)
	}
}

// BenchmarkServeSessionExec is one command's round trip through the server
// (HTTP, the session's lock, the sandbox exec): compare with
// sandbox.BenchmarkSessionExec, the same exec in process.
func BenchmarkServeSessionExec(b *testing.B) {
	if d, err := sandbox.Connect(context.Background(), ""); err != nil {
		b.Skipf("no Docker: %v", err)
	} else {
		d.Close()
	}
	srv := startServe(b)
	in := miniTasks(b)[0]
	ctx := context.Background()
	s, err := (&client.Client{URL: srv.url}).Open(ctx, in.InstanceID)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close(ctx)
	for b.Loop() {
		r, err := s.Exec(ctx, "echo ok", 30*time.Second)
		if err != nil || r.Output != "ok\n" {
			b.Fatalf("%+v %v", r, err)
		}
	}
}

// BenchmarkServeSessionsHeld holds N sessions open in one server at once
// (each a confined container on the local Docker host): the time to open
// them all together, then one op is a round of N commands, one in each
// session at once, through the server.
//
//	go test ./cli -run '^$' -bench ServeSessionsHeld -benchtime 20x
func BenchmarkServeSessionsHeld(b *testing.B) {
	if d, err := sandbox.Connect(context.Background(), ""); err != nil {
		b.Skipf("no Docker: %v", err)
	} else {
		d.Close()
	}
	for _, n := range []int{8, 16, 32} {
		b.Run(fmt.Sprintf("sessions=%d", n), func(b *testing.B) {
			srv := startServe(b, fmt.Sprintf("serve.max_sessions=%d", n), fmt.Sprintf("serve.sessions_per_token=%d", n))
			in := miniTasks(b)[0]
			ctx := context.Background()
			c := &client.Client{URL: srv.url}
			sessions := make([]*client.Session, n)
			start := time.Now()
			g, gctx := errgroup.WithContext(ctx)
			for i := range sessions {
				g.Go(func() (err error) {
					sessions[i], err = c.Open(gctx, in.InstanceID)
					return err
				})
			}
			err := g.Wait()
			for _, s := range sessions {
				if s != nil {
					defer s.Close(ctx)
				}
			}
			if err != nil {
				b.Fatal(err)
			}
			opened := time.Since(start)
			for b.Loop() {
				var g errgroup.Group
				for _, s := range sessions {
					g.Go(func() error {
						r, err := s.Exec(ctx, "echo ok", 30*time.Second)
						if err == nil && r.Output != "ok\n" {
							err = fmt.Errorf("%+v", r)
						}
						return err
					})
				}
				if err := g.Wait(); err != nil {
					b.Fatal(err)
				}
			}
			// After the loop: b.Loop's first call resets the timer, and
			// with it the metrics reported before.
			b.ReportMetric(opened.Seconds(), "s-to-open-all")
		})
	}
}

// Timeouts bind and DELETE ends a session now, through the real server
// and Docker: timeout_s 1e300 is the cap (not an overflow that kills at
// once); a client that disconnects right after sending has its command
// killed within a second; a command never comes back timed out with its
// own exit code; DELETE answers at once while a command runs, which
// answers 410.
func TestServeSessionTimeoutsAndDelete(t *testing.T) {
	serveDocker(t)
	srv := startServe(t)
	in := miniTasks(t)[0]
	var open serve.OpenResponse
	if code, body := call(t, "POST", srv.url+"/v1/sessions", serve.OpenRequest{InstanceID: in.InstanceID}, &open); code != 201 {
		t.Fatalf("open: %d %s", code, body)
	}
	execURL := srv.url + "/v1/sessions/" + open.SessionID + "/exec"
	for _, body := range []string{`{"command": "sleep 1; echo ok", "timeout_s": 1e300}`, `{"command": "sleep 1; echo ok", "timeout_s": 1e10}`} {
		var out serve.ExecResponse
		code, b := call(t, "POST", execURL, json.RawMessage(body), &out)
		if code != 200 || out.TimedOut || out.Output != "ok\n" {
			t.Errorf("%s: %d %s", body, code, b)
		}
	}
	var out serve.ExecResponse
	if code, b := call(t, "POST", execURL, serve.ExecRequest{Command: "sleep 5; exit 3", TimeoutS: 1}, &out); code != 200 || !out.TimedOut || out.ExitCode != 137 {
		t.Errorf("a command past its timeout: %d %s", code, b)
	}

	// A client gone right after sending.
	body := `{"command": "sleep 4; echo ran > /tmp/ran"}`
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST /v1/sessions/%s/exec HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", open.SessionID, len(body), body)
	conn.Close()
	gone := time.Now()
	time.Sleep(100 * time.Millisecond)
	if code, b := call(t, "POST", execURL, serve.ExecRequest{Command: "echo next"}, &out); code != 200 || out.Output != "next\n" {
		t.Errorf("the next command: %d %s", code, b)
	}
	if el := time.Since(gone); el > 2500*time.Millisecond {
		t.Errorf("the command of a client gone ran on for %s", el)
	}
	if call(t, "POST", execURL, serve.ExecRequest{Command: "sleep 4.5; cat /tmp/ran 2>/dev/null || echo not run"}, &out); out.Output != "not run\n" {
		t.Errorf("the command of a client gone ran to its end: %q", out.Output)
	}

	// DELETE while a command runs.
	answered := make(chan int, 1)
	go func() {
		code, _ := call(t, "POST", execURL, serve.ExecRequest{Command: "sleep 100", TimeoutS: 100}, nil)
		answered <- code
	}()
	time.Sleep(time.Second)
	start := time.Now()
	if code, b := call(t, "DELETE", srv.url+"/v1/sessions/"+open.SessionID, nil, nil); code != 204 {
		t.Errorf("delete: %d %s", code, b)
	}
	if el := time.Since(start); el > 15*time.Second {
		t.Errorf("DELETE while a command ran answered after %s", el)
	}
	select {
	case code := <-answered:
		if code != http.StatusGone {
			t.Errorf("the running command: %d, want 410", code)
		}
	case <-time.After(30 * time.Second):
		t.Error("the running command was not cut short by DELETE")
	}
}
