package serve

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/swetui/swetui/event"
)

func TestQuote(t *testing.T) {
	long := strings.Repeat("a", 1<<20)
	for _, tt := range []struct{ in, want string }{
		{"acme__widget-1", `"acme__widget-1"`},
		{"x\n[00:01] forged line", `"x\n[00:01] forged line"`},
		{"\x1b[2J\x1b[Hgone", `"\x1b[2J\x1b[Hgone"`},
		{long, `"` + strings.Repeat("a", maxShown) + `"... (1048576 bytes)`},
		{strings.Repeat("é", 100), `"` + strings.Repeat("é", 64) + `"... (200 bytes)`},
	} {
		if got := quote(tt.in); got != tt.want {
			t.Errorf("quote(%.20q) = %.80s, want %.80s", tt.in, got, tt.want)
		}
	}
}

// rawPost writes a request by hand (a body the http client would not
// send) and returns the status line and the body of the answer.
func rawPost(t *testing.T, ts *testServer, headers, body string, closeWrite bool) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(ts.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /v1/score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%s\r\n%s", headers, body)
	if closeWrite {
		c.(*net.TCPConn).CloseWrite()
	}
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Every loosely written body is a 400 that names its fault, and none
// reaches the scorer.
func TestStrictRequests(t *testing.T) {
	ts := startServer(t, &fakeScorer{}, nil)
	ok := `{"instance_id": "acme__widget-1", "patches": ["x"]}`
	for _, tt := range []struct{ name, body, says string }{
		{"trailing garbage", ok + " xyz", "data after the request object"},
		{"a second object", ok + `{"instance_id": "acme__widget-2", "patches": ["y"]}`, "data after the request object (another object)"},
		{"a trailing array", ok + `[]`, "data after the request object (an array)"},
		{"duplicate phase", `{"instance_id": "acme__widget-1", "patches": ["x"], "phase": "syntax", "phase": "docker"}`, `key "phase" appears twice`},
		{"duplicate patches", `{"patches": ["x"], "instance_id": "acme__widget-1", "patches": ["y"]}`, `key "patches" appears twice`},
		{"key in another case", `{"Instance_ID": "acme__widget-1", "patches": ["x"]}`, `unknown key "Instance_ID": keys are case-sensitive (did you mean "instance_id"?)`},
		{"upper-case phase key", `{"instance_id": "acme__widget-1", "patches": ["x"], "PHASE": "docker"}`, `did you mean "phase"?`},
		{"unknown key", `{"instance_id": "acme__widget-1", "patchs": ["x"]}`, `unknown key "patchs" (known: instance_id,`},
		{"not an object", `["x"]`, "want a JSON object, not an array"},
		{"empty", ``, "empty body"},
		{"a wrong type", `{"instance_id": "acme__widget-1", "patches": "x"}`, "cannot unmarshal"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := do(t, http.MethodPost, ts.url+"/v1/score", "", tt.body)
			var e errorResponse
			a.decode(t, &e)
			if a.code != 400 || !strings.Contains(e.Error, tt.says) {
				t.Errorf("%d %s, want 400 saying %s", a.code, e.Error, tt.says)
			}
		})
	}
	t.Run("body shorter than its Content-Length", func(t *testing.T) {
		code, body := rawPost(t, ts, fmt.Sprintf("Content-Length: %d\r\n", len(ok)+20), ok, true)
		if code != 400 || !strings.Contains(body, fmt.Sprintf("ended after %d of the %d bytes its Content-Length announced", len(ok), len(ok)+20)) {
			t.Errorf("%d %s", code, body)
		}
	})
	if a := do(t, http.MethodPost, ts.url+"/v1/score", "", ok); a.code != 200 {
		t.Errorf("the well-formed request: %d %s", a.code, a.body)
	}
	if n := ts.scorer.calls.Load(); n != 1 {
		t.Errorf("%d scorer calls, want only the well-formed request's", n)
	}
}

// A body that does not arrive in serve.body_timeout_s is a 408 that names
// the setting, not the sockets.
func TestBodyTimeoutIs408(t *testing.T) {
	ts := startServer(t, &fakeScorer{}, func(o *Options) { o.BodyTimeout = time.Second })
	start := time.Now()
	code, body := rawPost(t, ts, "Content-Length: 100\r\n", `{"instance_id": `, false)
	if code != http.StatusRequestTimeout || !strings.Contains(body, "serve.body_timeout_s") || strings.Contains(body, "127.0.0.1") {
		t.Errorf("%d %s, want 408 naming serve.body_timeout_s and no address", code, body)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Errorf("answered after %s", el)
	}
}

