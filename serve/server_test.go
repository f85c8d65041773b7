package serve

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/serve/servetest"
)

// TestQueueFull: with every slot busy and the queue full, a request is
// answered 429 with Retry-After at once; the others are all scored once
// the slots free.
func TestQueueFull(t *testing.T) {
	f := &fakeScorer{gate: make(chan struct{})}
	ts := startServer(t, f, func(o *Options) { o.Concurrency, o.Queue = 1, 2 })
	codes := make(chan int, 3)
	for i := range 3 {
		go func() {
			a := do(t, http.MethodPost, ts.url+"/v1/score", "", ScoreRequest{InstanceID: "acme__widget-1", Patches: []string{fmt.Sprint("p", i)}})
			codes <- a.code
		}()
		waitDepth(t, ts.Server, 1, i)
	}
	a := do(t, http.MethodPost, ts.url+"/v1/score", "", ScoreRequest{InstanceID: "acme__widget-1", Patches: []string{"p3"}})
	var e errorResponse
	a.decode(t, &e)
	secs, err := strconv.Atoi(a.header.Get("Retry-After"))
	if a.code != 429 || err != nil || secs < 1 || secs > 60 || e.RetryAfterS <= 0 || !strings.Contains(e.Error, "queue full") {
		t.Errorf("full queue: %d Retry-After %q %+v", a.code, a.header.Get("Retry-After"), e)
	}
	for range 3 {
		f.gate <- struct{}{}
	}
	for range 3 {
		if c := <-codes; c != 200 {
			t.Errorf("a queued request: %d", c)
		}
	}
	if n := f.calls.Load(); n != 3 {
		t.Errorf("%d scorer calls, want 3", n)
	}
}

func TestRequestTimeout(t *testing.T) {
	f := &fakeScorer{gate: make(chan struct{})}
	ts := startServer(t, f, func(o *Options) { o.RequestTimeout = 200 * time.Millisecond })
	a := do(t, http.MethodPost, ts.url+"/v1/score", "", ScoreRequest{InstanceID: "acme__widget-1", Patches: []string{"x"}})
	if a.code != 504 || !strings.Contains(string(a.body), "serve.request_timeout_s") {
		t.Errorf("%d %s, want 504", a.code, a.body)
	}
	// The scorer runs beside the handler, which answers at the deadline: the
	// scorer's own record of its cancelled context may land just after.
	var errs []error
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		f.mu.Lock()
		errs = append([]error(nil), f.ctxErrs...)
		f.mu.Unlock()
		if len(errs) > 0 {
			break
		}
	}
	if len(errs) != 1 || !errors.Is(errs[0], context.DeadlineExceeded) {
		t.Errorf("the scorer's context: %v (%d calls), want it past its deadline", errs, f.calls.Load())
	}
}

// TestGracefulStop: on stop, waiting requests are answered 503 and those
// being scored finish within the drain time (drain) or are cancelled
// (cancel); Serve returns after them.
func TestGracefulStop(t *testing.T) {
	for _, tt := range []struct {
		name      string
		drain     time.Duration
		finish    bool // the scorer finishes during the drain
		wantFirst int
	}{
		{"drain", 10 * time.Second, true, 200},
		{"cancel", 100 * time.Millisecond, false, 503},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeScorer{gate: make(chan struct{})}
			ts := startServer(t, f, func(o *Options) { o.Concurrency, o.Queue, o.Drain = 1, 4, tt.drain })
			first, second := make(chan answer, 1), make(chan answer, 1)
			go func() {
				first <- do(t, http.MethodPost, ts.url+"/v1/score", "", ScoreRequest{InstanceID: "acme__widget-1", Patches: []string{"a"}})
			}()
			waitDepth(t, ts.Server, 1, 0)
			go func() {
				second <- do(t, http.MethodPost, ts.url+"/v1/score", "", ScoreRequest{InstanceID: "acme__widget-1", Patches: []string{"b"}})
			}()
			waitDepth(t, ts.Server, 1, 1)
			stopped := make(chan error, 1)
			go func() { stopped <- ts.shutdown(t) }()
			if a := <-second; a.code != 503 || a.header.Get("Retry-After") == "" {
				t.Errorf("the waiting request: %d %s, want 503 with Retry-After", a.code, a.body)
			}
			rec := httptest.NewRecorder() // the listener is closed by now
			ts.handleHealth(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
			if rec.Code != 503 || !strings.Contains(rec.Body.String(), `"stopping"`) {
				t.Errorf("healthz while stopping: %d %s", rec.Code, rec.Body)
			}
			if tt.finish {
				f.gate <- struct{}{}
			}
			if a := <-first; a.code != tt.wantFirst {
				t.Errorf("the request being scored: %d %s, want %d", a.code, a.body, tt.wantFirst)
			}
			if err := <-stopped; err != nil {
				t.Errorf("Serve: %v", err)
			}
		})
	}
}

