package serve

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/task"
)

// The agent's environment over HTTP: a confined session per trajectory
// where another trainer's agent runs commands, then a verdict of its diff,
// graded as /v1/score grades a patch.
//
//	POST   /v1/sessions                {instance_id}          → 201 {session_id, instance_id, problem_statement, workdir, expires_in_s}
//	POST   /v1/sessions/{id}/exec      {command, timeout_s}   → {exit_code, output, output_bytes, timed_out, duration_s}
//	POST   /v1/sessions/{id}/submit    {phase}                → /v1/score's answer for the session's diff; the session ends
//	DELETE /v1/sessions/{id}                                  → 204
//	GET    /v1/sessions                                       → {count, sessions: [...]}

// Session is one sandbox session as the server drives it (a
// sandbox.Session on the pool's hosts; app adapts it).
type Session interface {
	// Exec runs a shell command line in the work tree, killing it and all
	// it started at timeout, keeping the head and tail of its output.
	Exec(ctx context.Context, command string, timeout time.Duration) (ExecResponse, error)
	// Diff is the work tree's change from the base commit, as swetui
	// computes it.
	Diff(ctx context.Context) (string, error)
	Close() error
}

// SessionOpener opens a session on an instance: its repository at the base
// commit, without the test patch's files.
type SessionOpener func(ctx context.Context, inst *task.Instance) (Session, error)

// SessionLimits bound the sessions a server holds.
type SessionLimits struct {
	Max        int           // open at once, in all
	PerToken   int           // open at once for one bearer token (the clients without one share theirs)
	Idle       time.Duration // a session not used for this long is closed
	MaxTimeout time.Duration // a command's timeout at most (and its default)
	MaxOutput  int           // bytes of a command's output answered, head and tail
	// Life is a session's whole life (agent.session_minutes; 0: none):
	// past it the session ends, a command running then killed, and its
	// calls answer 410 saying so.
	Life time.Duration
}

// MinExecTimeout is the shortest timeout a command gets (sandbox's).
const MinExecTimeout = 500 * time.Millisecond

// ExecTimeout is the timeout of a command that asks for secs seconds
// (0 or less: the default, max): clamped in floating point before it
// becomes a Duration, so that 1e10 or 1e300 are max, never an overflow
// that kills at once or never, and at least MinExecTimeout.
func ExecTimeout(secs float64, max time.Duration) time.Duration {
	limit := max.Seconds()
	if !(secs > 0) || secs > limit { // NaN too
		secs = limit
	}
	if d := time.Duration(secs * float64(time.Second)); d > MinExecTimeout {
		return d
	}
	return MinExecTimeout
}

// SessionsFromConfig reads [serve]'s session limits.
func SessionsFromConfig(c config.Serve) SessionLimits {
	return SessionLimits{Max: c.MaxSessions, PerToken: c.SessionsPerToken, Idle: time.Duration(c.SessionIdleS) * time.Second,
		MaxTimeout: time.Duration(c.ExecTimeoutS) * time.Second, MaxOutput: c.ExecOutputKB << 10}
}

// SessionsFromConfigs reads [serve]'s session limits and agent's session
// life (agent.session_minutes).
func SessionsFromConfigs(c config.Serve, a config.Agent) SessionLimits {
	l := SessionsFromConfig(c)
	l.Life = time.Duration(a.SessionMinutes) * time.Minute
	return l
}

// OpenRequest is POST /v1/sessions' body.
type OpenRequest struct {
	InstanceID string `json:"instance_id"`
}

// OpenResponse answers it.
type OpenResponse struct {
	SessionID        string  `json:"session_id"`
	InstanceID       string  `json:"instance_id"`
	ProblemStatement string  `json:"problem_statement"`
	Workdir          string  `json:"workdir"`
	IdleTimeoutS     float64 `json:"idle_timeout_s"`
	// LifeS is the session's whole life (agent.session_minutes), 0 for
	// none.
	LifeS float64 `json:"life_s,omitempty"`
}

// ExecRequest is POST /v1/sessions/{id}/exec's body.
type ExecRequest struct {
	Command  string  `json:"command"`
	TimeoutS float64 `json:"timeout_s,omitempty"`
}

// ExecResponse answers it: the command's exit code (137 when killed at its
// timeout), its output as kept (head and tail of stdout and stderr) and the
// bytes it wrote in all.
type ExecResponse struct {
	ExitCode    int    `json:"exit_code"`
	Output      string `json:"output"`
	OutputBytes int64  `json:"output_bytes"`
	OutputCut   bool   `json:"output_cut"`
	// OutputOmitted is how many bytes of the output were left out (in
	// the middle, where the output says so).
	OutputOmitted int64   `json:"output_omitted_bytes,omitempty"`
	TimedOut      bool    `json:"timed_out"`
	DurationS     float64 `json:"duration_s"`
}

