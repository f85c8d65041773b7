package serve

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"
)

// Why a request was not admitted.
var (
	errQueueFull = errors.New("queue full")
	errStopping  = errors.New("server stopping")
)

// admission bounds the requests being scored (limit) and those waiting
// for a slot (queue), first come first served. Past both a request is
// refused at once: the client retries after retryAfter. A paused admission
// starts nothing new; waiting requests stay queued.
type admission struct {
	limit, queue int

	mu       sync.Mutex
	running  int
	waiters  []chan error // each gets nil when its slot is granted, errStopping when the server stops
	paused   bool
	stopping bool
	// held are the times the last requests held a slot (a ring), whose
	// mean estimates Retry-After: a window, so that a run of instant
	// requests (empty patches) does not hide the slow ones.
	held  [32]time.Duration
	heldN int
}

func newAdmission(limit, queue int) *admission {
	return &admission{limit: max(limit, 1), queue: max(queue, 0)}
}

// acquire waits for a slot until ctx ends and returns its release. It
// fails at once with errQueueFull or errStopping.
func (a *admission) acquire(ctx context.Context) (release func(), err error) {
	a.mu.Lock()
	switch {
	case a.stopping:
		a.mu.Unlock()
		return nil, errStopping
	case !a.paused && a.running < a.limit && len(a.waiters) == 0:
		a.running++
		a.mu.Unlock()
		return a.releaser(), nil
	case len(a.waiters) >= a.queue:
		a.mu.Unlock()
		return nil, errQueueFull
	}
	w := make(chan error, 1)
	a.waiters = append(a.waiters, w)
	a.mu.Unlock()
	select {
	case err := <-w:
		if err != nil {
			return nil, err
		}
		return a.releaser(), nil
	case <-ctx.Done():
		a.mu.Lock()
		for i, x := range a.waiters {
			if x == w {
				a.waiters = append(a.waiters[:i], a.waiters[i+1:]...)
				a.mu.Unlock()
				return nil, ctx.Err()
			}
		}
		a.mu.Unlock()
		// Granted (or stopped) in the meantime: hand the slot back.
		if err := <-w; err == nil {
			a.releaser()()
		}
		return nil, ctx.Err()
	}
}

// releaser returns the function that gives a granted slot back, once.
func (a *admission) releaser() func() {
	start := time.Now()
	var once sync.Once
	return func() {
		once.Do(func() {
			held := time.Since(start)
			a.mu.Lock()
			defer a.mu.Unlock()
			a.running--
			a.held[a.heldN%len(a.held)] = held
			a.heldN++
			a.dispatch()
		})
	}
}

// dispatch grants free slots to the first waiters; a.mu is held.
func (a *admission) dispatch() {
	for !a.paused && !a.stopping && a.running < a.limit && len(a.waiters) > 0 {
		w := a.waiters[0]
		a.waiters = a.waiters[1:]
		a.running++
		w <- nil
	}
}

// setPaused holds or resumes the start of waiting requests.
func (a *admission) setPaused(p bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.paused = p
	a.dispatch()
}

// stop refuses every waiting and future request; those running keep their
// slots.
func (a *admission) stop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stopping = true
	for _, w := range a.waiters {
		w <- errStopping
	}
	a.waiters = nil
}

// depth is how many requests run and wait.
func (a *admission) depth() (running, waiting int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.running, len(a.waiters)
}

// retryAfter estimates when a refused request will find room: half the
// queue served at the mean service time (so that retries neither all come
// back at once nor leave the slots idle), in whole seconds (1-60) as the
// Retry-After header counts them, and exactly for clients that read the
// body.
func (a *admission) retryAfter() (header int, exact time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	exact = time.Second // nothing measured yet: the header's least
	if n := min(a.heldN, len(a.held)); n > 0 {
		var sum time.Duration
		for _, d := range a.held[:n] {
			sum += d
		}
		exact = sum / time.Duration(n) * time.Duration(len(a.waiters)/2+1) / time.Duration(a.limit)
	}
	exact = min(max(exact, 100*time.Millisecond), time.Minute)
	return int(min(max(math.Ceil(exact.Seconds()), 1), 60)), exact
}
