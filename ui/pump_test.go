package ui

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
)

// TestPumpBurst: a producer sends 10,000 events on an unbuffered channel
// while the console consumes them as a tea.Program would (run the Cmd,
// Update, View, re-arm). The producer must never be held up for long, every
// event must arrive, and the flood must cost a handful of Updates.
func TestPumpBurst(t *testing.T) {
	const n = 10000
	ch := make(chan event.Event)
	m := New(&fakeCtrl{}, ch, Options{UI: uiOpts(50, n, n)})
	m.resize(200, 50)

	done := make(chan time.Duration)
	go func() {
		var worst time.Duration
		for i := 0; i < n; i++ {
			var ev event.Event
			switch i % 10 {
			case 9:
				ev = event.StepFinished{Step: i / 10}
			case 8:
				ev = event.PoolState{Done: i}
			default:
				ev = event.LogBatch{EvalID: fmt.Sprintf("e-%d", i%3), Lines: []string{fmt.Sprint("line ", i)}}
			}
			start := time.Now()
			ch <- ev
			worst = max(worst, time.Since(start))
		}
		close(ch)
		done <- worst
	}()

	updates := 0
	cmd := m.pump.next()
	deadline := time.After(10 * time.Second)
	for cmd != nil {
		msgs := make(chan any, 1)
		go func() { msgs <- cmd() }()
		select {
		case msg := <-msgs:
			_, cmd = m.Update(msg.(eventsMsg))
			_ = m.View()
			updates++
		case <-deadline:
			t.Fatal("the burst was not drained in 10s")
		}
	}
	worst := <-done
	lines := 0
	for _, l := range m.st.logs.evals {
		lines += l.Lines.Total()
	}
	if lines != n*8/10 || m.st.history.Total() != n/10 {
		t.Fatalf("got %d log lines and %d steps, want %d and %d", lines, m.st.history.Total(), n*8/10, n/10)
	}
	if m.st.pool.Done != n-2 {
		t.Fatalf("pool state %d, want the last one (%d)", m.st.pool.Done, n-2)
	}
	if updates > 50 {
		t.Fatalf("%d Updates for a burst of %d events: not batched", updates, n)
	}
	// The window is 50ms: one send waits at most a batch's Update and View.
	if worst > 2*time.Second {
		t.Fatalf("a send was held up %s", worst)
	}
	t.Logf("%d events in %d Updates; the longest send waited %s", n, updates, worst)
}

func uiOpts(refresh, logLines, history int) config.UI {
	return config.UI{RefreshMS: refresh, LogLines: logLines, History: history}
}

// TestPumpIdleDeliversAtOnce: an event after a quiet spell is not held for
// the refresh window.
func TestPumpIdleDeliversAtOnce(t *testing.T) {
	ch := make(chan event.Event, 1)
	p := &pump{ctx: context.Background(), ch: ch, window: time.Hour}
	ch <- event.Paused{Step: 3}
	start := time.Now()
	msg := p.wait().(eventsMsg)
	if time.Since(start) > time.Second || len(msg.events) != 1 {
		t.Fatalf("got %v after %s", msg, time.Since(start))
	}
}

// TestPumpWindow: right after a batch, the next one collects for what is
// left of the window instead of waking the program per event.
func TestPumpWindow(t *testing.T) {
	ch := make(chan event.Event, 10)
	p := &pump{ctx: context.Background(), ch: ch, window: 200 * time.Millisecond, last: time.Now()}
	go func() {
		for i := 0; i < 5; i++ {
			ch <- event.StepStarted{Step: i}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	msg := p.wait().(eventsMsg)
	if len(msg.events) != 5 {
		t.Fatalf("one batch held %d events, want 5", len(msg.events))
	}
}

func TestPumpClosedAndCancelled(t *testing.T) {
	ch := make(chan event.Event, 2)
	ch <- event.Stopped{Step: 1}
	close(ch)
	p := &pump{ctx: context.Background(), ch: ch}
	if msg := p.wait().(eventsMsg); len(msg.events) != 1 || !msg.closed {
		t.Fatalf("got %+v, want Stopped and closed", msg)
	}
	if msg := p.wait().(eventsMsg); len(msg.events) != 0 || !msg.closed {
		t.Fatalf("got %+v, want closed", msg)
	}

	ctx, cancel := context.WithCancel(context.Background())
	p = &pump{ctx: ctx, ch: make(chan event.Event)}
	go cancel()
	if msg := p.wait(); msg != nil {
		t.Fatalf("cancelled pump returned %v", msg)
	}

	// A closed stream ends the pump: Update does not re-arm it.
	m := newTestModel(&fakeCtrl{}, 80, 24)
	if _, cmd := m.Update(eventsMsg{closed: true}); cmd != nil {
		t.Fatal("re-armed after close")
	}
	if m.st.runState() != stateStopped {
		t.Fatalf("state %s after the stream closed", m.st.runState())
	}
}

func TestCoalesce(t *testing.T) {
	log := func(id string, lines ...string) event.LogBatch {
		return event.LogBatch{EvalID: id, Lines: lines}
	}
	cases := []struct {
		name string
		in   []event.Event
		want []event.Event
	}{
		{"empty", nil, nil},
		{"logs merge per evaluation, in place",
			[]event.Event{log("a", "1"), log("b", "x"), event.StepStarted{Step: 1}, log("a", "2", "3"), log("b", "y")},
			[]event.Event{log("a", "1", "2", "3"), log("b", "x", "y"), event.StepStarted{Step: 1}}},
		{"only the last pool state",
			[]event.Event{event.PoolState{Done: 1}, event.Paused{Step: 1}, event.PoolState{Done: 2}},
			[]event.Event{event.PoolState{Done: 2}, event.Paused{Step: 1}}},
		{"other events keep order",
			[]event.Event{event.Paused{Step: 1}, event.Resumed{Step: 1}, event.Paused{Step: 2}},
			[]event.Event{event.Paused{Step: 1}, event.Resumed{Step: 1}, event.Paused{Step: 2}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := coalesce(c.in); !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got %v, want %v", got, c.want)
			}
		})
	}
	// The producer's slice is never grown in place.
	shared := make([]string, 1, 8)
	shared[0] = "p"
	coalesce([]event.Event{log("a"), event.LogBatch{EvalID: "a", Lines: shared}, log("a", "q")})
	if got := shared[:2]; got[1] != "" {
		t.Fatalf("coalesce wrote into the producer's slice: %q", got)
	}
}
