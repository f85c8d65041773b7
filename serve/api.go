package serve

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/task"
	"strings"
	"sync/atomic"
)

// ScoreRequest is the body of POST /v1/score: patches for one task, named
// by instance_id (of the loaded dataset) or given whole (instance, a
// dataset record), scored in a phase (default docker).
type ScoreRequest struct {
	InstanceID string          `json:"instance_id,omitempty"`
	Instance   json.RawMessage `json:"instance,omitempty"`
	Patches    []string        `json:"patches,omitempty"`
	Patch      *string         `json:"patch,omitempty"` // one patch: the same as patches [patch]
	Phase      string          `json:"phase,omitempty"`
	Mode       string          `json:"mode,omitempty"` // the older name of phase
	// NoCache scores the patches again even if their verdicts are cached.
	NoCache bool `json:"no_cache,omitempty"`
	// ReturnPatches keeps each verdict's patch (the diff as extracted and
	// normalised) in the answer; without it the answer does not repeat
	// what the client sent.
	ReturnPatches bool `json:"return_patches,omitempty"`
}

// ScoreResponse answers a ScoreRequest: one verdict per patch, in order,
// in the JSON of rollouts.jsonl's verdicts.
type ScoreResponse struct {
	InstanceID string          `json:"instance_id"`
	Phase      string          `json:"phase"`
	Verdicts   []event.Verdict `json:"verdicts"`
	Cached     []bool          `json:"cached"`   // which verdicts came from the cache
	QueuedS    float64         `json:"queued_s"` // time waited for a slot
	ElapsedS   float64         `json:"elapsed_s"`
	// VerifierScores are the server's verifier's probability that each
	// patch resolves the task (swetui serve --verifier), beside its verdict.
	VerifierScores []float64 `json:"verifier_scores,omitempty"`
}

// errorResponse is every answer that is not a 200.
type errorResponse struct {
	Error string `json:"error"`
	// RetryAfterS is Retry-After to the millisecond, for 429 and 503.
	RetryAfterS float64 `json:"retry_after_s,omitempty"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // diffs and issue texts hold < > &
	if err := enc.Encode(v); err != nil {
		code = http.StatusInternalServerError
		buf.Reset()
		fmt.Fprintf(&buf, "{\"error\": %q}\n", "encode answer: "+err.Error())
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(code)
	w.Write(buf.Bytes())
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, errorResponse{Error: msg})
}

// methodIs answers 405 with Allow, saying what to do (as "POST a score
// request"), unless r's method is method.
func methodIs(w http.ResponseWriter, r *http.Request, method, what string) bool {
	if r.Method == method {
		return true
	}
	w.Header().Set("Allow", method)
	writeError(w, http.StatusMethodNotAllowed, method+" "+what)
	return false
}

// auth requires the bearer token, when there is one. The scheme's name is
// matched in any case (RFC 9110 section 11.1), the token exactly.
func (s *Server) auth(h http.Handler) http.Handler {
	if s.opts.Token == "" {
		return h
	}
	want := []byte(s.opts.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := bearerToken(r)
		if !ok || subtle.ConstantTimeCompare([]byte(token), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="swetui"`)
			writeError(w, http.StatusUnauthorized, "missing or wrong bearer token (Authorization: Bearer <token>)")
			return
		}
		h.ServeHTTP(w, r)
	})
}

// bearerToken is the request's bearer token, as auth reads it: the
// scheme's name in any case, the spaces after it dropped; ok is false
// when the header holds no bearer token.
func bearerToken(r *http.Request) (token string, ok bool) {
	scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimLeft(token, " "), true
}

// requestError is a request the server will not score, with its status.
type requestError struct {
	code int
	msg  string
}

func (e *requestError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &requestError{http.StatusBadRequest, fmt.Sprintf(format, args...)}
}

// parsed is a score request made ready to score.
type parsed struct {
	inst          *task.Instance
	hash          string
	phase         string
	patches       []string
	noCache       bool
	returnPatches bool
}

