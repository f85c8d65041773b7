package serve

import (
	"context"
	"net/http"
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
