package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/task"
)

// Scorer is what the server needs of the reward engine: *reward.Scorer.
// One verdict per diff, in order; the error only for a bad phase or a
// cancelled ctx.
type Scorer interface {
	ScoreDiffs(ctx context.Context, inst *task.Instance, diffs []string, phase string) ([]event.Verdict, error)
}

// PoolState is what the server shows of the sandbox pool: *sandbox.Pool.
type PoolState interface {
	State() event.PoolState
}

// Options configure a Server. FromConfig fills the limits from [serve].
type Options struct {
	Scorer Scorer
	// Tasks are the loaded dataset, named by instance_id in requests.
	Tasks []*task.Instance
	// Decode reads an instance given whole in a request (task.DecodeInstance
	// with the server's config); nil refuses such requests.
	Decode func(data []byte) (task.Instance, error)
	// Pool is the sandbox pool, for /metrics and /healthz; nil when Docker
	// is unavailable, and DockerErr says why: docker-phase requests are
	// then answered 503 with it.
	Pool      PoolState
	DockerErr error
	Hosts     []string // the Docker endpoints, for the console's header
	// Token is the bearer token every request but /healthz must carry; ""
	// is allowed only on a loopback address.
	Token          string
	Concurrency    int           // requests scored at once (at least 1)
	Queue          int           // requests waiting at most
	MaxPatches     int           // patches in one request at most
	MaxBody        int64         // request body bytes at most
	RequestTimeout time.Duration // a request's whole time, waiting included
	Drain          time.Duration // how long a stop lets requests in flight finish
	CacheEntries   int           // verdicts cached; 0: none
	CacheBytes     int64         // and the bytes they hold at most (0: 64 MiB)
	InflightBytes  int64         // request bodies held at once, at most
	BodyTimeout    time.Duration // for a request's headers and body to arrive
	// Events receives each scored request as a step (the console charts
	// and lists them), a line per refused request, and the server's start
	// and stop; nil discards them.
	Events event.Publisher
	// RequestLines adds a line (event.Message) per scored request too: the
	// headless output, where no console shows the steps.
	RequestLines bool
	// Name titles the console ("" : the address).
	Name string
	// OpenSession opens the agents' sessions (/v1/sessions); nil serves
	// none. Sessions bounds them.
	OpenSession SessionOpener
	Sessions    SessionLimits
	// Verifier, when set, scores every patch of /v1/score beside its
	// verdict and answers /v1/verify; nil: /v1/verify answers 404.
	Verifier Verifier
}

// TokenEnv holds the bearer token when serve.token_file names no file.
const TokenEnv = "SWETUI_SERVE_TOKEN"

// ErrEmptyTokenFile refuses a serve.token_file that holds no token.
var ErrEmptyTokenFile = errors.New("serve.token_file holds no token")

// Token is the bearer token clients must send: serve.token_file's
// content, else $SWETUI_SERVE_TOKEN, else none.
func Token(c config.Serve) (string, error) {
	if c.TokenFile == "" {
		return strings.TrimSpace(os.Getenv(TokenEnv)), nil
	}
	b, err := os.ReadFile(c.TokenFile)
	if err != nil {
		return "", fmt.Errorf("serve: token: %w", err)
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return "", fmt.Errorf("%s: %w", c.TokenFile, ErrEmptyTokenFile)
	}
	return token, nil
}

// FromConfig fills Options' limits from [serve]; workers is
// sandbox.workers, the default concurrency.
func FromConfig(c config.Serve, workers int) Options {
	conc := c.Concurrency
	if conc <= 0 {
		conc = max(workers, 1)
	}
	entries := c.CacheEntries
	if c.CacheMB == 0 {
		entries = 0 // serve.cache_mb = 0 turns the cache off too
	}
	return Options{Concurrency: conc, Queue: c.Queue, MaxPatches: c.MaxPatches, MaxBody: int64(c.MaxBodyKB) << 10,
		RequestTimeout: time.Duration(c.RequestTimeoutS) * time.Second, Drain: time.Duration(c.DrainS) * time.Second,
		CacheEntries: entries, CacheBytes: int64(c.CacheMB) << 20, InflightBytes: int64(c.InflightMB) << 20,
		BodyTimeout: time.Duration(c.BodyTimeoutS) * time.Second}
}

// ErrNeedToken refuses to serve off loopback without a bearer token.
var ErrNeedToken = errors.New("a bearer token is required on an address that is not loopback (serve.token_file or $SWETUI_SERVE_TOKEN)")