// parse reads and checks a score request's body: exactly one object of
// ScoreRequest's keys (decodeStrict). A verify request has the same body
// and runs nothing: run false skips the docker phase's availability.
func (s *Server) parse(w http.ResponseWriter, r *http.Request, run bool) (parsed, error) {
	body, err := readBody(w, r, s.opts.MaxBody)
	if err != nil {
		return parsed{}, err
	}
	var req ScoreRequest
	if err := decodeStrict(body, &req); err != nil {
		return parsed{}, badRequest("request body: %v", err)
	}
	body = nil
	p := parsed{phase: req.Phase, patches: req.Patches, noCache: req.NoCache, returnPatches: req.ReturnPatches}
	switch {
	case p.phase == "" && req.Mode == "":
		p.phase = config.PhaseDocker
	case p.phase == "":
		p.phase = req.Mode
	case req.Mode != "" && req.Mode != p.phase:
		return parsed{}, badRequest("phase %s and mode %s disagree (mode is phase's older name)", quote(p.phase), quote(req.Mode))
	}
	if err := config.CheckPhase(p.phase); err != nil {
		return parsed{}, badRequest("phase %s: want one of %s", quote(p.phase), strings.Join(config.Phases, ", "))
	}
	if req.Patch != nil {
		p.patches = append(p.patches, *req.Patch)
	}
	switch n := len(p.patches); {
	case n == 0:
		return parsed{}, badRequest("no patches (\"patches\": [diff, ...] or \"patch\": diff)")
	case n > s.opts.MaxPatches:
		return parsed{}, badRequest("%d patches: at most %d in one request (serve.max_patches)", n, s.opts.MaxPatches)
	}
	switch {
	case req.InstanceID != "" && len(req.Instance) > 0:
		return parsed{}, badRequest("both instance_id and instance: name a dataset instance or give one whole, not both")
	case req.InstanceID != "":
		k, ok := s.byID[req.InstanceID]
		if !ok {
			return parsed{}, &requestError{http.StatusNotFound, fmt.Sprintf("instance %s is not in the dataset (GET /v1/tasks lists them)", quote(req.InstanceID))}
		}
		p.inst, p.hash = k.inst, k.hash
	case len(req.Instance) > 0:
		if s.opts.Decode == nil {
			return parsed{}, badRequest("this server takes only instances of its dataset (serve.inline_instances = false): send instance_id")
		}
		in, err := s.opts.Decode(req.Instance)
		if err != nil {
			return parsed{}, badRequest("instance: %v", err)
		}
		if p.hash, err = instanceHash(&in); err != nil {
			return parsed{}, badRequest("%v", err)
		}
		p.inst = &in
	default:
		return parsed{}, badRequest("no task: send instance_id (GET /v1/tasks lists them) or instance (a whole SWE-bench record)")
	}
	if run && p.phase == config.PhaseDocker && s.opts.DockerErr != nil {
		return parsed{}, &requestError{http.StatusServiceUnavailable, fmt.Sprintf("phase docker unavailable: %v", s.opts.DockerErr)}
	}
	return p, nil
}