// SubmitRequest is POST /v1/sessions/{id}/submit's body (it may be empty).
type SubmitRequest struct {
	Phase string `json:"phase,omitempty"` // default docker
	// ReturnPatches keeps the verdict's patch, as in /v1/score.
	ReturnPatches bool `json:"return_patches,omitempty"`
}

// SessionInfo is one session as GET /v1/sessions lists it.
type SessionInfo struct {
	SessionID   string  `json:"session_id"`
	InstanceID  string  `json:"instance_id"`
	AgeS        float64 `json:"age_s"`
	IdleS       float64 `json:"idle_s"`
	Commands    int     `json:"commands"`
	LastCommand string  `json:"last_command,omitempty"`
	LastExit    int     `json:"last_exit"`
}

// liveSession is a session the server holds.
type liveSession struct {
	id        string
	inst      *task.Instance
	hash      string
	owner     string // the token's digest
	s         Session
	opened    time.Time
	mu        sync.Mutex // one request at a time
	used      time.Time  // guarded by sessions.mu
	commands  int
	last      string
	lastExit  int
	diffBytes int // the submitted diff's size
	// ended is why it ended, once it has ("" while it runs), end the word
	// for it; guarded by sessions.mu.
	ended string
	end   event.End
}

// sessions are the server's live sessions.
type sessions struct {
	mu   sync.Mutex
	byID map[string]*liveSession
}

func (s *Server) sessionsEnabled() bool { return s.opts.OpenSession != nil }

// owner is the digest of the request's bearer token, as auth reads it
// (not the raw header: "bearer", "BEARER" or two spaces are the same
// token): sessions are the client's who opened them. Clients without a
// token (a server without one) share the empty one.
func owner(r *http.Request) string {
	token, _ := bearerToken(r)
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:8])
}

func (s *Server) handleSessions(w http.ResponseWriter, r *http.Request) {
	if !s.sessionsEnabled() {
		writeError(w, http.StatusServiceUnavailable, "this server holds no sessions: they need a Docker host (the docker phase is unavailable)")
		return
	}
	rest := strings.Trim(strings.TrimPrefix(r.URL.Path, "/v1/sessions"), "/")
	id, action, _ := strings.Cut(rest, "/")
	switch {
	case rest == "" && r.Method == http.MethodGet:
		s.listSessions(w, r)
	case rest == "" && r.Method == http.MethodPost:
		s.openSession(w, r)
	case rest == "":
		w.Header().Set("Allow", "GET, POST")
		writeError(w, http.StatusMethodNotAllowed, "POST to open a session, GET to list them")
	case action == "" && r.Method == http.MethodDelete:
		// Not one request at a time: a running command is cut short, the
		// sandbox removed now.
		if ls := s.ownSession(w, r, id); ls != nil {
			s.endSession(ls, event.EndDeleted, "")
			w.WriteHeader(http.StatusNoContent)
		}
	case action == "exec" && r.Method == http.MethodPost:
		s.withSession(w, r, id, func(ls *liveSession) { s.execSession(w, r, ls) })
	case action == "submit" && r.Method == http.MethodPost:
		s.withSession(w, r, id, func(ls *liveSession) { s.submitSession(w, r, ls) })
	default:
		writeError(w, http.StatusNotFound, fmt.Sprintf("no such endpoint %s %s: POST /v1/sessions/{id}/exec or /submit, DELETE /v1/sessions/{id}", r.Method, quote(r.URL.Path)))
	}
}

