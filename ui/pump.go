package ui

import (
	"context"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/swetui/swetui/event"
)

// maxBatch bounds one batch so that a flood is cut into pieces that each
// cost one Update; the pump goes on reading while Update runs the previous one.
const maxBatch = 4096

// eventsMsg is a batch of trainer events, coalesced. closed reports that the
// channel was closed (after the events, if any).
type eventsMsg struct {
	events []event.Event
	closed bool
}

// pump turns the trainer's channel into eventsMsg (docs/ARCHITECTURE.md
// §4). Its Cmd blocks on the channel in a Cmd goroutine, never in Update; once an event
// arrives it keeps draining for what is left of the refresh window, so a
// flood of events costs one Update (and one frame) per window, and returns.
// Update re-arms it on every eventsMsg: only one read is ever outstanding.
//
// The channel is an event.Bus subscription, read continuously: a batch is
// built in at most maxBatch events. When the console falls behind, the bus
// (not the trainer) drops the high-rate events for it and counts them
// (Options.Drops, shown in the events pane); the rare important ones wait
// for room. Publishing never blocks training.
type pump struct {
	ctx    context.Context
	ch     <-chan event.Event
	window time.Duration
	last   time.Time // when the previous batch was returned
}

// next returns the Cmd that waits for the next batch.
func (p *pump) next() tea.Cmd {
	if p.ch == nil {
		return nil
	}
	return p.wait
}

func (p *pump) wait() tea.Msg {
	var batch []event.Event
	select {
	case <-p.ctx.Done():
		return nil
	case ev, ok := <-p.ch:
		if !ok {
			return eventsMsg{closed: true}
		}
		batch = append(batch, ev)
	}
	// Wait out the rest of the refresh window (none if the last batch is
	// old), collecting what comes, then take whatever is already queued.
	var timeout <-chan time.Time
	if rest := p.window - time.Since(p.last); rest > 0 {
		t := time.NewTimer(rest)
		defer t.Stop()
		timeout = t.C
	}
	closed := false
collect:
	for len(batch) < maxBatch {
		if timeout == nil {
			select {
			case ev, ok := <-p.ch:
				if !ok {
					closed = true
					break collect
				}
				batch = append(batch, ev)
				continue
			default:
				break collect
			}
		}
		select {
		case ev, ok := <-p.ch:
			if !ok {
				closed = true
				break collect
			}
			batch = append(batch, ev)
		case <-timeout:
			timeout = nil
		case <-p.ctx.Done():
			break collect
		}
	}
	p.last = time.Now()
	return eventsMsg{events: coalesce(batch), closed: closed}
}

// coalesce merges a batch's container logs into one ContainerLog per
// evaluation (at the place of its first) and keeps only the last PoolState
// (each is a full snapshot). Other events keep their order.
func coalesce(batch []event.Event) []event.Event {
	out := batch[:0]
	logAt := map[string]int{}
	lastPool := -1
	for _, ev := range batch {
		switch e := ev.(type) {
		case event.LogBatch:
			if i, ok := logAt[e.EvalID]; ok {
				prev := out[i].(event.LogBatch)
				prev.Lines = append(prev.Lines, e.Lines...)
				out[i] = prev
				continue
			}
			// Our own copy: the merges above append to it, and the
			// producer's slice is not ours to grow.
			e.Lines = append([]string(nil), e.Lines...)
			logAt[e.EvalID] = len(out)
			out = append(out, e)
		case event.PoolState:
			if lastPool >= 0 {
				out[lastPool] = e
				continue
			}
			lastPool = len(out)
			out = append(out, e)
		default:
			out = append(out, ev)
		}
	}
	return out
}
