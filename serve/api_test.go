package serve

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/task"
)

func TestIsLoopback(t *testing.T) {
	for _, tt := range []struct {
		addr string
		want bool
	}{
		{"127.0.0.1:8765", true}, {"127.1.2.3:80", true}, {"[::1]:8765", true}, {"localhost:8765", true},
		{"LOCALHOST:1", true}, {":8765", false}, {"0.0.0.0:8765", false}, {"[::]:8765", false},
		{"10.0.0.5:8765", false}, {"example.com:80", false}, {"127.0.0.1", false}, {"", false},
	} {
		if got := IsLoopback(tt.addr); got != tt.want {
			t.Errorf("IsLoopback(%q) = %v, want %v", tt.addr, got, tt.want)
		}
	}
}

func TestNewNeedsATokenOffLoopback(t *testing.T) {
	f := &fakeScorer{}
	if _, err := New("0.0.0.0:8765", Options{Scorer: f}); !errors.Is(err, ErrNeedToken) {
		t.Errorf("0.0.0.0 without a token: %v, want ErrNeedToken", err)
	}
	if _, err := New("0.0.0.0:8765", Options{Scorer: f, Token: "s3cret"}); err != nil {
		t.Errorf("0.0.0.0 with a token: %v", err)
	}
	if _, err := New("127.0.0.1:8765", Options{Scorer: f}); err != nil {
		t.Errorf("loopback without a token: %v", err)
	}
}

func TestAuth(t *testing.T) {
	ts := startServer(t, &fakeScorer{}, func(o *Options) { o.Token = "s3cret" })
	for _, tt := range []struct {
		method, path, token string
		body                any
		want                int
	}{
		{"GET", "/v1/tasks", "", nil, 401},
		{"GET", "/v1/tasks", "wrong", nil, 401},
		{"GET", "/v1/tasks", "s3cret", nil, 200},
		{"POST", "/v1/score", "", ScoreRequest{InstanceID: "acme__widget-1", Patches: []string{"x"}}, 401},
		{"POST", "/v1/score", "s3cret", ScoreRequest{InstanceID: "acme__widget-1", Patches: []string{"x"}}, 200},
		{"GET", "/metrics", "", nil, 401},
		{"GET", "/metrics", "s3cret", nil, 200},
		{"GET", "/healthz", "", nil, 200}, // no token: says only that it is up
	} {
		a := do(t, tt.method, ts.url+tt.path, tt.token, tt.body)
		if a.code != tt.want {
			t.Errorf("%s %s token %q: %d %s, want %d", tt.method, tt.path, tt.token, a.code, a.body, tt.want)
		}
		if a.code == 401 && !strings.HasPrefix(a.header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s %s: 401 without WWW-Authenticate: Bearer", tt.method, tt.path)
		}
	}
}

