package sandbox

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
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
	// Hosts that are up are pinged every HealthEvery (default 5s); one that
	// does not answer within HealthTimeout (default 5s) is taken out and the
	// evaluations there are retried elsewhere: a host whose link is cut
	// sends no error, its streams just stop.
	HealthEvery   time.Duration
	HealthTimeout time.Duration
	RunID         string // labels containers; "" draws one
	// Dial opens an endpoint (default Connect); tests substitute a fake.
	Dial func(ctx context.Context, endpoint string) (Docker, error)
	// Kubernetes configures the k8s:// hosts' Pods.
	Kubernetes config.Kubernetes
	// Events receives the pool's log batches, its state when it changes
	// (at most every StateEvery) and hosts going down and coming back; nil
	// discards them.
	Events event.Publisher
}

// FromConfig turns the [sandbox] section into Options for run runID; the
// Kubernetes hosts pull from prepare.registry unless
// sandbox.kubernetes.registry names another.
func FromConfig(cfg config.Config, runID string) Options {
	c := cfg.Sandbox
	k := c.Kubernetes
	k.ImagePullSecrets = append([]string(nil), k.ImagePullSecrets...)
	if k.Registry == "" {
		k.Registry = cfg.Prepare.Registry
	}
	return Options{
		Kubernetes: k,
		Hosts:      append([]string(nil), c.Hosts...),
		Workers:    c.Workers,
		Queue:      c.Queue,
		Timeout:    time.Duration(c.TimeoutS) * time.Second,
		User:       c.User,
		Limits: Limits{MemoryMB: c.MemoryMB, CPUs: c.CPUs, PidsLimit: c.PidsLimit, LogCap: c.LogCapKB << 10,
			DiskMB: c.DiskMB, TmpMB: c.TmpMB, CapAdd: append([]string(nil), c.CapAdd...), WritableRoot: !c.ReadOnlyRoot},
		Retries: c.Retries,
		RunID:   runID,
	}
}

// Pool runs evaluations on a fixed set of workers spread over Docker hosts.
type Pool struct {
	opts   Options
	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	queue  chan *job
	ready  chan *prepared // prepared jobs, handed to the first free worker

	mu         sync.Mutex
	closed     bool
	hosts      []*host
	workers    []event.WorkerState
	version    int // bumped on every change State shows, so monitor publishes only news
	sessions   int // agent sessions open (OpenSession)
	done       int
	timeouts   int
	infra      int
	retries    int
	changed    chan struct{}   // closed (and replaced) when a host comes back or a slot frees (pickHost waits on it)
	waiting    int             // jobs taken from the queue that no worker runs yet
	latencies  []time.Duration // ring of the last latencyWindow totals
	latencyPos int

	reaped     int
	noHostWait time.Duration // how long an attempt waits for a host to come back
	submitting sync.WaitGroup
	running    sync.WaitGroup // workers, preparers and the host monitor
	removing   sync.WaitGroup // background removals
	closeOnce  sync.Once
	closeErr   error
}

const latencyWindow = 1024

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
	if opts.HealthEvery <= 0 {
		opts.HealthEvery = 5 * time.Second
	}
	if opts.HealthTimeout <= 0 {
		opts.HealthTimeout = pingTimeout
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
	if opts.Events == nil {
		opts.Events = event.Discard
	}
	p := &Pool{opts: opts, queue: make(chan *job, opts.Queue), ready: make(chan *prepared),
		changed: make(chan struct{})}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.noHostWait = opts.HostRetry + pingTimeout + time.Second
	var errs []error
	for _, ep := range endpoints {
		h := &host{endpoint: ep, since: time.Now()}
		b, err := p.open(ctx, ep)
		if err != nil {
			h.err, h.retryAt = err, time.Now().Add(opts.HostRetry)
			errs = append(errs, err)
		} else {
			p.attach(h, b)
			n, err := b.Reap(ctx, Reaping{})
			p.reaped += n
			if err != nil {
				errs = append(errs, err)
			}
		}
		p.hosts = append(p.hosts, h)
	}
	if p.upHosts() == 0 {
		p.cancel()
		return nil, fmt.Errorf("sandbox pool: no host answers: %w", errors.Join(errs...))
	}
	p.running.Add(1)
	go p.monitor()
	now := time.Now()
	for i := 0; i < opts.Workers; i++ {
		p.workers = append(p.workers, event.WorkerState{ID: i, Status: "idle", Since: now})
		p.running.Add(2)
		go p.work(i)
		go p.prepare()
	}
	return p, nil
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
	select {
	case res := <-ch:
		return res, nil
	case <-ctx.Done():
		// Still queued, or its container going: the pool cleans up on its
		// own and the result channel is buffered, so nobody needs to wait.
		select {
		case res := <-ch:
			return res, nil
		default:
			return Result{ID: spec.ID, InstanceID: spec.InstanceID, ExitCode: -1, Canceled: true}, nil
		}
	}
}