func TestPauseHoldsTheQueue(t *testing.T) {
	f := &fakeScorer{}
	ts := startServer(t, f, nil)
	ts.Pause()
	done := make(chan answer, 1)
	go func() {
		done <- do(t, http.MethodPost, ts.url+"/v1/score", "", ScoreRequest{InstanceID: "acme__widget-1", Patches: []string{"x"}})
	}()
	waitDepth(t, ts.Server, 0, 1)
	var h health
	do(t, http.MethodGet, ts.url+"/healthz", "", nil).decode(t, &h)
	if h.Status != "paused" || h.Waiting != 1 {
		t.Errorf("healthz while paused: %+v", h)
	}
	ts.Resume()
	if a := <-done; a.code != 200 {
		t.Errorf("after resume: %d %s", a.code, a.body)
	}
	var paused, resumed bool
	ts.events.mu.Lock()
	defer ts.events.mu.Unlock()
	for _, ev := range ts.events.evs {
		switch ev.(type) {
		case event.Paused:
			paused = true
		case event.Resumed:
			resumed = true
		}
	}
	if !paused || !resumed {
		t.Errorf("acknowledged pause %v, resume %v", paused, resumed)
	}
}

// TestMetrics: /metrics has the series the issue asks for, and promtool
// (Debian's prometheus package) accepts the exposition.
func TestMetrics(t *testing.T) {
	f := &fakeScorer{}
	ts := startServer(t, f, func(o *Options) { o.Pool = fakePool{} })
	score(t, ts, ScoreRequest{InstanceID: "acme__widget-1", Patches: []string{"resolve", "apply", "", "infra"}})
	score(t, ts, ScoreRequest{InstanceID: "acme__widget-1", Patches: []string{"resolve"}})
	a := do(t, http.MethodGet, ts.url+"/metrics", "", nil)
	if a.code != 200 {
		t.Fatalf("%d %s", a.code, a.body)
	}
	text := string(a.body)
	for _, want := range []string{
		`swetui_serve_evaluations_total{outcome="resolved",phase="docker"} 1`,
		`swetui_serve_evaluations_total{outcome="infra",phase="docker"} 1`,
		`swetui_serve_evaluations_total{outcome="invalid",phase="docker"} 1`,
		`swetui_serve_infra_failures_total{phase="docker"} 1`,
		`swetui_serve_cache_hits_total{phase="docker"} 1`,
		`swetui_serve_evaluation_duration_seconds_bucket{phase="docker",le="0.005"} 4`,
		`swetui_serve_request_duration_seconds_count{phase="docker"} 2`,
		`swetui_serve_queue_depth 0`,
		`swetui_serve_docker_hosts_up 1`,
		`swetui_serve_docker_hosts 2`,
		`swetui_serve_pool_retries_total 3`,
		`swetui_serve_http_requests_total{code="200",handler="/v1/score",method="post"} 2`,
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	servetest.Promtool(t, a.body)
}

// TestPythonClientLosesNone: 64 concurrent requests through the Python
// client against a queue of 16 are all answered; the client retries the
// 429s after Retry-After.
func TestPythonClientLosesNone(t *testing.T) {
	servetest.NeedTool(t, "python3", "python3")
	f := &fakeScorer{delay: 20 * time.Millisecond}
	ts := startServer(t, f, func(o *Options) { o.Concurrency, o.Queue = 2, 16 })
	dir := t.TempDir()
	var preds bytes.Buffer
	for i := range 64 {
		fmt.Fprintf(&preds, "{\"instance_id\": \"acme__widget-%d\", \"model_patch\": \"resolve %d\"}\n", i, i)
	}
	in, out := filepath.Join(dir, "preds.jsonl"), filepath.Join(dir, "results.jsonl")
	if err := os.WriteFile(in, preds.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	summary := servetest.PythonClient(t, ts.url, "predictions", in, "--concurrency", "64", "--out", out)
	results := servetest.ReadResults(t, out)
	if len(results) != 64 {
		t.Fatalf("%d results, want 64", len(results))
	}
	for i, r := range results {
		if r.Error != "" || r.InstanceID != fmt.Sprintf("acme__widget-%d", i) || !r.Verdict.Resolved {
			t.Errorf("result %d: %+v", i, r)
		}
	}
	if n := f.patches.Load(); n != 64 {
		t.Errorf("%d patches scored, want 64 (each once)", n)
	}
	if !strings.Contains(summary, `"429"`) {
		t.Errorf("the client was never refused: the queue was not exercised:\n%s", summary)
	}
}