// IsLoopback reports whether a listen address (host:port) accepts only
// local connections: localhost or a loopback IP. An empty host, 0.0.0.0,
// :: and every name but localhost listen further.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// known is an instance of the dataset with its content hash.
type known struct {
	inst *task.Instance
	hash string
}

// Server answers the API over a Scorer. Make it with New, run it with
// Serve; it is also the console's Controller.
type Server struct {
	opts   Options
	byID   map[string]known
	queue  *admission
	cache  *cache
	bodies *bodyBudget
	live   sessions
	m      *metrics

	// base is every request's context: cancelled when a stop has waited
	// Drain, which cancels the evaluations in flight.
	base       context.Context
	cancelBase context.CancelFunc
	stopOnce   sync.Once
	stopCh     chan struct{}
	stopping   atomic.Bool
	seq        atomic.Int64 // scored requests: the console's steps
	started    time.Time
	pauseMu    sync.Mutex
	paused     bool
}

// New checks opts and builds the server. addr is where it is to listen,
// for the loopback rule.
func New(addr string, opts Options) (*Server, error) {
	if opts.Scorer == nil {
		return nil, errors.New("serve: no scorer")
	}
	if opts.Token == "" && !IsLoopback(addr) {
		return nil, fmt.Errorf("serve %s: %w", addr, ErrNeedToken)
	}
	if opts.Events == nil {
		opts.Events = event.Discard
	}
	if opts.MaxPatches <= 0 {
		opts.MaxPatches = 64
	}
	if opts.MaxBody <= 0 {
		opts.MaxBody = 16 << 20
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = 30 * time.Minute
	}
	if opts.CacheBytes <= 0 {
		opts.CacheBytes = 64 << 20
	}
	if opts.InflightBytes <= 0 {
		opts.InflightBytes = 256 << 20
	}
	if opts.BodyTimeout <= 0 {
		opts.BodyTimeout = time.Minute
	}
	if opts.Name == "" {
		opts.Name = "swetui serve " + addr
	}
	s := &Server{opts: opts, byID: make(map[string]known, len(opts.Tasks)), queue: newAdmission(opts.Concurrency, opts.Queue),
		cache: newCache(opts.CacheEntries, opts.CacheBytes), bodies: &bodyBudget{limit: opts.InflightBytes},
		stopCh: make(chan struct{}), started: time.Now(), live: sessions{byID: map[string]*liveSession{}}}
	if s.opts.Sessions.Idle <= 0 {
		s.opts.Sessions.Idle = 10 * time.Minute
	}
	if s.opts.Sessions.MaxTimeout <= 0 {
		s.opts.Sessions.MaxTimeout = time.Minute
	}
	for _, in := range opts.Tasks {
		h, err := instanceHash(in)
		if err != nil {
			return nil, err
		}
		s.byID[in.InstanceID] = known{in, h}
	}
	s.base, s.cancelBase = context.WithCancel(context.Background())
	s.m = newMetrics(s)
	return s, nil
}

// Handler is the API: auth, limits and metrics included.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/v1/score", s.m.instrument("/v1/score", s.auth(http.HandlerFunc(s.handleScore))))
	mux.Handle("/v1/tasks", s.m.instrument("/v1/tasks", s.auth(http.HandlerFunc(s.handleTasks))))
	mux.Handle("/v1/verify", s.m.instrument("/v1/verify", s.auth(http.HandlerFunc(s.handleVerify))))
	sess := s.m.instrument("/v1/sessions", s.auth(http.HandlerFunc(s.handleSessions)))
	mux.Handle("/v1/sessions", sess)
	mux.Handle("/v1/sessions/", sess)
	mux.Handle("/healthz", s.m.instrument("/healthz", http.HandlerFunc(s.handleHealth)))
	mux.Handle("/metrics", s.m.instrument("/metrics", s.auth(s.m.handler())))
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such endpoint: POST /v1/score, GET /v1/tasks, /v1/sessions, GET /healthz, GET /metrics")
	}))
	return mux
}

