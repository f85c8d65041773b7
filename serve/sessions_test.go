package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/task"
)

// fakeSession answers each command with its own text and diffs to a fixed
// patch.
type fakeSession struct{ diff string }

func (f *fakeSession) Exec(ctx context.Context, command string, timeout time.Duration) (ExecResponse, error) {
	return ExecResponse{ExitCode: 3, Output: "ran " + command + "\n", OutputBytes: int64(len(command) + 5), DurationS: 0.25}, nil
}
func (f *fakeSession) Diff(ctx context.Context) (string, error) { return f.diff, nil }
func (f *fakeSession) Close() error                             { return nil }

// The console follows a session as it follows a training trajectory: a
// TurnPlayed for each command, then its end; a submitted one's end again
// once the step that carries its verdict starts (which clears ended rows).
func TestSessionsArePublishedAsTurns(t *testing.T) {
	ts := startServer(t, &fakeScorer{}, func(o *Options) {
		o.OpenSession = func(ctx context.Context, inst *task.Instance) (Session, error) {
			return &fakeSession{diff: "diff --git a/x b/x\n"}, nil
		}
		o.Sessions = SessionLimits{Max: 2, PerToken: 2, Idle: time.Minute, MaxTimeout: time.Minute, MaxOutput: 1 << 10}
	})
	id := testTasks()[0].InstanceID
	open := func() string {
		var o OpenResponse
		a := do(t, "POST", ts.url+"/v1/sessions", "", OpenRequest{InstanceID: id})
		if a.code != http.StatusCreated {
			t.Fatalf("open: %d %s", a.code, a.body)
		}
		a.decode(t, &o)
		return o.SessionID
	}
	a, b := open(), open()
	for _, c := range []string{"ls\nmore", "pytest -q"} {
		if r := do(t, "POST", ts.url+"/v1/sessions/"+a+"/exec", "", ExecRequest{Command: c}); r.code != 200 {
			t.Fatalf("exec: %d %s", r.code, r.body)
		}
	}
	if r := do(t, "POST", ts.url+"/v1/sessions/"+a+"/submit", "", SubmitRequest{}); r.code != 200 {
		t.Fatalf("submit: %d %s", r.code, r.body)
	}
	if r := do(t, "DELETE", ts.url+"/v1/sessions/"+b, "", nil); r.code != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.code, r.body)
	}

	ts.events.mu.Lock()
	defer ts.events.mu.Unlock()
	var got []event.TurnPlayed
	started := -1
	for _, ev := range ts.events.evs {
		switch e := ev.(type) {
		case event.TurnPlayed:
			got = append(got, e)
		case event.StepStarted:
			started = len(got)
		}
	}
	want := []event.TurnPlayed{
		{Session: a, InstanceID: id, Turn: 1, Command: "ls ...", ExitCode: 3, Duration: 250 * time.Millisecond, Output: "ran ls\nmore\n"},
		{Session: a, InstanceID: id, Turn: 2, Command: "pytest -q", ExitCode: 3, Duration: 250 * time.Millisecond, Output: "ran pytest -q\n"},
		{Session: a, InstanceID: id, Turn: 2, End: "submitted", DiffBytes: len("diff --git a/x b/x\n")}, // while graded
		{Session: a, InstanceID: id, Turn: 2, End: "submitted", DiffBytes: len("diff --git a/x b/x\n")}, // with its verdict
		{Session: b, InstanceID: id, Turn: 0, End: "deleted"},
	}
	if len(got) != len(want) {
		t.Fatalf("published %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("event %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if started != 3 {
		t.Errorf("the submit's step started after %d of them, want 3 (before its end is said again)", started)
	}
}

// blockingSession records each command's timeout and runs it until its
// timeout, its client's going or its Close.
type blockingSession struct {
	mu       sync.Mutex
	timeouts []time.Duration
	closed   chan struct{}
	once     sync.Once
}

func newBlocking() *blockingSession { return &blockingSession{closed: make(chan struct{})} }

func (b *blockingSession) Exec(ctx context.Context, command string, timeout time.Duration) (ExecResponse, error) {
	b.mu.Lock()
	b.timeouts = append(b.timeouts, timeout)
	b.mu.Unlock()
	if command == "quick" {
		return ExecResponse{Output: "done\n"}, nil
	}
	select {
	case <-time.After(timeout):
		return ExecResponse{ExitCode: 137, TimedOut: true}, nil
	case <-ctx.Done():
		return ExecResponse{ExitCode: 137}, ctx.Err()
	case <-b.closed:
		return ExecResponse{ExitCode: -1}, errors.New("session closed")
	}
}
func (b *blockingSession) Diff(ctx context.Context) (string, error) { return "", nil }
func (b *blockingSession) Close() error {
	b.once.Do(func() { close(b.closed) })
	return nil
}

func (b *blockingSession) lastTimeout() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.timeouts[len(b.timeouts)-1]
}