func (s *Server) openSession(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r, 64<<10)
	if err != nil {
		s.answerError(w, "POST /v1/sessions", err)
		return
	}
	var req OpenRequest
	if err := decodeStrict(body, &req); err != nil {
		s.answerError(w, "POST /v1/sessions", badRequest("request body: %v", err))
		return
	}
	k, ok := s.byID[req.InstanceID]
	if !ok {
		s.answerError(w, "POST /v1/sessions", &requestError{http.StatusNotFound,
			fmt.Sprintf("instance %s is not in the dataset (GET /v1/tasks lists them)", quote(req.InstanceID))})
		return
	}
	who := owner(r)
	l := s.opts.Sessions
	s.live.mu.Lock()
	mine := 0
	for _, ls := range s.live.byID {
		if ls.owner == who {
			mine++
		}
	}
	total := len(s.live.byID)
	// Counted before the sandbox starts, so that a burst cannot pass the
	// bound while the first ones open.
	ls := &liveSession{id: "s-" + randomID(), inst: k.inst, hash: k.hash, owner: who, opened: time.Now()}
	ls.used = ls.opened
	refuse := ""
	switch {
	case s.stopping.Load():
		refuse = "server stopping"
	case l.Max > 0 && total >= l.Max:
		refuse = fmt.Sprintf("%d sessions open, the most this server holds (serve.max_sessions)", total)
	case l.PerToken > 0 && mine >= l.PerToken:
		refuse = fmt.Sprintf("%d sessions open for this token, the most it may hold (serve.sessions_per_token)", mine)
	default:
		s.live.byID[ls.id] = ls
	}
	s.live.mu.Unlock()
	if refuse != "" {
		s.m.rejected.WithLabelValues("sessions").Inc()
		secs, exact := jitter(max(1, int(l.Idle.Seconds()/10)), max(time.Second, l.Idle/10))
		w.Header().Set("Retry-After", fmt.Sprint(secs))
		writeJSON(w, http.StatusTooManyRequests, errorResponse{Error: refuse, RetryAfterS: exact.Seconds()})
		s.message(event.Warn, fmt.Sprintf("POST /v1/sessions 429 %s: %s", quote(req.InstanceID), refuse))
		return
	}
	sess, err := s.opts.OpenSession(s.base, k.inst)
	if err != nil {
		s.live.mu.Lock()
		delete(s.live.byID, ls.id)
		s.live.mu.Unlock()
		s.answerError(w, "POST /v1/sessions", &requestError{http.StatusServiceUnavailable, fmt.Sprintf("open a session for %s: %v", quote(req.InstanceID), err)})
		return
	}
	s.live.mu.Lock()
	ls.s = sess
	ls.used = time.Now() // idle from when it can be used
	ended := ls.ended
	s.live.mu.Unlock()
	if ended != "" { // deleted, or the server stopped, while it opened
		sess.Close()
		writeError(w, http.StatusGone, fmt.Sprintf("session %s ended while it opened: %s", ls.id, ended))
		return
	}
	writeJSON(w, http.StatusCreated, OpenResponse{SessionID: ls.id, InstanceID: k.inst.InstanceID, ProblemStatement: k.inst.ProblemStatement,
		Workdir: k.inst.WorkdirOrDefault(), IdleTimeoutS: l.Idle.Seconds(), LifeS: l.Life.Seconds()})
	s.message(event.Info, fmt.Sprintf("session %s opened on %s", ls.id, quote(k.inst.InstanceID)))
}

// ownSession is session id if the request's client owns it, or nil,
// answered 404.
func (s *Server) ownSession(w http.ResponseWriter, r *http.Request, id string) *liveSession {
	s.live.mu.Lock()
	ls, ok := s.live.byID[id]
	if ok && ls.owner == owner(r) {
		ls.used = time.Now()
	}
	s.live.mu.Unlock()
	if !ok || ls.owner != owner(r) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no session %s (it ended, was reaped after serve.session_idle_s, or is another client's)", quote(id)))
		return nil
	}
	return ls
}