// Serve answers on l until ctx ends or Stop is called, then stops
// gracefully: no new requests, waiting ones answered 503, those being
// scored given Drain to finish and then cancelled. It returns when every
// handler has; the caller then closes the pool, which removes the
// containers.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	hs := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       s.opts.BodyTimeout, // headers and body
		WriteTimeout:      s.opts.RequestTimeout + time.Minute,
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return s.base },
		ErrorLog:          log.New(io.Discard, "", 0), // TLS probes and resets are no news
	}
	s.publish(event.RunInfo{Name: s.opts.Name, Hosts: s.opts.Hosts, Started: s.started})
	detail := fmt.Sprintf("http://%s, %d tasks, %d at once, queue %d", l.Addr(), len(s.byID), s.queue.limit, s.queue.queue)
	s.publish(event.StageChanged{Stage: "serve", Detail: detail})
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(l) }()
	reapStop, reaped := make(chan struct{}), make(chan struct{})
	go func() { defer close(reaped); s.reapIdle(reapStop) }()
	defer func() { close(reapStop); <-reaped }() // every session closed before the caller closes the pool
	var why string
	select {
	case <-ctx.Done():
		why = "signal"
	case <-s.stopCh:
		why = "stopped from the console"
	case err := <-errc:
		s.cancelBase()
		s.publish(event.Stopped{Step: int(s.seq.Load()), Reason: "listener failed", Err: err})
		return fmt.Errorf("serve: %w", err)
	}
	s.stopping.Store(true)
	s.queue.stop()
	running, _ := s.queue.depth()
	s.message(event.Info, fmt.Sprintf("stopping (%s): %d requests being scored get %s to finish", why, running, s.opts.Drain))
	dctx, cancel := context.WithTimeout(context.Background(), s.opts.Drain)
	err := hs.Shutdown(dctx)
	cancel()
	if err != nil {
		running, _ = s.queue.depth()
		s.message(event.Warn, fmt.Sprintf("drain time passed: cancelling %d requests and their evaluations", running))
		s.cancelBase()
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err = hs.Shutdown(cctx)
		cancel()
	}
	s.cancelBase()
	<-errc // http.ErrServerClosed
	s.publish(event.Stopped{Step: int(s.seq.Load()), Reason: why, Err: err})
	if err != nil {
		return fmt.Errorf("serve: stop: %w", err)
	}
	return nil
}

func (s *Server) publish(ev event.Event) { s.opts.Events.Publish(ev) }

func (s *Server) message(level event.Level, text string) {
	s.publish(event.Message{Level: level, Text: text, Time: time.Now()})
}

// The console's controls (ui.Controller). Each returns at once; the
// server acknowledges with an event.

// Pause holds the queue: requests being scored finish, waiting ones wait
// (new ones queue, up to serve.queue).
func (s *Server) Pause() { s.setPaused(true) }

// Resume starts the waiting requests again.
func (s *Server) Resume() { s.setPaused(false) }

func (s *Server) setPaused(p bool) {
	s.pauseMu.Lock()
	s.paused = p
	s.queue.setPaused(p)
	s.pauseMu.Unlock()
	step := int(s.seq.Load())
	if p {
		s.publish(event.Paused{Step: step})
	} else {
		s.publish(event.Resumed{Step: step})
	}
}

func (s *Server) isPaused() bool {
	s.pauseMu.Lock()
	defer s.pauseMu.Unlock()
	return s.paused
}

// SetPhase does nothing: each request names its phase.
func (s *Server) SetPhase(phase string) {
	s.message(event.Info, "the server has no phase of its own: each request names one (\"phase\": syntax, apply-only or docker)")
}

// SetAuto does nothing: the server has no curriculum.
func (s *Server) SetAuto(on bool) {
	s.message(event.Info, "the server has no curriculum to advance")
}

// SaveNow does nothing: the server keeps no state worth saving (the
// verdict cache lives as long as the process).
func (s *Server) SaveNow() {
	s.message(event.Info, "the server has nothing to save: verdicts go to the clients")
}

// Stop stops the server as a signal does. Idempotent.
func (s *Server) Stop() { s.stopOnce.Do(func() { close(s.stopCh) }) }

// Replay re-scores one completion of a dataset instance in the docker
// phase, past the cache; its verdict arrives as a CompletionScored with
// Step -1.
func (s *Server) Replay(instanceID, completion string) {
	k, ok := s.byID[instanceID]
	if !ok {
		s.message(event.Warn, fmt.Sprintf("replay: %s is not in the dataset (an instance sent whole is not kept)", instanceID))
		return
	}
	go func() {
		release, err := s.queue.acquire(s.base)
		if err != nil {
			s.message(event.Warn, fmt.Sprintf("replay %s: %v", instanceID, err))
			return
		}
		defer release()
		phase := config.PhaseDocker
		if s.opts.DockerErr != nil {
			phase = config.PhaseApplyOnly
		}
		vs, err := s.opts.Scorer.ScoreDiffs(s.base, k.inst, []string{completion}, phase)
		if err != nil {
			s.message(event.Warn, fmt.Sprintf("replay %s: %v", instanceID, err))
			return
		}
		s.publish(event.CompletionScored{Step: -1, Completion: completion, Verdict: vs[0], IssueText: k.inst.ProblemStatement})
	}()
}
