package event

import (
	"sync"
	"testing"
	"time"
)

func TestBusFansOutInOrder(t *testing.T) {
	b := NewBus()
	s1, s2 := b.Subscribe(8), b.Subscribe(8)
	for i := range 3 {
		b.Publish(StepStarted{Step: i})
	}
	b.Close()
	for _, s := range []*Sub{s1, s2} {
		var got []int
		for ev := range s.Events() {
			got = append(got, ev.(StepStarted).Step)
		}
		if len(got) != 3 || got[0] != 0 || got[2] != 2 {
			t.Fatalf("got %v, want [0 1 2]", got)
		}
	}
}

func TestBusDropsHighRateForAFullSubscriberOnly(t *testing.T) {
	b := NewBus()
	slow, fast := b.Subscribe(1), b.Subscribe(16)
	b.Publish(LogBatch{EvalID: "a"})
	b.Publish(LogBatch{EvalID: "b"})     // slow is full: dropped there
	b.Publish(CompletionScored{Step: 1}) // dropped there too
	if d := slow.Dropped(); d.Logs != 1 || d.Events != 1 {
		t.Fatalf("slow dropped %+v, want 1 log batch and 1 event", d)
	}
	if d := fast.Dropped(); d != (Drops{}) {
		t.Fatalf("fast dropped %+v, want none", d)
	}
	if n := len(fast.Events()); n != 3 {
		t.Fatalf("fast holds %d events, want 3", n)
	}
}

func TestBusWaitsForRoomForImportantEvents(t *testing.T) {
	b := NewBus()
	s := b.Subscribe(1)
	b.Publish(Paused{Step: 1})
	done := make(chan struct{})
	go func() { b.Publish(Stopped{Step: 2}); close(done) }()
	if ev := <-s.Events(); ev.(Paused).Step != 1 {
		t.Fatalf("first event %v", ev)
	}
	<-done
	if ev := <-s.Events(); ev.(Stopped).Step != 2 {
		t.Fatalf("second event %v", ev)
	}
	if d := s.Dropped(); d != (Drops{}) {
		t.Fatalf("dropped %+v, want none", d)
	}
}

func TestBusCloseAndUnsubscribe(t *testing.T) {
	b := NewBus()
	s := b.Subscribe(1)
	s.Close()
	s.Close() // idempotent
	if _, ok := <-s.Events(); ok {
		t.Fatal("unsubscribed channel is open")
	}
	b.Publish(Message{Text: "nobody listens"}) // must not wait ImportantWait
	b.Close()
	b.Close()
	b.Publish(Message{Text: "after close"})
	if _, ok := <-b.Subscribe(1).Events(); ok {
		t.Fatal("a subscription after Close is open")
	}
}

func TestBusCloseWhilePublishing(t *testing.T) {
	b := NewBus()
	s := b.Subscribe(4)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				b.Publish(LogBatch{Worker: i})
			}
		}()
	}
	go func() {
		for range s.Events() {
		}
	}()
	time.Sleep(time.Millisecond)
	b.Close() // must not panic with sends in flight
	wg.Wait()
}

func TestBusKeepsHeldoutMeasurements(t *testing.T) {
	b := NewBus()
	s := b.Subscribe(1)
	b.Publish(SFTStep{Step: 1})
	b.Publish(SFTStep{Step: 2}) // full: a plain step is dropped
	done := make(chan struct{})
	go func() { b.Publish(SFTStep{Step: 3, Heldout: 0.5, HeldoutOK: true}); close(done) }()
	<-s.Events()
	<-done
	if ev := <-s.Events(); ev.(SFTStep).Step != 3 {
		t.Fatalf("got %+v, want the held-out step", ev)
	}
	if d := s.Dropped(); d.Events != 1 {
		t.Fatalf("dropped %+v, want the one plain step", d)
	}
}