// State returns a snapshot of the pool.
func (p *Pool) State() event.PoolState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stateLocked()
}

func (p *Pool) stateLocked() event.PoolState {
	s := event.PoolState{
		Workers:       append([]event.WorkerState(nil), p.workers...),
		Queue:         len(p.queue) + p.waiting,
		Done:          p.done,
		Timeouts:      p.timeouts,
		InfraFailures: p.infra,
		Retries:       p.retries,
		Sessions:      p.sessions,
	}
	for _, h := range p.hosts {
		hs := event.HostState{Endpoint: h.endpoint, Up: h.up, Active: h.active, Since: h.since}
		if !h.up {
			hs.RetryAt = h.retryAt
		}
		if hs.Endpoint == "" && h.backend != nil {
			hs.Endpoint = h.backend.Name()
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

func (p *Pool) setWorker(id int, f func(w *event.WorkerState)) {
	p.mu.Lock()
	f(&p.workers[id])
	p.version++
	p.mu.Unlock()
}

// A job goes through two stages. Preparers take it from the queue, pick a
// host and create its container (copying the files in); workers start it,
// wait for it and hand the removal to the background. So the next
// container is made while the current one runs, off the critical path, and
// a prepared job goes to whichever worker frees first: a stuck evaluation
// holds only its own worker.
type prepared struct {
	j      *job
	ctx    context.Context // the job's context, ended by Close too
	cancel context.CancelFunc
	h      *host // nil when no host could be had (err says why)
	id     string
	err    error
	d      Durations
}

// prepare is a preparer's loop.
func (p *Pool) prepare() {
	defer p.running.Done()
	for {
		select {
		case <-p.ctx.Done():
			return
		case j := <-p.queue:
			p.mu.Lock()
			p.waiting++
			p.mu.Unlock()
			pj := p.prepareOne(j)
			select {
			case p.ready <- pj:
			case <-pj.ctx.Done(): // cancelled, or the pool closes
				p.mu.Lock()
				p.waiting--
				p.mu.Unlock()
				p.release(pj)
				pj.cancel()
				res := Result{ID: j.spec.ID, InstanceID: j.spec.InstanceID, ExitCode: -1, Canceled: true}
				p.record(res)
				j.resultCh <- res
			}
		}
	}
}

func (p *Pool) prepareOne(j *job) *prepared {
	ctx, cancel := context.WithCancel(j.ctx)
	stop := context.AfterFunc(p.ctx, cancel)
	pj := &prepared{j: j, ctx: ctx, cancel: func() { stop(); cancel() }}
	if ctx.Err() != nil {
		return pj
	}
	pj.h, pj.err = p.pickHost(ctx, nil)
	if pj.err != nil {
		return pj
	}
	p.create(ctx, pj)
	if pj.err != nil && pj.id != "" {
		p.removeLater(pj.h, pj.id)
		pj.id = ""
	}
	return pj
}

// create makes pj's sandbox on its host, which is lost or not.
func (p *Pool) create(ctx context.Context, pj *prepared) {
	hctx, release := p.onHost(ctx, pj.h)
	pj.id, pj.err = pj.h.backend.Create(hctx, pj.j.spec, &pj.d)
	if lost := hostLost(hctx); lost != nil && pj.err != nil {
		pj.err = lost
	}
	release()
	p.track(pj)
}

// track counts a prepared job's container among its host's live ones.
func (p *Pool) track(pj *prepared) {
	if pj.id == "" {
		return
	}
	p.mu.Lock()
	pj.h.live[pj.id] = true
	p.mu.Unlock()
}

// release gives up a prepared job's container and host slot.
func (p *Pool) release(pj *prepared) {
	if pj.id != "" {
		p.removeLater(pj.h, pj.id)
		pj.id = ""
	}
	if pj.h != nil {
		p.leave(pj.h)
		pj.h = nil
	}
}

// leave gives back a slot of h and wakes the preparers waiting for room.
func (p *Pool) leave(h *host) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h.active--
	close(p.changed)
	p.changed = make(chan struct{})
}

// work is worker id's loop.
func (p *Pool) work(id int) {
	defer p.running.Done()
	for {
		select {
		case <-p.ctx.Done():
			return
		case pj := <-p.ready:
			p.mu.Lock()
			p.waiting--
			p.mu.Unlock()
			res := p.handle(id, pj)
			// State first, so that a caller who got the result sees it counted.
			p.record(res)
			now := time.Now()
			p.setWorker(id, func(w *event.WorkerState) {
				*w = event.WorkerState{ID: id, Status: "idle", Since: now, Host: w.Host}
			})
			pj.j.resultCh <- res
		}
	}
}

func (p *Pool) record(res Result) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done++
	p.version++
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

// handle runs a prepared job, retrying after infrastructure failures.
func (p *Pool) handle(wid int, pj *prepared) Result {
	start := time.Now()
	defer pj.cancel()
	ctx, spec := pj.ctx, pj.j.spec
	var res Result
	var failedOn *host // where the last attempt failed: the retry goes elsewhere if it can
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			p.mu.Lock()
			p.retries++
			p.mu.Unlock()
			p.setWorker(wid, func(w *event.WorkerState) { w.Status = fmt.Sprintf("backoff (retry %d)", attempt) })
			// Exponential with jitter, so workers retrying together spread out.
			d := p.opts.Backoff << (attempt - 1)
			d += time.Duration(rand.Int64N(int64(d)/4 + 1))
			p.opts.Events.Publish(event.Message{Level: event.Warn, Time: time.Now(), Text: fmt.Sprintf(
				"evaluation of %s failed for infrastructure reasons (%v): retry %d of %d in %s", spec.InstanceID, res.Infra, attempt, p.opts.Retries, d.Round(time.Millisecond))})
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			p.release(pj)
			res = Result{ID: spec.ID, InstanceID: spec.InstanceID, ExitCode: -1, Canceled: true, Infra: res.Infra, Durations: res.Durations}
			break
		}
		if attempt == 0 {
			res, failedOn = p.runPrepared(ctx, wid, pj)
		} else {
			res, failedOn = p.attempt(ctx, wid, spec, failedOn)
		}
		res.Attempts = attempt + 1
		if res.Infra == nil || !retryable(res.Infra) || attempt >= p.opts.Retries {
			break
		}
	}
	if res.Infra != nil && !res.Canceled {
		p.opts.Events.Publish(event.Message{Level: event.Warn, Time: time.Now(), Text: fmt.Sprintf(
			"evaluation of %s is an infrastructure failure after %d attempts, masked out of the advantage: %v", spec.InstanceID, res.Attempts, res.Infra)})
	}
	res.Durations.Queue = start.Sub(pj.j.queued)
	res.Durations.Total = time.Since(start)
	return res
}

