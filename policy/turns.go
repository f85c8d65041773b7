package policy

import (
	"context"
	"slices"
	"sync"

	"github.com/swetui/swetui/model"
	"github.com/swetui/swetui/train"
)

// maxConversations bounds the trajectories whose caches are kept, and
// the replies decoded at once: a few groups' worth (G trajectories a task
// play at once, and a step's groups may play together).
const maxConversations = 32

// turnCache decodes the agent trajectories' replies (SampleTurn) together,
// whichever goroutines ask for them: requests queue, and one decoding
// goroutine runs every reply in flight as a row of a model.TurnBatch,
// taking new ones in at each token (continuous batching). It keeps each
// trajectory's conversation (its keys and values) from turn to turn, for
// one set of weights: an update, or a snapshot of other weights, starts
// it over.
type turnCache struct {
	mu      sync.Mutex
	gen     *turnGen // the weights' conversations; nil: none yet, or dropped
	queue   []*turnRequest
	running bool // the decoding goroutine is on
}

// turnGen is the conversations of one set of weights.
type turnGen struct {
	m       *model.Model
	version int
	batch   *model.TurnBatch
	convs   []*model.Conversation // least recently used first
	tokens  map[*model.Conversation][]int
	busy    map[*model.Conversation]*turnRequest // replies in the making
}

func newTurnGen(m *model.Model, version int) *turnGen {
	return &turnGen{m: m, version: version, batch: m.NewTurnBatch(maxConversations),
		tokens: map[*model.Conversation][]int{}, busy: map[*model.Conversation]*turnRequest{}}
}

// turnRequest is one reply asked for.
type turnRequest struct {
	ctx     context.Context
	m       *model.Model
	version int
	context []int
	o       model.SampleOptions
	gen     *turnGen
	cv      *model.Conversation
	done    chan turnResult
}

type turnResult struct {
	c   model.Completion
	err error
}

// drop forgets every conversation: the policy's weights changed. Replies
// in the making (of a snapshot's weights) end in their own conversations.
func (c *turnCache) drop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen = nil
}

// take returns the conversation not in use whose cached trajectory is the
// longest prefix of context (one that departs from it is another
// trajectory's, and is left to it), or a new one; it is the most recently
// used after.
func (g *turnGen) take(context []int) *model.Conversation {
	best, bestLen := -1, 0
	for i, cv := range g.convs {
		held := g.tokens[cv]
		if g.busy[cv] == nil && len(held) > bestLen && len(held) < len(context) && slices.Equal(held, context[:len(held)]) {
			best, bestLen = i, len(held)
		}
	}
	var cv *model.Conversation
	if best >= 0 {
		cv = g.convs[best]
		g.convs = slices.Delete(g.convs, best, best+1)
	} else {
		// The least recently used not in use makes room: at most
		// maxConversations are in use, as many as the batch has rows.
		if len(g.convs) == maxConversations {
			i := slices.IndexFunc(g.convs, func(cv *model.Conversation) bool { return g.busy[cv] == nil })
			delete(g.tokens, g.convs[i])
			g.convs = slices.Delete(g.convs, i, i+1)
		}
		cv = g.batch.NewConversation()
	}
	g.convs = append(g.convs, cv)
	return cv
}

// sample draws one reply to context with m's weights at version, decoded
// with every other reply in flight. rngMu guards o.Rand.
func (c *turnCache) sample(ctx context.Context, m *model.Model, version int, context []int, o model.SampleOptions, rngMu *sync.Mutex) (model.Completion, error) {
	req := &turnRequest{ctx: ctx, m: m, version: version, context: context, o: o, done: make(chan turnResult, 1)}
	c.mu.Lock()
	c.queue = append(c.queue, req)
	if !c.running {
		c.running = true
		go c.decode(rngMu)
	}
	c.mu.Unlock()
	// Not also on ctx: the decoder answers a request whose caller gave up
	// at its next token, and until then uses the weights the caller holds.
	r := <-req.done
	return r.c, r.err
}

