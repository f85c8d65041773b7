package sandbox

import (
	"context"
	"fmt"
	"sync"
)

var _ SessionBackend = (*Runner)(nil)

// OpenSession opens a session (spec: Image, Workdir, User, Env, Files, ID,
// Timeout for its whole life) on the up host with the least load that can
// hold one, with the pool's limits and run id: Close gives its slot back,
// and the pool's own Close removes any left open.
func (p *Pool) OpenSession(ctx context.Context, spec Spec) (Session, error) {
	p.mu.Lock()
	var best *host
	for _, h := range p.hosts {
		if _, ok := h.backend.(SessionBackend); !ok || !h.up || p.closed {
			continue
		}
		if c := h.capacity(); c > 0 && h.active >= c {
			continue
		}
		if best == nil || h.active < best.active {
			best = h
		}
	}
	if best == nil {
		p.mu.Unlock()
		return nil, fmt.Errorf("open session %s: %w: no host that is up can hold a session (sessions run on Docker and Kubernetes hosts: each is down or full)", spec.ID, ErrNoHost)
	}
	best.active++
	p.sessions++
	p.version++
	p.mu.Unlock()
	leave := sync.OnceFunc(func() {
		p.mu.Lock()
		p.sessions--
		p.version++
		p.mu.Unlock()
		p.leave(best)
	})
	s, err := best.backend.(SessionBackend).OpenSession(ctx, spec)
	if err != nil {
		leave()
		return nil, err
	}
	return &poolSession{Session: s, leave: leave}, nil
}

// poolSession gives its host's slot back when it closes.
type poolSession struct {
	Session
	leave func()
}

func (s *poolSession) Close() error {
	defer s.leave()
	return s.Session.Close()
}