// retryable says whether another try might succeed.
func retryable(err error) bool {
	return !errors.Is(err, ErrImageMissing) && !errors.Is(err, ErrBadSpec) && !errors.Is(err, ErrPanic)
}

// attempt runs spec once on the least busy host that is up, another than
// avoid if one is; it says where it ran.
func (p *Pool) attempt(ctx context.Context, wid int, spec Spec, avoid *host) (Result, *host) {
	pj := &prepared{j: &job{spec: spec}}
	pj.h, pj.err = p.pickHost(ctx, avoid)
	if pj.err == nil {
		p.create(ctx, pj)
	}
	return p.runPrepared(ctx, wid, pj)
}

// runPrepared runs a prepared sandbox on its worker and frees its host
// slot; it says where it ran.
func (p *Pool) runPrepared(ctx context.Context, wid int, pj *prepared) (Result, *host) {
	spec := pj.j.spec
	if pj.h == nil {
		res := Result{ID: spec.ID, InstanceID: spec.InstanceID, ExitCode: -1}
		if ctx.Err() != nil {
			res.Canceled = true
		} else {
			res.Infra = pj.err
		}
		return res, nil
	}
	h := pj.h
	defer p.leave(h)
	now := time.Now()
	p.setWorker(wid, func(w *event.WorkerState) {
		*w = event.WorkerState{ID: wid, Host: h.backend.Name(), Busy: true, InstanceID: spec.InstanceID,
			EvalID: spec.ID, Since: now, Status: "starting"}
	})
	lines := &lineSplitter{emit: func(ls []string) {
		p.opts.Events.Publish(event.LogBatch{EvalID: spec.ID, Worker: wid, InstanceID: spec.InstanceID, Lines: ls})
	}}
	hooks := runHooks{
		created: func(cid string) {
			status := "running"
			if pl, ok := h.backend.(Placement); ok {
				if where := pl.Where(cid); where != "" {
					status = "running on " + where
				}
			}
			p.setWorker(wid, func(w *event.WorkerState) { w.ContainerID, w.Status = cid, status })
		},
	}
	res := Result{ID: spec.ID, InstanceID: spec.InstanceID, Host: h.backend.Name(), ExitCode: -1, Durations: pj.d}
	hctx, release := p.onHost(ctx, h)
	res = finish(hctx, h.backend, func(id string) time.Duration { p.removeLater(h, id); return 0 },
		spec, pj.id, pj.err, res, lines.write, hooks)
	release()
	pj.id, pj.h = "", nil
	lines.flush()
	if res.Infra != nil && retryable(res.Infra) && !errors.Is(res.Infra, ErrHostDown) {
		p.checkHost(h, res.Infra)
	}
	return res, h
}

// StateEvery is how often the pool publishes its state, when it changed.
const StateEvery = 500 * time.Millisecond

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
			if h.backend == nil {
				continue
			}
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
			if _, err := h.backend.Reap(rctx, Reaping{RunID: p.opts.RunID}); err != nil && h.up {
				errs = append(errs, err)
			}
			cancel()
			h.backend.Close()
		}
		p.closeErr = errors.Join(p.closeErr, errors.Join(errs...))
	})
	return p.closeErr
}