// withSession runs f on session id, owned by the request's client, one
// request at a time.
func (s *Server) withSession(w http.ResponseWriter, r *http.Request, id string, f func(*liveSession)) {
	ls := s.ownSession(w, r, id)
	if ls == nil {
		return
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	s.live.mu.Lock()
	ended, opened := ls.ended, ls.s != nil
	s.live.mu.Unlock()
	switch {
	case ended != "":
		writeError(w, http.StatusGone, fmt.Sprintf("session %s has ended: %s", quote(id), ended))
		return
	case !opened:
		writeError(w, http.StatusNotFound, fmt.Sprintf("no session %s yet: it is opening", quote(id)))
		return
	}
	f(ls)
	s.live.mu.Lock()
	ls.used = time.Now()
	s.live.mu.Unlock()
}

// expired says why ls has passed its life (EndExpired), or "".
func (s *Server) expired(ls *liveSession, now time.Time) string {
	if l := s.opts.Sessions.Life; l > 0 && now.Sub(ls.opened) >= l {
		return fmt.Sprintf("expired: its life of %s (agent.session_minutes) is spent", l)
	}
	return ""
}

func (s *Server) execSession(w http.ResponseWriter, r *http.Request, ls *liveSession) {
	body, err := readBody(w, r, 1<<20)
	if err != nil {
		s.answerError(w, "POST exec", err)
		return
	}
	var req ExecRequest
	if err := decodeStrict(body, &req); err != nil {
		s.answerError(w, "POST exec", badRequest("request body: %v", err))
		return
	}
	if strings.TrimSpace(req.Command) == "" {
		s.answerError(w, "POST exec", badRequest("no command"))
		return
	}
	l := s.opts.Sessions
	timeout := ExecTimeout(req.TimeoutS, l.MaxTimeout)
	lastWords := false
	if l.Life > 0 {
		left := l.Life - time.Since(ls.opened)
		if left <= 0 {
			why := s.expired(ls, time.Now())
			s.endSession(ls, event.EndExpired, why)
			writeError(w, http.StatusGone, fmt.Sprintf("session %s has ended: %s", ls.id, why))
			return
		}
		if left <= timeout {
			timeout, lastWords = left, true // the session ends then
		}
	}
	res, err := ls.s.Exec(r.Context(), req.Command, timeout)
	s.live.mu.Lock()
	ls.commands++
	ls.last, ls.lastExit = clip(req.Command, 200), res.ExitCode
	n := ls.commands
	ended := ls.ended
	s.live.mu.Unlock()
	if err != nil {
		if ended != "" { // deleted, expired, the server stopping
			writeError(w, http.StatusGone, fmt.Sprintf("session %s has ended: %s", ls.id, ended))
			return
		}
		if why := s.expired(ls, time.Now()); why != "" {
			s.endSession(ls, event.EndExpired, why)
			writeError(w, http.StatusGone, fmt.Sprintf("session %s has ended: %s", ls.id, why))
			return
		}
		if r.Context().Err() != nil {
			return // the client left; its command was killed
		}
		s.endSession(ls, event.EndLost, "")
		writeError(w, http.StatusGone, fmt.Sprintf("session %s is lost: %v", ls.id, err))
		return
	}
	if lastWords && res.TimedOut {
		why := fmt.Sprintf("expired: its life of %s (agent.session_minutes) is spent", l.Life)
		s.endSession(ls, event.EndExpired, why)
		writeError(w, http.StatusGone, fmt.Sprintf("session %s has ended: %s", ls.id, why))
		return
	}
	// The console's Containers pane follows the session as it follows a
	// training trajectory (the console cleans what it draws).
	s.publish(event.TurnPlayed{Session: ls.id, InstanceID: ls.inst.InstanceID, Turn: n, Command: req.Command,
		ExitCode: res.ExitCode, TimedOut: res.TimedOut, Duration: time.Duration(res.DurationS * float64(time.Second)),
		Output: res.Output}.Bounded())
	writeJSON(w, http.StatusOK, res)
}

func (s *Server) submitSession(w http.ResponseWriter, r *http.Request, ls *liveSession) {
	body, err := readBody(w, r, 64<<10)
	if err != nil {
		s.answerError(w, "POST submit", err)
		return
	}
	var req SubmitRequest
	if len(strings.TrimSpace(string(body))) > 0 {
		if err := decodeStrict(body, &req); err != nil {
			s.answerError(w, "POST submit", badRequest("request body: %v", err))
			return
		}
	}
	phase := req.Phase
	if phase == "" {
		phase = config.PhaseDocker
	}
	if err := config.CheckPhase(phase); err != nil {
		s.answerError(w, "POST submit", badRequest("phase %s: want one of %s", quote(phase), strings.Join(config.Phases, ", ")))
		return
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.RequestTimeout)
	defer cancel()
	diff, err := ls.s.Diff(ctx)
	if err != nil {
		// Not the sandbox's failure alone: a broken repository or a diff
		// over its bound earns what an empty patch earns.
		s.message(event.Warn, fmt.Sprintf("session %s: no diff (%v): scored as an empty patch", ls.id, err))
		diff = ""
	}
	ls.diffBytes = len(diff)
	s.endSession(ls, event.EndSubmitted, "")
	release, err := s.queue.acquire(ctx)
	if err != nil {
		s.refuse(ctx, w, r, "submit "+ls.id, err)
		return
	}
	vs, err := s.opts.Scorer.ScoreDiffs(ctx, ls.inst, []string{diff}, phase)
	release()
	if err != nil {
		s.refuse(ctx, w, r, "submit "+ls.id, err)
		return
	}
	v := vs[0]
	v.Log = ""
	s.m.observe(v)
	step := int(s.seq.Add(1))
	s.publish(event.StepStarted{Step: step, Phase: phase, Time: start})
	s.publishEnd(ls, event.EndSubmitted) // again: the step's start cleared the ended rows
	shown := v
	shown.Patch = clip(v.Patch, shownBytes)
	s.publish(event.CompletionScored{Step: step, Completion: clip(diff, shownBytes), Verdict: shown, IssueText: clip(ls.inst.ProblemStatement, shownBytes)})
	elapsed := time.Since(start)
	s.publish(event.StepFinished{Step: step, Phase: phase, Metrics: tallyOf(vs).metrics(0, elapsed), Duration: elapsed})
	if !req.ReturnPatches {
		v.Patch = ""
	}
	s.message(event.Info, fmt.Sprintf("session %s submitted: %s after %d commands", ls.id, tallyOf(vs), ls.commands))
	writeJSON(w, http.StatusOK, ScoreResponse{InstanceID: ls.inst.InstanceID, Phase: phase, Verdicts: []event.Verdict{v},
		Cached: []bool{false}, ElapsedS: elapsed.Seconds()})
}

// endSession closes a session once, whoever calls it, a command of it
// running or not (its Close cuts the command short).
func (s *Server) endSession(ls *liveSession, end event.End, why string) {
	if why == "" {
		why = string(end)
	}
	s.live.mu.Lock()
	delete(s.live.byID, ls.id)
	first := ls.ended == ""
	if first {
		ls.ended, ls.end = why, end
	}
	sess := ls.s
	s.live.mu.Unlock()
	if !first {
		return
	}
	if sess != nil {
		sess.Close()
	}
	s.publishEnd(ls, end)
	s.message(event.Info, fmt.Sprintf("session %s %s after %d commands", ls.id, why, ls.commands))
}

// publishEnd tells the console that a session ended, and why (submitted:
// its diff is graded, the verdict coming as the step's completion).
func (s *Server) publishEnd(ls *liveSession, end event.End) {
	s.live.mu.Lock()
	n := ls.commands
	s.live.mu.Unlock()
	s.publish(event.TurnPlayed{Session: ls.id, InstanceID: ls.inst.InstanceID, Turn: n, End: end, DiffBytes: ls.diffBytes}.Bounded())
}

func (s *Server) listSessions(w http.ResponseWriter, r *http.Request) {
	who := owner(r)
	now := time.Now()
	s.live.mu.Lock()
	out := []SessionInfo{}
	for _, ls := range s.live.byID {
		if ls.owner != who {
			continue
		}
		out = append(out, SessionInfo{SessionID: ls.id, InstanceID: ls.inst.InstanceID, AgeS: now.Sub(ls.opened).Seconds(),
			IdleS: now.Sub(ls.used).Seconds(), Commands: ls.commands, LastCommand: ls.last, LastExit: ls.lastExit})
	}
	s.live.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].SessionID < out[j].SessionID })
	writeJSON(w, http.StatusOK, map[string]any{"count": len(out), "sessions": out})
}