// decode runs the replies asked for until none is left. Each round it
// takes in the queued requests for the batch's weights as rows free (a
// request for other weights waits until the batch is empty), answers the
// requests whose callers gave up, and decodes one token of every reply.
func (c *turnCache) decode(rngMu *sync.Mutex) {
	var cur *turnGen // the weights being decoded
	for {
		c.mu.Lock()
		if cur == nil || cur.batch.Len() == 0 {
			cur = c.gen
			if len(c.queue) > 0 && (cur == nil || c.queue[0].m != cur.m || c.queue[0].version != cur.version) {
				cur = newTurnGen(c.queue[0].m, c.queue[0].version)
				c.gen = cur
			}
		}
		var admit []*turnRequest
		if cur != nil && cur == c.gen { // a dropped one takes no more
			free := cur.batch.Free()
			c.queue = slices.DeleteFunc(c.queue, func(r *turnRequest) bool {
				if free == 0 || r.m != cur.m || r.version != cur.version {
					return false
				}
				free--
				r.gen, r.cv = cur, cur.take(r.context)
				cur.busy[r.cv] = r
				admit = append(admit, r)
				return true
			})
		}
		if len(admit) == 0 && (cur == nil || cur.batch.Len() == 0) {
			c.running = false
			c.mu.Unlock()
			return
		}
		var gaveUp []*turnRequest
		for _, r := range cur.busy {
			if r.ctx.Err() != nil && !slices.Contains(admit, r) {
				gaveUp = append(gaveUp, r)
			}
		}
		c.mu.Unlock()

		for _, r := range admit {
			if err := cur.batch.Add(r.ctx, r.cv, r.context, r.o); err != nil {
				c.finish(r, model.Completion{}, err)
			}
		}
		for _, r := range gaveUp {
			cur.batch.Remove(r.cv)
			c.finish(r, model.Completion{}, r.ctx.Err())
		}
		if cur.batch.Len() == 0 {
			continue
		}
		rngMu.Lock()
		done := cur.batch.Step()
		rngMu.Unlock()
		for _, f := range done {
			c.mu.Lock()
			r := cur.busy[f.Conversation]
			c.mu.Unlock()
			c.finish(r, f.Completion, nil)
		}
	}
}

// finish answers r: on success its conversation holds the context and the
// reply but its last token, for the trajectory's next turn; on failure it
// is forgotten (what its cache holds is no trajectory's).
func (c *turnCache) finish(r *turnRequest, comp model.Completion, err error) {
	c.mu.Lock()
	g := r.gen
	delete(g.busy, r.cv)
	if err != nil {
		delete(g.tokens, r.cv)
		g.convs = slices.DeleteFunc(g.convs, func(x *model.Conversation) bool { return x == r.cv })
	} else {
		g.tokens[r.cv] = append(slices.Clip(r.context), comp.Tokens[:len(comp.Tokens)-1]...)
	}
	c.mu.Unlock()
	r.done <- turnResult{comp, err}
}

// SampleTurn implements train.TurnPolicy.
func (p *Model) SampleTurn(ctx context.Context, context []int, o train.SampleOptions) (train.Sample, error) {
	return p.sampleTurnFrom(ctx, p.Model, p.Version(), context, o)
}

// SampleTurnSnapshot implements train.TurnPolicy.
func (p *Model) SampleTurnSnapshot(ctx context.Context, context []int, o train.SampleOptions) (train.Sample, int, error) {
	m, version, release, err := p.snaps.Acquire()
	if err != nil {
		return train.Sample{}, 0, err
	}
	defer release()
	s, err := p.sampleTurnFrom(ctx, m, version, context, o)
	return s, version, err
}

func (p *Model) sampleTurnFrom(ctx context.Context, m *model.Model, version int, context []int, o train.SampleOptions) (train.Sample, error) {
	comp, err := p.turns.sample(ctx, m, version, context, model.SampleOptions{Temperature: float32(o.Temperature),
		TopP: float32(o.TopP), MaxNewTokens: o.MaxNewTokens, Stop: p.stop, Rand: p.rng}, &p.rngMu)
	if err != nil {
		return train.Sample{}, err
	}
	return samplesOf([]model.Completion{comp})[0], nil
}

var _ train.TurnPolicy = (*Model)(nil)
