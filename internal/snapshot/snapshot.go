// Package snapshot keeps versioned copies of a policy's weights for
// samplers that run while the weights are being updated (the async GRPO
// loop). The updater publishes a copy after each step; samplers take the
// newest and give it back when done. A copy still in use when a newer one is
// published is recycled by its last user, so at most three exist. The
// copies are of any kind: CPU models, device engines.
package snapshot

import (
	"errors"
	"sync"
)

// ErrNotStarted is returned by Acquire before the first Publish.
var ErrNotStarted = errors.New("sample: StartSnapshots was not called")

// Set holds the newest copy and the spare ones.
type Set[T any] struct {
	mu     sync.Mutex
	newest *entry[T]
	spares []*entry[T]
}

type entry[T any] struct {
	copy    T
	version int
	users   int
}

// Started reports whether a copy has been published.
func (s *Set[T]) Started() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.newest != nil
}

// Publish makes a copy of the current weights at version the newest one:
// refresh fills a spare (ok is true) or makes one (ok is false). Only the
// goroutine that updates the weights may call it.
func (s *Set[T]) Publish(version int, refresh func(spare T, ok bool) (T, error)) error {
	s.mu.Lock()
	var e *entry[T]
	if k := len(s.spares); k > 0 {
		e, s.spares = s.spares[k-1], s.spares[:k-1]
	}
	s.mu.Unlock()
	var spare T
	ok := e != nil
	if ok {
		spare = e.copy
	} else {
		e = &entry[T]{}
	}
	c, err := refresh(spare, ok)
	if err != nil {
		if ok {
			s.mu.Lock()
			s.spares = append(s.spares, e)
			s.mu.Unlock()
		}
		return err
	}
	e.copy, e.version = c, version
	s.mu.Lock()
	old := s.newest
	s.newest = e
	if old != nil && old.users == 0 {
		s.spares = append(s.spares, old)
	}
	s.mu.Unlock()
	return nil
}

// Acquire returns the newest copy, its version and the function that gives
// it back.
func (s *Set[T]) Acquire() (T, int, func(), error) {
	s.mu.Lock()
	e := s.newest
	if e == nil {
		s.mu.Unlock()
		var zero T
		return zero, 0, func() {}, ErrNotStarted
	}
	e.users++
	s.mu.Unlock()
	release := func() {
		s.mu.Lock()
		e.users--
		if e != s.newest && e.users == 0 {
			s.spares = append(s.spares, e)
		}
		s.mu.Unlock()
	}
	return e.copy, e.version, release, nil
}

// Drain empties the set and returns every copy it held (to free them).
func (s *Set[T]) Drain() []T {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []T
	for _, e := range s.spares {
		out = append(out, e.copy)
	}
	if s.newest != nil {
		out = append(out, s.newest.copy)
	}
	s.newest, s.spares = nil, nil
	return out
}