// The Bearer scheme is matched in any case (RFC 9110), the token exactly.
func TestAuthSchemeIsCaseInsensitive(t *testing.T) {
	ts := startServer(t, &fakeScorer{}, func(o *Options) { o.Token = "s3cret" })
	for _, tt := range []struct {
		header string
		want   int
	}{
		{"Bearer s3cret", 200}, {"bearer s3cret", 200}, {"BEARER s3cret", 200}, {"bEaReR  s3cret", 200},
		{"Bearer S3CRET", 401}, {"Basic s3cret", 401}, {"s3cret", 401}, {"Bearer", 401}, {"Bearers3cret", 401},
	} {
		req, _ := http.NewRequest(http.MethodGet, ts.url+"/v1/tasks", nil)
		req.Header.Set("Authorization", tt.header)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("Authorization %q: %d, want %d", tt.header, resp.StatusCode, tt.want)
		}
	}
}

// Refused clients are told to come back at spread times, not all in the
// same second.
func TestRetryAfterIsJittered(t *testing.T) {
	seen := map[time.Duration]bool{}
	for range 50 {
		secs, exact := jitter(4, 4*time.Second)
		if exact < 4*time.Second || exact > 6*time.Second || secs < 4 || secs > 6 {
			t.Fatalf("jitter(4s) = %d, %s: want within [4s, 6s]", secs, exact)
		}
		seen[exact] = true
	}
	if len(seen) < 10 {
		t.Errorf("50 refusals got %d distinct delays", len(seen))
	}
}

// A request whose body would pass serve.inflight_mb is answered 429 with
// Retry-After; the bytes come back when the requests holding them end.
func TestInflightBytesBound(t *testing.T) {
	f := &fakeScorer{gate: make(chan struct{})}
	ts := startServer(t, f, func(o *Options) { o.InflightBytes = 3 << 10; o.MaxBody = 2 << 10 })
	body := fmt.Sprintf(`{"instance_id": "acme__widget-1", "patches": [%q]}`, strings.Repeat("a", 1500))
	first := make(chan answer, 1)
	go func() { first <- do(t, http.MethodPost, ts.url+"/v1/score", "", body) }()
	waitDepth(t, ts.Server, 1, 0)
	a := do(t, http.MethodPost, ts.url+"/v1/score", "", body)
	if a.code != 429 || a.header.Get("Retry-After") == "" || !strings.Contains(string(a.body), "serve.inflight_mb") {
		t.Errorf("second request past the bytes: %d %s (Retry-After %q)", a.code, a.body, a.header.Get("Retry-After"))
	}
	f.gate <- struct{}{}
	if a := <-first; a.code != 200 {
		t.Errorf("first request: %d %s", a.code, a.body)
	}
	if held := ts.Server.bodies.held(); held != 0 {
		t.Errorf("%d bytes still held after every request ended", held)
	}
	go func() { f.gate <- struct{}{} }()
	other := strings.Replace(body, "aaaa", "bbbb", 1) // not the cached verdict
	if a := do(t, http.MethodPost, ts.url+"/v1/score", "", other); a.code != 200 {
		t.Errorf("after the first ended: %d %s", a.code, a.body)
	}
}

// What a client sent reaches the console cut (it keeps the last steps'
// completions), while the answer carries it whole when asked.
func TestConsoleEventsAreCut(t *testing.T) {
	ts := startServer(t, &fakeScorer{}, func(o *Options) { o.MaxBody = 1 << 20 })
	patch := "apply " + strings.Repeat("p", 100<<10)
	a, resp := score(t, ts, ScoreRequest{InstanceID: "acme__widget-1", Patches: []string{patch}, ReturnPatches: true})
	if a.code != 200 || resp.Verdicts[0].Patch != patch {
		t.Fatalf("%d: the answer's patch is %d bytes, want the %d sent", a.code, len(resp.Verdicts[0].Patch), len(patch))
	}
	ts.events.mu.Lock()
	defer ts.events.mu.Unlock()
	n := 0
	for _, ev := range ts.events.evs {
		if c, ok := ev.(event.CompletionScored); ok {
			n++
			if len(c.Completion) > shownBytes+64 || len(c.Verdict.Patch) > shownBytes+64 || !strings.Contains(c.Completion, "more bytes not shown") {
				t.Errorf("the console gets %d and %d bytes of a %d-byte patch", len(c.Completion), len(c.Verdict.Patch), len(patch))
			}
		}
	}
	if n != 1 {
		t.Errorf("%d completions published", n)
	}
}

func TestClip(t *testing.T) {
	for _, tt := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"0123456789abc", 10, "0123456789\n... [3 more bytes not shown]\n"},
		{"ééé", 3, "é\n... [4 more bytes not shown]\n"},
	} {
		if got := clip(tt.in, tt.n); got != tt.want {
			t.Errorf("clip(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
		}
	}
}