func (s *Server) handleScore(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	if !methodIs(w, r, http.MethodPost, "a score request") {
		return
	}
	// The deadline runs from the first byte: reading, parsing and the
	// host-side checks count, not only the wait and the containers.
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.RequestTimeout)
	defer cancel()
	// The body's bytes count against serve.inflight_mb from before it is
	// read until the last use of its patches (which a request past its
	// deadline leaves to the scoring still running).
	p, give, ok := s.takeParsed(ctx, w, r, true, "POST /v1/score")
	if !ok {
		return
	}
	held := newHold(give)
	defer held.done()

	resp := ScoreResponse{InstanceID: p.inst.InstanceID, Phase: p.phase,
		Verdicts: make([]event.Verdict, len(p.patches)), Cached: make([]bool, len(p.patches))}
	keys := make([]string, len(p.patches))
	var todo []int
	for i, patch := range p.patches {
		keys[i] = cacheKey(p.hash, p.phase, patch)
		if !p.noCache {
			if v, ok := s.cache.get(keys[i]); ok {
				resp.Verdicts[i], resp.Cached[i] = v, true
				s.m.cacheHits.WithLabelValues(p.phase).Inc()
				continue
			}
		}
		todo = append(todo, i)
	}
	what := fmt.Sprintf("%s %s: %d patches", quote(p.inst.InstanceID), p.phase, len(p.patches))
	if len(p.patches) == 1 {
		what = fmt.Sprintf("%s %s: 1 patch", quote(p.inst.InstanceID), p.phase)
	}
	var queued time.Duration
	step := 0
	if len(todo) > 0 {
		release, err := s.queue.acquire(ctx)
		queued = time.Since(start)
		if err != nil {
			s.refuse(ctx, w, r, what, err)
			return
		}
		s.m.waitSeconds.Observe(queued.Seconds())
		step = int(s.seq.Add(1))
		s.publish(event.StepStarted{Step: step, Phase: p.phase, Time: time.Now()})
		diffs := make([]string, len(todo))
		for j, i := range todo {
			diffs[j] = p.patches[i]
		}
		// Scored beside the handler, so that the deadline is answered on
		// time even while a CPU-bound check runs; the slot and the body's
		// bytes stay taken until the scoring has ended.
		type scored struct {
			vs  []event.Verdict
			err error
		}
		done := make(chan scored, 1)
		held.add()
		go func() {
			defer held.done()
			vs, err := s.opts.Scorer.ScoreDiffs(ctx, p.inst, diffs, p.phase)
			release()
			done <- scored{vs, err}
		}()
		var res scored
		select {
		case res = <-done:
		case <-ctx.Done():
			res.err = ctx.Err()
		}
		if res.err != nil {
			s.refuse(ctx, w, r, what, res.err)
			s.publish(event.StepFinished{Step: step, Phase: p.phase, Metrics: event.Metrics{InfraFailures: len(todo)}, Duration: time.Since(start)})
			return
		}
		for j, i := range todo {
			v := res.vs[j]
			v.Log = "" // kept beside training runs, never answered or cached
			resp.Verdicts[i] = v
			s.m.observe(v)
			if !v.Infra { // an infrastructure failure is worth trying again
				s.cache.put(keys[i], v)
			}
		}
	} else {
		step = int(s.seq.Add(1))
		s.publish(event.StepStarted{Step: step, Phase: p.phase, Time: time.Now()})
	}
	if s.opts.Verifier != nil {
		scores, err := s.opts.Verifier.Verify(ctx, p.inst, p.patches)
		if err != nil {
			s.refuse(ctx, w, r, what, err)
			return
		}
		resp.VerifierScores = scores
	}
	elapsed := time.Since(start)
	resp.QueuedS, resp.ElapsedS = queued.Seconds(), elapsed.Seconds()
	answer := resp
	if !p.returnPatches {
		answer.Verdicts = make([]event.Verdict, len(resp.Verdicts))
		for i, v := range resp.Verdicts {
			v.Patch = ""
			answer.Verdicts[i] = v
		}
	}
	// The console hears of the step before the client does, so that what a
	// client sees answered is already on the screen and in the log.
	t := tallyOf(resp.Verdicts)
	// The console keeps the last steps' completions: what a client sent is
	// shown cut, so that a hundred requests of large patches cost it
	// megabytes, not the bodies' gigabytes.
	for i, v := range resp.Verdicts {
		v.Patch = clip(v.Patch, shownBytes)
		s.publish(event.CompletionScored{Step: step, Index: i, Completion: clip(p.patches[i], shownBytes), Verdict: v,
			IssueText: clip(p.inst.ProblemStatement, shownBytes)})
	}
	s.publish(event.StepFinished{Step: step, Phase: p.phase, Metrics: t.metrics(queued, elapsed), Duration: elapsed})
	if s.opts.RequestLines {
		if cached := len(p.patches) - len(todo); cached > 0 {
			what += fmt.Sprintf(" (%d cached)", cached)
		}
		s.message(event.Info, fmt.Sprintf("POST /v1/score 200 #%d %s: %s, waited %.1fs, %.2fs", step, what, t, queued.Seconds(), elapsed.Seconds()))
	}
	writeJSON(w, http.StatusOK, answer)
	s.m.reqSeconds.WithLabelValues(p.phase).Observe(elapsed.Seconds())
}

// hold runs release once every holder is done: the handler, and the
// scoring it may leave running past its deadline.
type hold struct {
	n       atomic.Int32
	release func()
}

func newHold(release func()) *hold {
	h := &hold{release: release}
	h.n.Store(1)
	return h
}

func (h *hold) add() { h.n.Add(1) }

func (h *hold) done() {
	if h.n.Add(-1) == 0 {
		h.release()
	}
}