// reapIdle closes the sessions idle past serve.session_idle_s, until
// stop; then every session left.
func (s *Server) reapIdle(stop <-chan struct{}) {
	every := max(time.Second, s.opts.Sessions.Idle/10)
	if l := s.opts.Sessions.Life; l > 0 {
		every = min(every, max(100*time.Millisecond, l/20))
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			s.closeAllSessions(event.EndStopped, "closed: the server stopped")
			return
		case <-tick.C:
		}
		now := time.Now()
		var idle, spent []*liveSession
		s.live.mu.Lock()
		for _, ls := range s.live.byID {
			switch {
			case ls.s != nil && s.expired(ls, now) != "":
				spent = append(spent, ls)
			case ls.s != nil && now.Sub(ls.used) > s.opts.Sessions.Idle:
				idle = append(idle, ls)
			}
		}
		s.live.mu.Unlock()
		for _, ls := range spent { // in use or not: a command running is cut short
			s.endSession(ls, event.EndExpired, s.expired(ls, now))
		}
		for _, ls := range idle {
			if ls.mu.TryLock() { // one in use is not idle
				s.endSession(ls, event.EndReaped, fmt.Sprintf("reaped: idle over %s (serve.session_idle_s)", s.opts.Sessions.Idle))
				ls.mu.Unlock()
			}
		}
	}
}

func (s *Server) closeAllSessions(end event.End, why string) {
	s.live.mu.Lock()
	all := make([]*liveSession, 0, len(s.live.byID))
	for _, ls := range s.live.byID {
		all = append(all, ls)
	}
	s.live.mu.Unlock()
	for _, ls := range all {
		s.endSession(ls, end, why)
	}
}

// answerError writes a request's error and the line that logs it.
func (s *Server) answerError(w http.ResponseWriter, what string, err error) {
	var re *requestError
	if !errors.As(err, &re) {
		re = &requestError{http.StatusInternalServerError, err.Error()}
	}
	writeError(w, re.code, re.msg)
	s.message(event.Warn, fmt.Sprintf("%s %d: %s", what, re.code, re.msg))
}

func randomID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