func sessionServer(t *testing.T, edit func(*Options)) (*testServer, *[]*blockingSession) {
	t.Helper()
	var mu sync.Mutex
	opened := &[]*blockingSession{}
	ts := startServer(t, &fakeScorer{}, func(o *Options) {
		o.OpenSession = func(ctx context.Context, inst *task.Instance) (Session, error) {
			b := newBlocking()
			mu.Lock()
			*opened = append(*opened, b)
			mu.Unlock()
			return b, nil
		}
		o.Sessions = SessionLimits{Max: 8, PerToken: 2, Idle: time.Minute, MaxTimeout: 2 * time.Minute, MaxOutput: 1 << 10}
		if edit != nil {
			edit(o)
		}
	})
	return ts, opened
}

func openOne(t *testing.T, ts *testServer, header string) (string, int) {
	t.Helper()
	a := doHeader(t, "POST", ts.url+"/v1/sessions", header, OpenRequest{InstanceID: testTasks()[0].InstanceID})
	var o OpenResponse
	if a.code == http.StatusCreated {
		a.decode(t, &o)
	}
	return o.SessionID, a.code
}

// doHeader is do with Authorization set to header as it is.
func doHeader(t *testing.T, method, url, header string, body any) answer {
	t.Helper()
	data, _ := json.Marshal(body)
	if body == nil {
		data = nil
	}
	req, err := http.NewRequest(method, url, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if header != "" {
		req.Header.Set("Authorization", header)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, b}
}

// timeout_s is clamped in floating point before it becomes a Duration:
// 1e10 and 1e300 are the cap (not an overflow that kills at once), 0 and
// negatives the default, a tiny one the floor.
func TestExecTimeoutClamped(t *testing.T) {
	for _, tt := range []struct {
		secs float64
		want time.Duration
	}{
		{0, 2 * time.Minute}, {-5, 2 * time.Minute}, {30, 30 * time.Second}, {1e10, 2 * time.Minute}, {1e300, 2 * time.Minute},
		{9.3e9, 2 * time.Minute}, {1e-9, MinExecTimeout}, {0.2, MinExecTimeout}, {0.75, 750 * time.Millisecond},
	} {
		if got := ExecTimeout(tt.secs, 2*time.Minute); got != tt.want {
			t.Errorf("timeout_s %g: %s, want %s", tt.secs, got, tt.want)
		}
	}
	ts, opened := sessionServer(t, nil)
	id, _ := openOne(t, ts, "")
	for _, body := range []string{`{"command": "quick", "timeout_s": 1e10}`, `{"command": "quick", "timeout_s": 1e300}`} {
		if a := do(t, "POST", ts.url+"/v1/sessions/"+id+"/exec", "", body); a.code != 200 {
			t.Fatalf("%s: %d %s", body, a.code, a.body)
		}
		if got := (*opened)[0].lastTimeout(); got != 2*time.Minute {
			t.Errorf("%s: the command's timeout %s, want the cap", body, got)
		}
	}
}

// DELETE ends a session now: a command running is cut short (the
// session's Close) and the call answers at once; the command's own call
// answers 410.
func TestDeleteEndsSessionNow(t *testing.T) {
	ts, _ := sessionServer(t, nil)
	id, _ := openOne(t, ts, "")
	execAnswer := make(chan answer, 1)
	go func() {
		execAnswer <- do(t, "POST", ts.url+"/v1/sessions/"+id+"/exec", "", ExecRequest{Command: "sleep 100", TimeoutS: 100})
	}()
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	if a := do(t, "DELETE", ts.url+"/v1/sessions/"+id, "", nil); a.code != http.StatusNoContent {
		t.Fatalf("delete: %d %s", a.code, a.body)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("DELETE answered after %s", el)
	}
	select {
	case a := <-execAnswer:
		if a.code != http.StatusGone || !strings.Contains(string(a.body), "deleted") {
			t.Errorf("the running command: %d %s, want 410 saying deleted", a.code, a.body)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the running command was not cut short")
	}
	if a := do(t, "POST", ts.url+"/v1/sessions/"+id+"/exec", "", ExecRequest{Command: "quick"}); a.code != http.StatusNotFound {
		t.Errorf("after delete: %d %s", a.code, a.body)
	}
}

// The per-token limit and one's own sessions are the token's, however the
// header spells its scheme.
func TestSessionOwnerIsTheToken(t *testing.T) {
	ts, _ := sessionServer(t, func(o *Options) { o.Token = "s3cret" })
	a, code := openOne(t, ts, "Bearer s3cret")
	if code != http.StatusCreated {
		t.Fatalf("open: %d", code)
	}
	if _, code := openOne(t, ts, "bearer s3cret"); code != http.StatusCreated {
		t.Fatalf("open: %d", code)
	}
	for _, h := range []string{"BEARER s3cret", "Bearer  s3cret", "bEaReR   s3cret"} {
		if _, code := openOne(t, ts, h); code != http.StatusTooManyRequests {
			t.Errorf("%q: a third session of the same token: %d, want 429 (serve.sessions_per_token = 2)", h, code)
		}
		if r := doHeader(t, "POST", ts.url+"/v1/sessions/"+a+"/exec", h, ExecRequest{Command: "quick"}); r.code != 200 {
			t.Errorf("%q: its own session's exec: %d %s", h, r.code, r.body)
		}
		var list struct {
			Count int `json:"count"`
		}
		r := doHeader(t, "GET", ts.url+"/v1/sessions", h, nil)
		r.decode(t, &list)
		if list.Count != 2 {
			t.Errorf("%q lists %d sessions, want its 2", h, list.Count)
		}
	}
}

// A session's life is agent.session_minutes: past it the session ends,
// a command running then cut short, with its own answer (410, expired),
// not "lost".
func TestSessionLifeIsItsOwn(t *testing.T) {
	ts, _ := sessionServer(t, func(o *Options) { o.Sessions.Life = 1500 * time.Millisecond })
	id, _ := openOne(t, ts, "")
	start := time.Now()
	a := do(t, "POST", ts.url+"/v1/sessions/"+id+"/exec", "", ExecRequest{Command: "sleep 100", TimeoutS: 100})
	if a.code != http.StatusGone || !strings.Contains(string(a.body), "expired") || !strings.Contains(string(a.body), "agent.session_minutes") {
		t.Errorf("a command past the session's life: %d %s", a.code, a.body)
	}
	if el := time.Since(start); el > 4*time.Second {
		t.Errorf("a 1.5 s life ended after %s", el)
	}
	ts.events.mu.Lock()
	defer ts.events.mu.Unlock()
	for _, ev := range ts.events.evs {
		if e, ok := ev.(event.TurnPlayed); ok && e.End != "" && e.End != event.EndExpired {
			t.Errorf("the session ended as %q", e.End)
		}
	}
}