// refuse answers a request that was not scored: the queue was full, the
// server is stopping, the request timed out, or its client left.
func (s *Server) refuse(ctx context.Context, w http.ResponseWriter, r *http.Request, what string, err error) {
	code, msg := http.StatusInternalServerError, err.Error()
	retry := false
	switch {
	case errors.Is(err, errQueueFull):
		s.m.rejected.WithLabelValues("queue_full").Inc()
		running, waiting := s.queue.depth()
		code, msg, retry = http.StatusTooManyRequests, fmt.Sprintf("queue full: %d being scored, %d waiting (serve.queue)", running, waiting), true
	case errors.Is(err, errBudget):
		s.m.rejected.WithLabelValues("inflight_bytes").Inc()
		code, msg, retry = http.StatusTooManyRequests, fmt.Sprintf("the server holds %d MiB of requests already (serve.inflight_mb)", s.bodies.held()>>20), true
	case errors.Is(err, errStopping):
		s.m.rejected.WithLabelValues("stopping").Inc()
		code, msg, retry = http.StatusServiceUnavailable, "server stopping", true
	case s.base.Err() != nil:
		code, msg, retry = http.StatusServiceUnavailable, "server stopping: the evaluation was cancelled", true
	case errors.Is(ctx.Err(), context.DeadlineExceeded) && r.Context().Err() == nil:
		code, msg = http.StatusGatewayTimeout, fmt.Sprintf("request took over %s (serve.request_timeout_s); its evaluations were cancelled", s.opts.RequestTimeout)
	case r.Context().Err() != nil:
		s.message(event.Warn, fmt.Sprintf("POST /v1/score %s: the client left; its evaluations were cancelled", what))
		return
	}
	if retry {
		secs, exact := jitter(s.queue.retryAfter())
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		writeJSON(w, code, errorResponse{Error: msg, RetryAfterS: math.Round(exact.Seconds()*1000) / 1000})
		s.message(event.Warn, fmt.Sprintf("POST /v1/score %d %s: %s, retry after %ds", code, what, msg, secs))
		return
	}
	writeError(w, code, msg)
	s.message(event.Warn, fmt.Sprintf("POST /v1/score %d %s: %s", code, what, msg))
}

// jitter spreads the clients refused together over up to half as long
// again, so that they do not all come back in the same second.
func jitter(secs int, exact time.Duration) (int, time.Duration) {
	exact += time.Duration(rand.Int64N(int64(exact)/2 + 1))
	return int(min(max(math.Ceil(exact.Seconds()), 1), 90)), exact
}

// tally is a request's verdicts in numbers.
type tally struct {
	n, valid, applied, resolved, infra, hacked int
	sum, max                                   float64
}

func tallyOf(vs []event.Verdict) tally {
	var t tally
	for _, v := range vs {
		t.n++
		if v.Infra {
			t.infra++
			continue
		}
		t.valid += b2i(v.SyntaxOK)
		t.applied += b2i(v.Applied)
		t.resolved += b2i(v.Resolved)
		t.hacked += b2i(len(v.Hacks) > 0)
		t.sum += v.Reward
		t.max = math.Max(t.max, v.Reward)
	}
	return t
}

func (t tally) String() string {
	mean := "-"
	if scored := t.n - t.infra; scored > 0 {
		mean = fmt.Sprintf("%.3f", t.sum/float64(scored))
	}
	return fmt.Sprintf("valid %d applied %d resolved %d hacks %d infra %d, reward mean %s max %.2f",
		t.valid, t.applied, t.resolved, t.hacked, t.infra, mean, t.max)
}

