package serve

import (
	"context"
	"testing"
	"time"
)

func TestRetryAfter(t *testing.T) {
	for _, tt := range []struct {
		name       string
		held       []time.Duration // slot times measured
		limit      int
		waiting    int
		wantHeader int
		wantExact  time.Duration
	}{
		{"nothing measured", nil, 2, 16, 1, time.Second},
		{"half the queue at the mean", []time.Duration{time.Second, 3 * time.Second}, 2, 4, 3, 3 * time.Second},
		{"quick requests", []time.Duration{10 * time.Millisecond}, 1, 0, 1, 100 * time.Millisecond},
		{"at most a minute", []time.Duration{10 * time.Minute}, 1, 0, 60, time.Minute},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := newAdmission(tt.limit, 64)
			for _, d := range tt.held {
				a.held[a.heldN] = d
				a.heldN++
			}
			for range tt.waiting {
				a.waiters = append(a.waiters, make(chan error, 1))
			}
			h, exact := a.retryAfter()
			if h != tt.wantHeader || exact != tt.wantExact {
				t.Errorf("retryAfter() = %d, %s; want %d, %s", h, exact, tt.wantHeader, tt.wantExact)
			}
		})
	}
}

// TestAdmissionCancelWhileWaiting: a waiter whose context ends leaves the
// queue, and the slot it was granted meanwhile (if any) goes back.
func TestAdmissionCancelWhileWaiting(t *testing.T) {
	a := newAdmission(1, 1)
	release, err := a.acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := a.acquire(ctx)
		done <- err
	}()
	for _, w := a.depth(); w != 1; _, w = a.depth() {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a cancelled waiter got a slot")
	}
	if r, w := a.depth(); r != 1 || w != 0 {
		t.Errorf("after the cancel: %d running, %d waiting", r, w)
	}
	release()
	release() // a second release is a no-op
	if r, _ := a.depth(); r != 0 {
		t.Errorf("after the release: %d running", r)
	}
	if _, err := a.acquire(context.Background()); err != nil {
		t.Errorf("the freed slot: %v", err)
	}
}
