package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/swetui/swetui/event"
)

// host is one of the pool's hosts (a Backend: a Docker daemon, a
// Kubernetes namespace). What the pool does with them is
// here: which are up and how busy, a health ping for those that are up and
// a probe for those that are out (monitor), the loss of a host ending the
// evaluations there, and the containers a host kept while it was away.
type host struct {
	endpoint string
	backend  Backend // nil until it was first opened
	up       bool
	active   int
	err      error     // the last error seen; kept after the host comes back
	since    time.Time // when it last went up or down
	retryAt  time.Time
	// live are the containers of this pool's evaluations that are not yet
	// handed to removal; leftovers are those whose removal failed (the
	// daemon was away), removed again as soon as it answers.
	live      map[string]bool
	leftovers map[string]bool
	checking  bool // a health ping is out
	// lost ends, with an ErrHostDown cause, when the host is taken out; the
	// evaluations there end with it. A new one is made when it comes back.
	lost context.Context
	lose context.CancelCauseFunc
}

// ErrHostDown marks an evaluation cut off by the loss of its Docker host:
// an infrastructure failure, retried on another host.
var ErrHostDown = errors.New("docker host lost")

// newLife gives h a fresh lost context; the caller holds p.mu or owns h.
func (h *host) newLife() {
	h.lost, h.lose = context.WithCancelCause(context.Background())
}

// onHost returns ctx ended also when h is lost (with its cause), and the
// function that releases it.
func (p *Pool) onHost(ctx context.Context, h *host) (context.Context, func()) {
	p.mu.Lock()
	lost := h.lost
	p.mu.Unlock()
	c, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(lost, func() { cancel(context.Cause(lost)) })
	return c, func() { stop(); cancel(context.Canceled) }
}

// hostLost is the ErrHostDown cause that ended ctx, or nil.
func hostLost(ctx context.Context) error {
	if ctx.Err() == nil {
		return nil
	}
	if cause := context.Cause(ctx); errors.Is(cause, ErrHostDown) {
		return cause
	}
	return nil
}

// open opens the backend of endpoint: a registered scheme's (k8s://), else
// a Docker daemon through Options.Dial.
func (p *Pool) open(ctx context.Context, endpoint string) (Backend, error) {
	if open := openerFor(endpoint); open != nil {
		return open(ctx, endpoint, BackendConfig{RunID: p.opts.RunID, Limits: p.opts.Limits, Kubernetes: p.opts.Kubernetes})
	}
	d, err := p.opts.Dial(ctx, endpoint)
	if err != nil {
		return nil, err
	}
	name := endpoint
	if name == "" {
		name = d.DaemonHost()
	}
	return &Runner{Docker: d, Endpoint: name, RunID: p.opts.RunID, Limits: p.opts.Limits}, nil
}

// attach brings h up on backend b.
func (p *Pool) attach(h *host, b Backend) {
	h.backend, h.up, h.since = b, true, time.Now()
	h.live, h.leftovers = map[string]bool{}, map[string]bool{}
	h.newLife()
}

// capacity is how many evaluations h takes at once (0: no bound).
func (h *host) capacity() int {
	if b, ok := h.backend.(Bounded); ok {
		return b.Capacity()
	}
	return 0
}

// removeLater takes sandbox id's removal off the evaluation's critical path;
// Close waits for it. A removal that fails is kept as a leftover of the
// host, tried again by the monitor.
func (p *Pool) removeLater(h *host, id string) {
	p.mu.Lock()
	delete(h.live, id)
	b := h.backend
	p.mu.Unlock()
	p.removing.Add(1)
	go func() {
		defer p.removing.Done()
		if err := removeSandbox(b, id); err != nil {
			p.mu.Lock()
			h.leftovers[id] = true
			p.mu.Unlock()
		}
	}()
}

// removeSandbox removes sandbox id of b on its own context.
func removeSandbox(b Backend, id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), removeTimeout)
	defer cancel()
	return b.Remove(ctx, id)
}