func TestScoreRequestErrors(t *testing.T) {
	ts := startServer(t, &fakeScorer{}, nil)
	noDocker := startServer(t, &fakeScorer{}, func(o *Options) { o.DockerErr = errors.New("no Docker host answers") })
	ok := []string{"x"}
	for _, tt := range []struct {
		name string
		ts   *testServer
		body any
		want int
		says string
	}{
		{"not JSON", ts, "{", 400, "request body"},
		{"unknown field", ts, `{"instance_id": "acme__widget-1", "patchs": ["x"]}`, 400, "patchs"},
		{"unknown phase", ts, ScoreRequest{InstanceID: "acme__widget-1", Patches: ok, Phase: "tests"}, 400, "want one of"},
		{"phase and mode disagree", ts, ScoreRequest{InstanceID: "acme__widget-1", Patches: ok, Phase: "syntax", Mode: "docker"}, 400, "disagree"},
		{"no patches", ts, ScoreRequest{InstanceID: "acme__widget-1"}, 400, "no patches"},
		{"too many patches", ts, ScoreRequest{InstanceID: "acme__widget-1", Patches: make([]string, 9)}, 400, "serve.max_patches"},
		{"unknown instance", ts, ScoreRequest{InstanceID: "nope", Patches: ok}, 404, "not in the dataset"},
		{"no task", ts, ScoreRequest{Patches: ok}, 400, "no task"},
		{"both id and instance", ts, ScoreRequest{InstanceID: "acme__widget-1", Instance: json.RawMessage(`{}`), Patches: ok}, 400, "not both"},
		{"inline instances refused", ts, ScoreRequest{Instance: json.RawMessage(`{"instance_id": "a"}`), Patches: ok}, 400, "inline_instances"},
		{"body too large", ts, ScoreRequest{InstanceID: "acme__widget-1", Patches: []string{strings.Repeat("x", 1<<16)}}, 413, "serve.max_body_kb"},
		{"docker phase without Docker", noDocker, ScoreRequest{InstanceID: "acme__widget-1", Patches: ok}, 503, "no Docker host answers"},
		{"apply-only without Docker", noDocker, ScoreRequest{InstanceID: "acme__widget-1", Patches: ok, Phase: "apply-only"}, 200, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := do(t, http.MethodPost, tt.ts.url+"/v1/score", "", tt.body)
			if a.code != tt.want || !strings.Contains(string(a.body), tt.says) {
				t.Errorf("%d %s, want %d saying %q", a.code, a.body, tt.want, tt.says)
			}
		})
	}
	if a := do(t, http.MethodGet, ts.url+"/v1/score", "", nil); a.code != 405 || a.header.Get("Allow") != "POST" {
		t.Errorf("GET /v1/score: %d, Allow %q", a.code, a.header.Get("Allow"))
	}
	if a := do(t, http.MethodGet, ts.url+"/v2/score", "", nil); a.code != 404 {
		t.Errorf("GET /v2/score: %d", a.code)
	}
	if ts.scorer.calls.Load() != 0 {
		t.Errorf("a refused request reached the scorer %d times", ts.scorer.calls.Load())
	}
}