// metrics are a request's numbers as the console charts a step's.
func (t tally) metrics(queued, elapsed time.Duration) event.Metrics {
	m := event.Metrics{InfraFailures: t.infra, RewardMax: t.max, PatchesApplied: t.applied,
		WaitSeconds: queued.Seconds(), RewardSeconds: (elapsed - queued).Seconds(), StepSeconds: elapsed.Seconds()}
	if scored := float64(t.n - t.infra); scored > 0 {
		m.RewardMean = t.sum / scored
		m.SyntaxRate, m.ApplyRate = float64(t.valid)/scored, float64(t.applied)/scored
		m.ResolvedRate, m.HackRate = float64(t.resolved)/scored, float64(t.hacked)/scored
	}
	return m
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// taskSummary is one instance as GET /v1/tasks lists it: what a trainer
// needs to prompt for it (full=1 adds every field, the gold patch too).
type taskSummary struct {
	InstanceID       string `json:"instance_id"`
	Repo             string `json:"repo"`
	BaseCommit       string `json:"base_commit"`
	Split            string `json:"split"`
	Image            string `json:"image"`
	ProblemStatement string `json:"problem_statement"`
	FailToPass       int    `json:"fail_to_pass"`
	PassToPass       int    `json:"pass_to_pass"`
}

func (s *Server) handleTasks(w http.ResponseWriter, r *http.Request) {
	if !methodIs(w, r, http.MethodGet, "the tasks") {
		return
	}
	split := r.URL.Query().Get("split")
	switch split {
	case "", task.SplitAll, task.SplitTrain, task.SplitTest:
	default:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("split %s: want train, test or all", quote(split)))
		return
	}
	full := r.URL.Query().Get("full")
	var out []any
	for _, in := range s.opts.Tasks {
		if split != "" && split != task.SplitAll && in.Split != split {
			continue
		}
		if full == "1" || full == "true" {
			out = append(out, in)
			continue
		}
		out = append(out, taskSummary{InstanceID: in.InstanceID, Repo: in.Repo, BaseCommit: in.BaseCommit, Split: in.Split,
			Image: in.ImageName(), ProblemStatement: in.ProblemStatement, FailToPass: len(in.FailToPass), PassToPass: len(in.PassToPass)})
	}
	if out == nil {
		out = []any{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"count": len(out), "tasks": out})
}

// health is GET /healthz's answer.
type health struct {
	Status  string  `json:"status"` // ok, paused or stopping
	Docker  string  `json:"docker"` // up, or unavailable: why
	HostsUp int     `json:"hosts_up"`
	Hosts   int     `json:"hosts"`
	Tasks   int     `json:"tasks"`
	Running int     `json:"running"`
	Waiting int     `json:"waiting"`
	Scored  int64   `json:"scored_requests"`
	UptimeS float64 `json:"uptime_s"`
}

// handleHealth needs no token: it tells whether the server is up and
// nothing about the tasks.
func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	h := health{Status: "ok", Docker: "up", Tasks: len(s.byID), Scored: s.seq.Load(), UptimeS: time.Since(s.started).Seconds()}
	h.Running, h.Waiting = s.queue.depth()
	if s.opts.DockerErr != nil {
		h.Docker = "unavailable: " + s.opts.DockerErr.Error()
	}
	if s.opts.Pool != nil {
		for _, hs := range s.opts.Pool.State().Hosts {
			h.Hosts++
			if hs.Up {
				h.HostsUp++
			}
		}
		if h.HostsUp == 0 {
			h.Docker = "down: no Docker host answers"
		}
	}
	code := http.StatusOK
	switch {
	case s.stopping.Load():
		h.Status, code = "stopping", http.StatusServiceUnavailable
	case s.isPaused():
		h.Status = "paused"
	}
	writeJSON(w, code, h)
}

// takeBody takes r's body's bytes (its length, or serve.max_body_kb when
// unknown) against serve.inflight_mb, or refuses r (429) when they are not
// free; give returns them.
func (s *Server) takeBody(ctx context.Context, w http.ResponseWriter, r *http.Request) (give func(), ok bool) {
	size := s.opts.MaxBody
	if r.ContentLength >= 0 && r.ContentLength < size {
		size = r.ContentLength
	}
	if !s.bodies.take(size) {
		s.refuse(ctx, w, r, fmt.Sprintf("a body of %d bytes", size), errBudget)
		return nil, false
	}
	return func() { s.bodies.give(size) }, true
}

// takeParsed takes r's body's bytes (takeBody) and parses it (parse, run
// as there); a request refused or not understood is answered, its bytes
// given back, and ok is false. give returns the bytes.
func (s *Server) takeParsed(ctx context.Context, w http.ResponseWriter, r *http.Request, run bool, op string) (p parsed, give func(), ok bool) {
	if give, ok = s.takeBody(ctx, w, r); !ok {
		return p, nil, false
	}
	p, err := s.parse(w, r, run)
	if err != nil {
		give()
		s.answerError(w, op, err)
		return p, nil, false
	}
	return p, give, true
}
