package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/task"
)

// fakeScorer grades by what a patch says: "apply" applies, "resolve"
// resolves, "infra" is an infrastructure failure; the reward is the
// patch's length over 100. With gate set, each call waits for a receive
// from it (or its ctx).
type fakeScorer struct {
	calls   atomic.Int64
	patches atomic.Int64
	delay   time.Duration
	gate    chan struct{}
	mu      sync.Mutex
	insts   []*task.Instance
	ctxErrs []error
}

func (f *fakeScorer) ScoreDiffs(ctx context.Context, inst *task.Instance, diffs []string, phase string) ([]event.Verdict, error) {
	f.calls.Add(1)
	f.patches.Add(int64(len(diffs)))
	f.mu.Lock()
	f.insts = append(f.insts, inst)
	f.mu.Unlock()
	if f.gate != nil {
		select {
		case <-f.gate:
		case <-ctx.Done():
			f.mu.Lock()
			f.ctxErrs = append(f.ctxErrs, ctx.Err())
			f.mu.Unlock()
			return nil, fmt.Errorf("score %s: %w", inst.InstanceID, ctx.Err())
		}
	}
	if f.delay > 0 {
		time.Sleep(f.delay)
	}
	out := make([]event.Verdict, len(diffs))
	for i, d := range diffs {
		v := event.Verdict{InstanceID: inst.InstanceID, Phase: phase, Patch: d, SyntaxOK: d != "", NonEmpty: d != "",
			Reward: float64(len(d)) / 100}
		v.Applied = strings.Contains(d, "apply") || strings.Contains(d, "resolve")
		v.ApplyChecked = phase != config.PhaseSyntax && d != ""
		v.Resolved = strings.Contains(d, "resolve")
		if strings.Contains(d, "infra") {
			v = event.Verdict{InstanceID: inst.InstanceID, Phase: phase, Infra: true, InfraCause: "docker host lost"}
		}
		v.Durations.Total = time.Millisecond
		out[i] = v
	}
	return out, nil
}

// events records what the server publishes.
type events struct {
	mu  sync.Mutex
	evs []event.Event
}

func (e *events) Publish(ev event.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.evs = append(e.evs, ev)
}

func (e *events) messages() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, ev := range e.evs {
		if m, ok := ev.(event.Message); ok {
			out = append(out, m.Text)
		}
	}
	return out
}

func testTasks() []*task.Instance {
	var out []*task.Instance
	for i := range 64 {
		split := task.SplitTrain
		if i%4 == 0 {
			split = task.SplitTest
		}
		out = append(out, &task.Instance{InstanceID: fmt.Sprintf("acme__widget-%d", i), Repo: "acme/widget", BaseCommit: "abc",
			TestPatch: "diff", FailToPass: task.TestList{"t::a"}, Split: split, ProblemStatement: "fix it", Patch: "gold resolve"})
	}
	return out
}

// testServer is a Server serving on a loopback port until the test ends.
type testServer struct {
	*Server
	url    string
	scorer *fakeScorer
	events *events
	stop   context.CancelFunc
	done   chan error
}

func startServer(t *testing.T, f *fakeScorer, edit func(*Options)) *testServer {
	t.Helper()
	ev := &events{}
	opts := Options{Scorer: f, Tasks: testTasks(), Concurrency: 2, Queue: 4, MaxPatches: 8, MaxBody: 1 << 16,
		RequestTimeout: time.Minute, Drain: 5 * time.Second, CacheEntries: 100, Events: ev, RequestLines: true}
	if edit != nil {
		edit(&opts)
	}
	s, err := New("127.0.0.1:0", opts)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ts := &testServer{Server: s, url: "http://" + l.Addr().String(), scorer: f, events: ev, stop: cancel, done: make(chan error, 1)}
	go func() { ts.done <- s.Serve(ctx, l) }()
	t.Cleanup(func() {
		if f.gate != nil {
			close(f.gate) // whatever still waits on it goes
		}
		ts.shutdown(t)
	})
	return ts
}

// shutdown stops the server and waits for Serve; idempotent.
func (ts *testServer) shutdown(t *testing.T) error {
	t.Helper()
	ts.stop()
	select {
	case err, ok := <-ts.done:
		if ok {
			close(ts.done)
			return err
		}
		return nil
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not return 30s after its stop")
		return nil
	}
}

type answer struct {
	code   int
	header http.Header
	body   []byte
}

func (a answer) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(a.body, v); err != nil {
		t.Fatalf("answer %d %q: %v", a.code, a.body, err)
	}
}

func do(t *testing.T, method, url, token string, body any) answer {
	t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{resp.StatusCode, resp.Header, data}
}

func score(t *testing.T, ts *testServer, req ScoreRequest) (answer, ScoreResponse) {
	t.Helper()
	a := do(t, http.MethodPost, ts.url+"/v1/score", "", req)
	var resp ScoreResponse
	if a.code == http.StatusOK {
		a.decode(t, &resp)
	}
	return a, resp
}

// waitDepth waits until the admission queue holds running and waiting.
func waitDepth(t *testing.T, s *Server, running, waiting int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, w := s.queue.depth()
		if r == running && w == waiting {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue: %d running, %d waiting; want %d and %d", r, w, running, waiting)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type fakePool struct{}

func (fakePool) State() event.PoolState {
	return event.PoolState{Hosts: []event.HostState{{Endpoint: "a", Up: true}, {Endpoint: "b"}},
		Workers: []event.WorkerState{{Busy: true}, {}}, Retries: 3}
}