// removeLeftovers tries again to remove h's leftovers, when the host
// answers; it reports how many went.
func (p *Pool) removeLeftovers(h *host) int {
	p.mu.Lock()
	ids := make([]string, 0, len(h.leftovers))
	for id := range h.leftovers {
		ids = append(ids, id)
	}
	b := h.backend
	p.mu.Unlock()
	if len(ids) == 0 || p.ping(p.ctx, b, pingTimeout) != nil {
		return 0
	}
	n := 0
	for _, id := range ids {
		if removeSandbox(b, id) == nil {
			n++
			p.mu.Lock()
			delete(h.leftovers, id)
			p.mu.Unlock()
		}
	}
	return n
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

// ping asks b whether it answers, within the bound.
func (p *Pool) ping(ctx context.Context, b Backend, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	return b.Ping(ctx)
}

// name is the display name of h.
func (h *host) name() string {
	if h.endpoint == "" && h.backend != nil {
		return h.backend.Name()
	}
	if h.endpoint == "" {
		return "the default Docker host"
	}
	return h.endpoint
}

// title is h in messages: "docker host NAME", or "host NAME" for a
// backend of another kind (its name says which).
func (h *host) title() string {
	if _, docker := h.backend.(*Runner); docker || (h.backend == nil && openerFor(h.endpoint) == nil) {
		return "docker host " + h.name()
	}
	return "host " + h.name()
}

// ErrNoHost marks an attempt that found no Docker host up.
var ErrNoHost = errors.New("no Docker host is up")

// pickHost returns the up host with room (see Bounded) and the fewest
// active evaluations relative to its room, and counts one more there;
// hosts in avoid (where this evaluation just failed) only when no other is
// up. While none is up it waits for the monitor to bring one back, for one
// round of probes at most: then the attempt is an infrastructure failure,
// so the run goes on (and retries) rather than hangs. While the only up
// hosts are full it waits for room.
func (p *Pool) pickHost(ctx context.Context, avoid *host) (*host, error) {
	giveUp := time.NewTimer(p.noHostWait)
	defer giveUp.Stop()
	for {
		p.mu.Lock()
		best, full := p.bestHost(avoid)
		if best == nil && avoid != nil && avoid.up {
			best, full = p.bestHost(nil)
		}
		if best != nil {
			best.active++
			p.mu.Unlock()
			return best, nil
		}
		changed := p.changed
		if full {
			// Up but full: wait for room as long as it takes.
			p.mu.Unlock()
			select {
			case <-changed:
			case <-ctx.Done():
				return nil, fmt.Errorf("wait for a host with room: %w: %w", ErrNoHost, ctx.Err())
			}
			continue
		}
		var why []string
		for _, h := range p.hosts {
			if h.err != nil {
				why = append(why, h.err.Error())
			}
		}
		p.mu.Unlock()
		select {
		case <-changed:
		case <-giveUp.C:
			return nil, fmt.Errorf("%w: %s", ErrNoHost, strings.Join(why, "; "))
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for a Docker host: %w: %w", ErrNoHost, ctx.Err())
		}
	}
}

// bestHost is the up host, other than avoid, with room and the lowest load
// (active over capacity, unbounded hosts counting their active alone); full
// says that some were up but had no room. The caller holds p.mu.
func (p *Pool) bestHost(avoid *host) (best *host, full bool) {
	load := func(h *host) float64 {
		if c := h.capacity(); c > 0 {
			return float64(h.active) / float64(c)
		}
		return float64(h.active)
	}
	for _, h := range p.hosts {
		if !h.up || h == avoid {
			continue
		}
		if c := h.capacity(); c > 0 && h.active >= c {
			full = true
			continue
		}
		if best == nil || load(h) < load(best) {
			best = h
		}
	}
	return best, full
}

// monitor probes the hosts that are out once their retry time has come, and
// publishes the pool's state when it has changed.
func (p *Pool) monitor() {
	defer p.running.Done()
	every := min(max(min(p.opts.HostRetry, p.opts.HealthEvery)/4, 10*time.Millisecond), StateEvery)
	t := time.NewTicker(every)
	defer t.Stop()
	published, queued, lastPublish := -1, -1, time.Time{}
	lastHealth := time.Now()
	for {
		select {
		case <-p.ctx.Done():
			return
		case now := <-t.C:
			p.mu.Lock()
			var due []*host
			for _, h := range p.hosts {
				if !h.up && !now.Before(h.retryAt) {
					due = append(due, h)
				}
			}
			if now.Sub(lastHealth) >= p.opts.HealthEvery {
				lastHealth = now
				for _, h := range p.hosts {
					if h.up && !h.checking {
						h.checking = true
						p.running.Add(1)
						go p.health(h)
					}
				}
			}
			var st *event.PoolState
			if q := len(p.queue) + p.waiting; (p.version != published || q != queued) && now.Sub(lastPublish) >= StateEvery {
				s := p.stateLocked()
				st, published, queued, lastPublish = &s, p.version, q, now
			}
			p.mu.Unlock()
			if st != nil {
				p.opts.Events.Publish(*st)
			}
			for _, h := range due {
				p.revive(h)
			}
			p.mu.Lock()
			var stale []*host
			for _, h := range p.hosts {
				if h.up && len(h.leftovers) > 0 {
					stale = append(stale, h)
				}
			}
			p.mu.Unlock()
			for _, h := range stale {
				if n := p.removeLeftovers(h); n > 0 {
					p.opts.Events.Publish(event.Message{Level: event.Info, Time: time.Now(),
						Text: fmt.Sprintf("%s answers again: removed %d containers whose removal had failed", h.title(), n)})
				}
			}
		}
	}
}

// revive tries a host that is out; on failure it stays out for HostRetry.
func (p *Pool) revive(h *host) {
	var err error
	b := h.backend
	if b == nil {
		ctx, cancel := context.WithTimeout(p.ctx, pingTimeout)
		b, err = p.open(ctx, h.endpoint)
		cancel()
	} else {
		err = p.ping(p.ctx, b, p.opts.HealthTimeout)
	}
	p.mu.Lock()
	if err != nil {
		h.err, h.retryAt = err, time.Now().Add(p.opts.HostRetry)
		p.version++
		p.mu.Unlock()
		return
	}
	if h.backend == nil {
		p.attach(h, b)
	} else {
		h.up, h.since = true, time.Now()
		h.newLife()
	}
	p.version++
	close(p.changed)
	p.changed = make(chan struct{})
	name, backend := h.title(), h.backend
	clear(h.leftovers) // the reap below takes them too
	p.mu.Unlock()
	p.opts.Events.Publish(event.Message{Level: event.Info, Time: time.Now(), Text: fmt.Sprintf("%s is back", name)})
	// What this run left there when the host went away (the container of
	// the evaluation that was cut, since retried elsewhere) goes now; the
	// containers of evaluations that started since stay.
	p.removing.Add(1)
	go func() {
		defer p.removing.Done()
		ctx, cancel := context.WithTimeout(p.ctx, removeTimeout)
		defer cancel()
		n, err := backend.Reap(ctx, Reaping{RunID: p.opts.RunID, Keep: func(id string) bool {
			p.mu.Lock()
			defer p.mu.Unlock()
			return h.live[id]
		}})
		if err == nil && n > 0 {
			p.opts.Events.Publish(event.Message{Level: event.Info, Time: time.Now(), Text: fmt.Sprintf("%s: removed %d containers left when it went away", name, n)})
		}
	}()
}

// health pings an up host and takes it out when it does not answer.
func (p *Pool) health(h *host) {
	defer p.running.Done()
	err := p.ping(p.ctx, h.backend, p.opts.HealthTimeout)
	p.mu.Lock()
	h.checking = false
	p.mu.Unlock()
	if err != nil && p.ctx.Err() == nil {
		p.takeOut(h, err)
	}
}

// checkHost takes h out when it no longer answers after an infrastructure
// failure there, so the retry goes elsewhere.
func (p *Pool) checkHost(h *host, cause error) {
	if err := p.ping(p.ctx, h.backend, p.opts.HealthTimeout); err == nil {
		return
	}
	p.takeOut(h, cause)
}

// takeOut marks h down for HostRetry and ends the evaluations there.
func (p *Pool) takeOut(h *host, cause error) {
	p.mu.Lock()
	wasUp := h.up
	h.up, h.err, h.retryAt = false, cause, time.Now().Add(p.opts.HostRetry)
	name := h.title()
	if wasUp {
		h.since = time.Now()
		h.lose(fmt.Errorf("%w: %s: %v", ErrHostDown, name, cause))
	}
	p.version++
	p.mu.Unlock()
	if wasUp {
		p.opts.Events.Publish(event.Message{Level: event.Warn, Time: time.Now(),
			Text: fmt.Sprintf("%s is down (%v); its evaluations go to the other hosts, and it is tried again in %s", name, cause, p.opts.HostRetry)})
	}
}
