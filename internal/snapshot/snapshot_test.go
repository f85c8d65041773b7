package snapshot

import (
	"errors"
	"sync"
	"testing"
)

func TestSetRecyclesAtMostThreeCopies(t *testing.T) {
	var s Set[*int]
	if _, _, _, err := s.Acquire(); !errors.Is(err, ErrNotStarted) {
		t.Fatalf("Acquire before Publish: %v", err)
	}
	made := 0
	publish := func(v int) {
		if err := s.Publish(v, func(spare *int, ok bool) (*int, error) {
			if !ok {
				made++
				spare = new(int)
			}
			*spare = v
			return spare, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	publish(1)
	held, v, release, err := s.Acquire() // a sampler holds version 1
	if err != nil || *held != 1 || v != 1 {
		t.Fatalf("acquired %v at %d: %v", *held, v, err)
	}
	for v := 2; v <= 10; v++ {
		publish(v)
	}
	if *held != 1 {
		t.Fatalf("a held copy was overwritten: %d", *held)
	}
	release()
	publish(11)
	c, v, release2, _ := s.Acquire()
	release2()
	if *c != 11 || v != 11 || made > 3 {
		t.Fatalf("newest %d at %d, %d copies made (want at most 3)", *c, v, made)
	}
	if n := len(s.Drain()); n != made || s.Started() {
		t.Fatalf("drained %d of %d copies; started %v", n, made, s.Started())
	}
}

func TestSetUnderConcurrentSamplers(t *testing.T) {
	var s Set[[]int]
	refresh := func(v int) func([]int, bool) ([]int, error) {
		return func(spare []int, ok bool) ([]int, error) {
			if !ok {
				spare = make([]int, 64)
			}
			for i := range spare {
				spare[i] = v
			}
			return spare, nil
		}
	}
	s.Publish(0, refresh(0))
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 500 {
				c, v, release, _ := s.Acquire()
				for _, x := range c {
					if x != v {
						t.Errorf("copy of version %d holds %d: overwritten while in use", v, x)
					}
				}
				release()
			}
		}()
	}
	for v := 1; v <= 500; v++ {
		s.Publish(v, refresh(v))
	}
	wg.Wait()
}
