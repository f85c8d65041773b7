package sandbox

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/swetui/swetui/config"
)

// ErrClosed is returned by Submit after Close.
var ErrClosed = errors.New("sandbox pool closed")

// Options configure a Pool. FromConfig fills them from config.toml.
type Options struct {
	Hosts     []string      // Docker endpoints; empty means DOCKER_HOST or the local socket
	Workers   int           // concurrent evaluations
	Queue     int           // evaluations waiting at most; Submit blocks past it
	Timeout   time.Duration // default Spec.Timeout
	User      string        // default Spec.User
	Limits    Limits
	Retries   int           // retries after an infrastructure failure
	Backoff   time.Duration // first retry's delay, doubling (default 1s)
	HostRetry time.Duration // how long a failing host stays out (default 30s)
	RunID     string        // labels containers; "" draws one
	// Dial opens an endpoint (default Connect); tests substitute a fake.
	Dial func(ctx context.Context, endpoint string) (Docker, error)
}

// FromConfig turns the [sandbox] section into Options for run runID.
func FromConfig(c config.Sandbox, runID string) Options {
	return Options{
		Hosts:   append([]string(nil), c.Hosts...),
		Workers: c.Workers,
		Queue:   c.Queue,
		Timeout: time.Duration(c.TimeoutS) * time.Second,
		User:    c.User,
		Limits:  Limits{MemoryMB: c.MemoryMB, CPUs: c.CPUs, PidsLimit: c.PidsLimit, LogCap: c.LogCapKB << 10},
		Retries: c.Retries,
		RunID:   runID,
	}
}

// LogBatch is a batch of complete output lines of one evaluation. Its fields
// are those of train.ContainerLog, so it converts directly.
type LogBatch struct {
	EvalID     string
	Worker     int
	InstanceID string
	Lines      []string
}

// WorkerState is one worker as the pool last saw it. Its fields are those of
// train.WorkerState, so it converts directly.
type WorkerState struct {
	ID          int
	Host        string
	Busy        bool
	InstanceID  string
	ContainerID string
	EvalID      string
	Since       time.Time // start of the current evaluation, or of idleness
	Status      string    // idle, creating, running, backoff
}

// HostState is one Docker endpoint's health.
type HostState struct {
	Endpoint string
	Up       bool
	Active   int       // evaluations running there
	Err      string    // why it is out
	RetryAt  time.Time // when it is tried again
}

// State is a snapshot of the pool (train.PoolState plus hosts and counters).
type State struct {
	Workers       []WorkerState
	Hosts         []HostState
	Queue         int // evaluations waiting
	Done          int // evaluations finished, whatever their outcome
	P50, P95      time.Duration
	Timeouts      int
	InfraFailures int // evaluations that ended in an infrastructure failure
	Retries       int // attempts retried after an infrastructure failure
	DroppedLogs   int // log batches dropped because a subscriber was full
}

// Pool runs evaluations on a fixed set of workers spread over Docker hosts.
type Pool struct {
	opts   Options
	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	queue  chan *job

	mu         sync.Mutex
	closed     bool
	hosts      []*host
	workers    []WorkerState
	subs       map[int]chan LogBatch
	nextSub    int
	done       int
	timeouts   int
	infra      int
	retries    int
	dropped    int
	latencies  []time.Duration // ring of the last latencyWindow totals
	latencyPos int

	reaped     int
	submitting sync.WaitGroup
	running    sync.WaitGroup // workers
	removing   sync.WaitGroup // background removals
	closeOnce  sync.Once
	closeErr   error
}

const latencyWindow = 1024

type host struct {
	endpoint string
	docker   Docker
	runner   *Runner
	up       bool
	active   int
	err      error
	retryAt  time.Time
}

type job struct {
	ctx      context.Context
	spec     Spec
	queued   time.Time
	resultCh chan Result
}

