package event

import (
	"sync"
	"sync/atomic"
	"time"
)

// Publisher is where producers (the trainer, the reward pool) send events.
// Publish never blocks for long: see Bus.
type Publisher interface {
	Publish(Event)
}

// Discard is a Publisher that drops everything (tests, commands without a
// console).
var Discard Publisher = discard{}

type discard struct{}

func (discard) Publish(Event) {}

// Bus fans events out to subscribers (the console, the headless printer,
// events.jsonl). A slow subscriber never stalls a producer: high-rate
// events (completions, agent turns, log batches, pool state, stage
// progress, step starts, warm-start steps) are dropped for a subscriber whose buffer is full, and the rare
// ones a consumer acts on (acks, phase changes, stops) wait up to
// ImportantWait for room first. Every drop is counted per subscriber.
type Bus struct {
	mu     sync.RWMutex // held for reading while sending, so Close waits for senders
	subs   map[*Sub]struct{}
	closed bool
}

// ImportantWait is how long Publish waits for room for an event that is not
// high-rate.
const ImportantWait = time.Second

// NewBus makes a bus with no subscribers.
func NewBus() *Bus { return &Bus{subs: map[*Sub]struct{}{}} }

// Sub is one subscription: its channel and what it lost.
type Sub struct {
	bus         *Bus
	ch          chan Event
	droppedLogs atomic.Int64
	dropped     atomic.Int64
}

// Drops counts what a subscriber lost because it did not keep up.
type Drops struct {
	Logs   int64 // log batches
	Events int64 // every other kind
}

// Subscribe adds a subscriber with room for buffer events. A subscription
// made after Close gets a closed channel.
func (b *Bus) Subscribe(buffer int) *Sub {
	s := &Sub{bus: b, ch: make(chan Event, buffer)}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		close(s.ch)
		return s
	}
	b.subs[s] = struct{}{}
	return s
}

// Events is the subscription's channel; it is closed by Close or Bus.Close.
func (s *Sub) Events() <-chan Event { return s.ch }

// Dropped reports what this subscriber has lost so far. Safe from any
// goroutine.
func (s *Sub) Dropped() Drops {
	return Drops{Logs: s.droppedLogs.Load(), Events: s.dropped.Load()}
}

// Close ends the subscription and closes its channel; it is idempotent.
func (s *Sub) Close() {
	b := s.bus
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.subs[s]; ok {
		delete(b.subs, s)
		close(s.ch)
	}
}

// Publish sends ev to every subscriber under the drop rules above. After
// Close it does nothing.
func (b *Bus) Publish(ev Event) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return
	}
	highRate := false
	switch e := ev.(type) {
	case CompletionScored, TurnPlayed, LogBatch, PoolState, StageChanged, StepStarted:
		highRate = true
	case SFTStep:
		highRate = !e.HeldoutOK // a held-out measurement is rare and charted: keep it
	}
	var timer *time.Timer
	for s := range b.subs {
		select {
		case s.ch <- ev:
			continue
		default:
		}
		if !highRate {
			if timer == nil {
				timer = time.NewTimer(ImportantWait)
				defer timer.Stop()
			}
			select {
			case s.ch <- ev:
				continue
			case <-timer.C:
			}
		}
		if _, ok := ev.(LogBatch); ok {
			s.droppedLogs.Add(1)
		} else {
			s.dropped.Add(1)
		}
	}
}

// Close closes every subscriber's channel, after any Publish in flight.
// Later Publish calls do nothing. It is idempotent.
func (b *Bus) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.closed = true
	for s := range b.subs {
		close(s.ch)
	}
	b.subs = nil
}