// TestScoreInOrderAndCached: verdicts come in the patches' order; the same
// (instance, patch, phase) is scored once; no_cache, another phase or
// another instance scores again; infrastructure failures are not kept.
func TestScoreInOrderAndCached(t *testing.T) {
	f := &fakeScorer{}
	ts := startServer(t, f, nil)
	patches := []string{"resolve it", "apply this", "", "infra"}
	a, resp := score(t, ts, ScoreRequest{InstanceID: "acme__widget-1", Patches: patches, Phase: "apply-only", ReturnPatches: true})
	if a.code != 200 {
		t.Fatalf("%d %s", a.code, a.body)
	}
	if len(resp.Verdicts) != len(patches) || resp.InstanceID != "acme__widget-1" || resp.Phase != "apply-only" {
		t.Fatalf("answer %+v", resp)
	}
	for i, v := range resp.Verdicts {
		if v.Patch != patches[i] && !v.Infra || resp.Cached[i] {
			t.Errorf("verdict %d: patch %q cached %v, want %q fresh", i, v.Patch, resp.Cached[i], patches[i])
		}
	}
	if !resp.Verdicts[0].Resolved || !resp.Verdicts[1].Applied || resp.Verdicts[2].SyntaxOK || !resp.Verdicts[3].Infra {
		t.Errorf("verdicts out of order: %+v", resp.Verdicts)
	}
	for _, tt := range []struct {
		name       string
		req        ScoreRequest
		wantCached []bool
		wantCalls  int64 // the scorer's calls after the request
	}{
		{"the same again", ScoreRequest{InstanceID: "acme__widget-1", Patches: patches, Phase: "apply-only"}, []bool{true, true, true, false}, 2},
		{"reordered, with mode", ScoreRequest{InstanceID: "acme__widget-1", Patches: []string{"", "resolve it"}, Mode: "apply-only"}, []bool{true, true}, 2},
		{"no_cache", ScoreRequest{InstanceID: "acme__widget-1", Patches: []string{"resolve it"}, Phase: "apply-only", NoCache: true}, []bool{false}, 3},
		{"another phase", ScoreRequest{InstanceID: "acme__widget-1", Patches: []string{"resolve it"}, Phase: "docker"}, []bool{false}, 4},
		{"another instance", ScoreRequest{InstanceID: "acme__widget-2", Patches: []string{"resolve it"}, Phase: "apply-only"}, []bool{false}, 5},
		{"one patch", ScoreRequest{InstanceID: "acme__widget-2", Patch: ptr("resolve it"), Phase: "apply-only"}, []bool{true}, 5},
	} {
		a, resp := score(t, ts, tt.req)
		if a.code != 200 {
			t.Fatalf("%s: %d %s", tt.name, a.code, a.body)
		}
		if fmt.Sprint(resp.Cached) != fmt.Sprint(tt.wantCached) || f.calls.Load() != tt.wantCalls {
			t.Errorf("%s: cached %v after %d scorer calls, want %v after %d", tt.name, resp.Cached, f.calls.Load(), tt.wantCached, tt.wantCalls)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// The cache's bytes bound it as its entries do: large patches push out the
// oldest, one larger than the bound is not kept, and the bytes it counts
// are those of what it holds.
func TestCacheBoundedByBytes(t *testing.T) {
	big := func(n int) event.Verdict { return event.Verdict{Patch: strings.Repeat("x", n)} }
	c := newCache(100, 10<<10)
	c.put("a", big(4<<10))
	c.put("b", big(4<<10))
	c.put("c", big(4<<10)) // a goes
	if _, ok := c.get("a"); ok || c.len() != 2 {
		t.Errorf("a kept (%d entries) past 10 KiB of 4 KiB patches", c.len())
	}
	if h := c.held(); h > 10<<10 || h < 8<<10 {
		t.Errorf("holds %d bytes, want two 4 KiB patches' worth, at most 10 KiB", h)
	}
	c.put("d", big(11<<10))
	if _, ok := c.get("d"); ok {
		t.Error("a verdict larger than the cache is kept")
	}
	c.put("b", big(1)) // replaced: its bytes shrink
	if h := c.held(); h > 6<<10 {
		t.Errorf("holds %d bytes after b shrank", h)
	}
	none := newCache(10, 0)
	none.put("a", big(1))
	if none.len() != 0 {
		t.Error("a cache of 0 bytes keeps verdicts")
	}
}

func TestCacheEvictsLeastRecentlyUsed(t *testing.T) {
	c := newCache(2, 1<<20)
	c.put("a", event.Verdict{Reward: 1})
	c.put("b", event.Verdict{Reward: 2})
	c.get("a")
	c.put("c", event.Verdict{Reward: 3})
	if _, ok := c.get("b"); ok {
		t.Error("b, the least recently used, is still cached")
	}
	for _, k := range []string{"a", "c"} {
		if _, ok := c.get(k); !ok {
			t.Errorf("%s evicted", k)
		}
	}
	if c.len() != 2 {
		t.Errorf("%d entries, want 2", c.len())
	}
	off := newCache(0, 1<<20)
	off.put("a", event.Verdict{})
	if _, ok := off.get("a"); ok {
		t.Error("a cache of size 0 kept a verdict")
	}
}

func TestInstanceHashSeesContent(t *testing.T) {
	a := &task.Instance{InstanceID: "x", Repo: "r", TestPatch: "p"}
	b := *a
	b.TestPatch = "q"
	c := *a
	c.CheckoutBase = true
	ha, _ := instanceHash(a)
	hb, _ := instanceHash(&b)
	hc, _ := instanceHash(&c)
	if ha == hb || ha == hc {
		t.Errorf("instances that grade differently share a hash: %s %s %s", ha, hb, hc)
	}
	if cacheKey(ha, "docker", "p") == cacheKey(ha, "apply-only", "p") {
		t.Error("phases share a key")
	}
}

func TestInlineInstance(t *testing.T) {
	f := &fakeScorer{}
	ts := startServer(t, f, func(o *Options) {
		o.Decode = func(b []byte) (task.Instance, error) { return task.DecodeInstance(b, config.Default()) }
	})
	inst := `{"instance_id": "acme__slugs-1", "repo": "acme/slugs", "base_commit": "3ebb6ca", "patch": "", ` +
		`"test_patch": "diff --git a/tests/test_slug.py b/tests/test_slug.py\n", "FAIL_TO_PASS": "[\"tests/test_slug.py::test_case\"]", "PASS_TO_PASS": []}`
	a, resp := score(t, ts, ScoreRequest{Instance: json.RawMessage(inst), Patches: []string{"apply"}, Phase: "apply-only"})
	if a.code != 200 || resp.InstanceID != "acme__slugs-1" {
		t.Fatalf("%d %s", a.code, a.body)
	}
	got := f.insts[0]
	if got.Repo != "acme/slugs" || len(got.FailToPass) != 1 || got.TestCmd == "" || got.Split == "" {
		t.Errorf("instance not read as a dataset record is: %+v", got)
	}
	a = do(t, http.MethodPost, ts.url+"/v1/score", "", ScoreRequest{Instance: json.RawMessage(`{"instance_id": "a"}`), Patches: []string{"x"}})
	if a.code != 400 || !strings.Contains(string(a.body), "missing field") {
		t.Errorf("an invalid instance: %d %s", a.code, a.body)
	}
}

// TestEventsOfARequest: a scored request is a step for the console (its
// verdicts as completions) and a line for the headless printer.
func TestEventsOfARequest(t *testing.T) {
	ts := startServer(t, &fakeScorer{}, nil)
	if a, _ := score(t, ts, ScoreRequest{InstanceID: "acme__widget-3", Patches: []string{"resolve", "nothing"}}); a.code != 200 {
		t.Fatalf("%d %s", a.code, a.body)
	}
	var started, finished bool
	var rows int
	ts.events.mu.Lock()
	for _, ev := range ts.events.evs {
		switch e := ev.(type) {
		case event.StepStarted:
			started = e.Step == 1 && e.Phase == "docker"
		case event.CompletionScored:
			rows++
		case event.StepFinished:
			finished = e.Step == 1 && e.Metrics.ResolvedRate == 0.5 && e.Metrics.ApplyRate == 0.5
		}
	}
	ts.events.mu.Unlock()
	if !started || !finished || rows != 2 {
		t.Errorf("step started %v, finished %v, %d completions", started, finished, rows)
	}
	msgs := strings.Join(ts.events.messages(), "\n")
	if !strings.Contains(msgs, `POST /v1/score 200 #1 "acme__widget-3" docker: 2 patches: valid 2 applied 1 resolved 1`) {
		t.Errorf("no line for the request:\n%s", msgs)
	}
}

func TestTasks(t *testing.T) {
	ts := startServer(t, &fakeScorer{}, nil)
	for _, tt := range []struct {
		query string
		code  int
		count int
	}{{"", 200, 64}, {"?split=all", 200, 64}, {"?split=test", 200, 16}, {"?split=train", 200, 48}, {"?split=dev", 400, 0}} {
		a := do(t, http.MethodGet, ts.url+"/v1/tasks"+tt.query, "", nil)
		if a.code != tt.code {
			t.Errorf("%s: %d %s", tt.query, a.code, a.body)
			continue
		}
		if a.code != 200 {
			continue
		}
		var out struct {
			Count int              `json:"count"`
			Tasks []map[string]any `json:"tasks"`
		}
		a.decode(t, &out)
		if out.Count != tt.count || len(out.Tasks) != tt.count {
			t.Errorf("%s: %d tasks, want %d", tt.query, out.Count, tt.count)
		}
		if _, gold := out.Tasks[0]["patch"]; gold || out.Tasks[0]["problem_statement"] != "fix it" {
			t.Errorf("%s: summary %v", tt.query, out.Tasks[0])
		}
	}
	var full struct{ Tasks []task.Instance }
	do(t, http.MethodGet, ts.url+"/v1/tasks?full=1", "", nil).decode(t, &full)
	if len(full.Tasks) != 64 || full.Tasks[0].Patch != "gold resolve" {
		t.Errorf("full=1: %d tasks, first %+v", len(full.Tasks), full.Tasks[0])
	}
}