// NewPool connects to the hosts, reaps containers that earlier runs left
// behind and starts the workers. It fails when no host answers, naming each
// endpoint and what to do; hosts that fail while others answer are retried
// later.
func NewPool(ctx context.Context, opts Options) (*Pool, error) {
	if opts.Workers <= 0 {
		return nil, fmt.Errorf("sandbox pool: workers must be positive, got %d", opts.Workers)
	}
	if opts.Queue < 0 {
		opts.Queue = 0
	}
	if opts.Backoff <= 0 {
		opts.Backoff = time.Second
	}
	if opts.HostRetry <= 0 {
		opts.HostRetry = 30 * time.Second
	}
	if opts.Dial == nil {
		opts.Dial = func(ctx context.Context, ep string) (Docker, error) { return Connect(ctx, ep) }
	}
	if opts.RunID == "" {
		opts.RunID = time.Now().UTC().Format("20060102-150405") + "-" + NewNonce()[:6]
	}
	endpoints := opts.Hosts
	if len(endpoints) == 0 {
		endpoints = []string{""}
	}
	p := &Pool{opts: opts, queue: make(chan *job, opts.Queue), subs: map[int]chan LogBatch{}}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	var errs []error
	for _, ep := range endpoints {
		h := &host{endpoint: ep}
		d, err := opts.Dial(ctx, ep)
		if err != nil {
			h.err, h.retryAt = err, time.Now().Add(opts.HostRetry)
			errs = append(errs, err)
		} else {
			p.attach(h, d)
			n, err := Reap(ctx, d)
			p.reaped += n
			if err != nil {
				errs = append(errs, err)
			}
		}
		p.hosts = append(p.hosts, h)
	}
	if p.upHosts() == 0 {
		p.cancel()
		return nil, fmt.Errorf("sandbox pool: no Docker host answers: %w", errors.Join(errs...))
	}
	now := time.Now()
	for i := 0; i < opts.Workers; i++ {
		p.workers = append(p.workers, WorkerState{ID: i, Status: "idle", Since: now})
		p.running.Add(1)
		go p.work(i)
	}
	return p, nil
}

// attach brings h up on client d.
func (p *Pool) attach(h *host, d Docker) {
	name := h.endpoint
	if name == "" {
		name = d.DaemonHost()
	}
	h.docker, h.up, h.err = d, true, nil
	h.runner = &Runner{Docker: d, Endpoint: name, RunID: p.opts.RunID, Limits: p.opts.Limits,
		removeAsync: p.removeLater(d)}
}

// removeLater returns a remover that takes the container's removal off the
// evaluation's critical path; Close waits for it.
func (p *Pool) removeLater(d Docker) func(string) {
	return func(id string) {
		p.removing.Add(1)
		go func() {
			defer p.removing.Done()
			(&Runner{Docker: d}).remove(id)
		}()
	}
}

func (p *Pool) upHosts() int {
	n := 0
	for _, h := range p.hosts {
		if h.up {
			n++
		}
	}
	return n
}

// Reaped is how many stale containers NewPool removed.
func (p *Pool) Reaped() int { return p.reaped }

// RunID is the run id on the pool's container labels.
func (p *Pool) RunID() string { return p.opts.RunID }

// Submit queues spec, blocking while the queue is full, until ctx or the pool
// ends. The result arrives on the returned channel; cancelling ctx cancels
// the evaluation (the result then has Canceled set).
func (p *Pool) Submit(ctx context.Context, spec Spec) (<-chan Result, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	p.submitting.Add(1)
	p.mu.Unlock()
	defer p.submitting.Done()
	if spec.Timeout <= 0 {
		spec.Timeout = p.opts.Timeout
	}
	if spec.User == "" {
		spec.User = p.opts.User
	}
	if spec.ID == "" {
		spec.ID = NewNonce()[:12]
	}
	j := &job{ctx: ctx, spec: spec, queued: time.Now(), resultCh: make(chan Result, 1)}
	select {
	case p.queue <- j:
		return j.resultCh, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("queue evaluation %s: %w", spec.ID, ctx.Err())
	case <-p.ctx.Done():
		return nil, ErrClosed
	}
}

// Run submits spec and waits for its result. The error is set only when the
// evaluation could not be queued.
func (p *Pool) Run(ctx context.Context, spec Spec) (Result, error) {
	ch, err := p.Submit(ctx, spec)
	if err != nil {
		return Result{ID: spec.ID, InstanceID: spec.InstanceID, ExitCode: -1, Canceled: ctx.Err() != nil}, err
	}
	return <-ch, nil
}

// Subscribe returns a channel of log batches of every evaluation and a
// function that ends the subscription. A subscriber that falls more than
// buffer batches behind loses batches (counted in State.DroppedLogs) rather
// than slowing the evaluations down.
func (p *Pool) Subscribe(buffer int) (<-chan LogBatch, func()) {
	if buffer < 1 {
		buffer = 1
	}
	ch := make(chan LogBatch, buffer)
	p.mu.Lock()
	id := p.nextSub
	p.nextSub++
	p.subs[id] = ch
	p.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			if _, ok := p.subs[id]; ok { // Close may have closed it already
				delete(p.subs, id)
				close(ch)
			}
		})
	}
}

func (p *Pool) publish(b LogBatch) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ch := range p.subs {
		select {
		case ch <- b:
		default:
			p.dropped++
		}
	}
}

// State returns a snapshot of the pool.
func (p *Pool) State() State {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := State{
		Workers:       append([]WorkerState(nil), p.workers...),
		Queue:         len(p.queue),
		Done:          p.done,
		Timeouts:      p.timeouts,
		InfraFailures: p.infra,
		Retries:       p.retries,
		DroppedLogs:   p.dropped,
	}
	for _, h := range p.hosts {
		hs := HostState{Endpoint: h.endpoint, Up: h.up, Active: h.active, RetryAt: h.retryAt}
		if hs.Endpoint == "" && h.runner != nil {
			hs.Endpoint = h.runner.Endpoint
		}
		if h.err != nil {
			hs.Err = h.err.Error()
		}
		s.Hosts = append(s.Hosts, hs)
	}
	if n := len(p.latencies); n > 0 {
		l := append([]time.Duration(nil), p.latencies...)
		sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
		s.P50, s.P95 = l[(n-1)*50/100], l[(n-1)*95/100]
	}
	return s
}

func (p *Pool) setWorker(id int, f func(w *WorkerState)) {
	p.mu.Lock()
	f(&p.workers[id])
	p.mu.Unlock()
}

// work is worker id's loop.
func (p *Pool) work(id int) {
	defer p.running.Done()
	for {
		select {
		case <-p.ctx.Done():
			return
		case j := <-p.queue:
			res := p.handle(id, j)
			j.resultCh <- res
			p.record(res)
			now := time.Now()
			p.setWorker(id, func(w *WorkerState) {
				*w = WorkerState{ID: id, Status: "idle", Since: now, Host: w.Host}
			})
		}
	}
}

func (p *Pool) record(res Result) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done++
	if res.TimedOut {
		p.timeouts++
	}
	if res.Infra != nil {
		p.infra++
	}
	if res.Canceled {
		return // a cancelled evaluation says nothing about latency
	}
	if len(p.latencies) < latencyWindow {
		p.latencies = append(p.latencies, res.Durations.Total)
	} else {
		p.latencies[p.latencyPos] = res.Durations.Total
		p.latencyPos = (p.latencyPos + 1) % latencyWindow
	}
}

// handle runs one job with retries after infrastructure failures.
func (p *Pool) handle(wid int, j *job) Result {
	start := time.Now()
	ctx, cancel := context.WithCancel(j.ctx)
	defer cancel()
	stop := context.AfterFunc(p.ctx, cancel)
	defer stop()

	var res Result
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			p.mu.Lock()
			p.retries++
			p.mu.Unlock()
			p.setWorker(wid, func(w *WorkerState) { w.Status = fmt.Sprintf("backoff (retry %d)", attempt) })
			// Exponential with jitter, so workers retrying together spread out.
			d := p.opts.Backoff << (attempt - 1)
			d += time.Duration(rand.Int64N(int64(d)/4 + 1))
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			res = Result{ID: j.spec.ID, InstanceID: j.spec.InstanceID, ExitCode: -1, Canceled: true, Infra: res.Infra}
			break
		}
		res = p.attempt(ctx, wid, j.spec)
		res.Attempts = attempt + 1
		if res.Infra == nil || !retryable(res.Infra) || attempt >= p.opts.Retries {
			break
		}
	}
	res.Durations.Queue = start.Sub(j.queued)
	res.Durations.Total = time.Since(start)
	return res
}

// retryable says whether another try might succeed.
func retryable(err error) bool {
	return !errors.Is(err, ErrImageMissing) && !errors.Is(err, ErrBadSpec) && !strings.Contains(err.Error(), "panicked")
}

// attempt runs spec once on the least busy host that is up.
func (p *Pool) attempt(ctx context.Context, wid int, spec Spec) Result {
	h, err := p.pickHost(ctx)
	if err != nil {
		res := Result{ID: spec.ID, InstanceID: spec.InstanceID, ExitCode: -1}
		if ctx.Err() != nil {
			res.Canceled = true
		} else {
			res.Infra = err
		}
		return res
	}
	defer func() {
		p.mu.Lock()
		h.active--
		p.mu.Unlock()
	}()
	now := time.Now()
	p.setWorker(wid, func(w *WorkerState) {
		*w = WorkerState{ID: wid, Host: h.runner.Endpoint, Busy: true, InstanceID: spec.InstanceID,
			EvalID: spec.ID, Since: now, Status: "creating"}
	})
	lines := &lineSplitter{emit: func(ls []string) {
		p.publish(LogBatch{EvalID: spec.ID, Worker: wid, InstanceID: spec.InstanceID, Lines: ls})
	}}
	hooks := runHooks{
		created: func(cid string) {
			p.setWorker(wid, func(w *WorkerState) { w.ContainerID, w.Status = cid, "running" })
		},
	}
	res := h.runner.run(ctx, spec, lines.write, hooks)
	lines.flush()
	if res.Infra != nil && retryable(res.Infra) {
		p.checkHost(h, res.Infra)
	}
	return res
}

// pickHost returns the up host with the fewest active evaluations, trying
// hosts that are out again once their retry time has come. While none is
// up it waits for the next retry time.
func (p *Pool) pickHost(ctx context.Context) (*host, error) {
	for {
		p.mu.Lock()
		var best *host
		var due []*host
		next := time.Time{}
		for _, h := range p.hosts {
			switch {
			case h.up:
				if best == nil || h.active < best.active {
					best = h
				}
			case !time.Now().Before(h.retryAt):
				due = append(due, h)
			case next.IsZero() || h.retryAt.Before(next):
				next = h.retryAt
			}
		}
		if best != nil {
			best.active++
			p.mu.Unlock()
			return best, nil
		}
		p.mu.Unlock()
		for _, h := range due {
			p.revive(ctx, h)
		}
		if len(due) > 0 {
			continue
		}
		select {
		case <-time.After(time.Until(next)):
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for a Docker host: %w", ctx.Err())
		}
	}
}

// revive tries a host that is out; on failure it stays out for HostRetry.
func (p *Pool) revive(ctx context.Context, h *host) {
	var err error
	d := h.docker
	if d == nil {
		d, err = p.opts.Dial(ctx, h.endpoint)
	} else {
		err = ping(ctx, d, h.endpoint)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		h.err, h.retryAt = err, time.Now().Add(p.opts.HostRetry)
		return
	}
	if h.docker == nil {
		p.attach(h, d)
	} else {
		h.up, h.err = true, nil
	}
}

// checkHost takes h out when it no longer answers after an infrastructure
// failure there, so the retry goes elsewhere.
func (p *Pool) checkHost(h *host, cause error) {
	if err := ping(p.ctx, h.docker, h.endpoint); err == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	h.up, h.err, h.retryAt = false, cause, time.Now().Add(p.opts.HostRetry)
}

// Close cancels running and queued evaluations, waits (until ctx ends) for
// their containers to be removed, removes whatever of this run is left on
// every host and closes the clients. It is idempotent.
func (p *Pool) Close(ctx context.Context) error {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		p.cancel()
		p.submitting.Wait()
		done := make(chan struct{})
		go func() {
			p.running.Wait()
			p.removing.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-ctx.Done():
			p.closeErr = fmt.Errorf("close sandbox pool: evaluations still ending: %w", ctx.Err())
		}
		for {
			select {
			case j := <-p.queue:
				j.resultCh <- Result{ID: j.spec.ID, InstanceID: j.spec.InstanceID, ExitCode: -1, Canceled: true}
				continue
			default:
			}
			break
		}
		var errs []error
		for _, h := range p.hosts {
			if h.docker == nil {
				continue
			}
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
			if _, err := ReapRun(rctx, h.docker, p.opts.RunID); err != nil && h.up {
				errs = append(errs, err)
			}
			cancel()
			h.docker.Close()
		}
		p.closeErr = errors.Join(p.closeErr, errors.Join(errs...))
		p.mu.Lock()
		for _, ch := range p.subs {
			close(ch)
		}
		p.subs = map[int]chan LogBatch{}
		p.mu.Unlock()
	})
	return p.closeErr
}

// lineSplitter turns output chunks into batches of complete lines; the
// chunks Docker delivers are the natural batches.
type lineSplitter struct {
	partial []byte
	emit    func([]string)
}

func (s *lineSplitter) write(b []byte) {
	s.partial = append(s.partial, b...)
	i := strings.LastIndexByte(string(s.partial), '\n')
	if i < 0 {
		return
	}
	text := string(s.partial[:i])
	s.partial = append(s.partial[:0], s.partial[i+1:]...)
	s.emit(strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n"))
}

func (s *lineSplitter) flush() {
	if len(s.partial) > 0 {
		s.emit([]string{string(s.partial)})
		s.partial = nil
	}
}
