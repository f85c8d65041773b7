package policy

import (
	"context"
	"slices"
	"sync"

	"github.com/swetui/swetui/model"
	"github.com/swetui/swetui/train"
)

// maxConversations bounds the trajectories whose caches are kept: a few
// groups' worth (G trajectories a task play at once).
const maxConversations = 16

// turnCache keeps the conversations (model.Conversation) of the agent
// trajectories being sampled, for one set of weights: an update, or a
// snapshot of other weights, starts it over.
type turnCache struct {
	mu      sync.Mutex
	m       *model.Model
	version int
	convs   []*model.Conversation // least recently used first
	tokens  map[*model.Conversation][]int
}

// drop forgets every conversation: the policy's weights changed.
func (c *turnCache) drop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m, c.convs, c.tokens = nil, nil, nil
}

// take returns the conversation whose cached trajectory is the longest
// prefix of context (one that departs from it is another trajectory's,
// and is left to it), or a new one; it is the most recently used after.
func (c *turnCache) take(m *model.Model, version int, context []int) *model.Conversation {
	if c.m != m || c.version != version {
		c.m, c.version, c.convs, c.tokens = m, version, nil, map[*model.Conversation][]int{}
	}
	best, bestLen := -1, 0
	for i, cv := range c.convs {
		held := c.tokens[cv]
		if len(held) > bestLen && len(held) < len(context) && slices.Equal(held, context[:len(held)]) {
			best, bestLen = i, len(held)
		}
	}
	var cv *model.Conversation
	if best >= 0 {
		cv = c.convs[best]
		c.convs = slices.Delete(c.convs, best, best+1)
	} else {
		if len(c.convs) == maxConversations {
			delete(c.tokens, c.convs[0])
			c.convs = c.convs[1:]
		}
		cv = m.NewConversation()
	}
	c.convs = append(c.convs, cv)
	return cv
}

// sample draws one reply to context with m's conversation for it.
func (c *turnCache) sample(ctx context.Context, m *model.Model, version int, context []int, o model.SampleOptions) (model.Completion, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cv := c.take(m, version, context)
	comp, err := cv.Sample(ctx, context, o)
	if err != nil {
		delete(c.tokens, cv)
		c.convs = slices.DeleteFunc(c.convs, func(x *model.Conversation) bool { return x == cv })
		return comp, err
	}
	// What the cache holds: the context, and the reply but its last token.
	c.tokens[cv] = append(slices.Clip(context), comp.Tokens[:len(comp.Tokens)-1]...)
	return comp, nil
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
	p.rngMu.Lock()
	defer p.rngMu.Unlock()
	comp, err := p.turns.sample(ctx, m, version, context, model.SampleOptions{Temperature: float32(o.Temperature),
		TopP: float32(o.TopP), MaxNewTokens: o.MaxNewTokens, Stop: p.stop, Rand: p.rng})
	if err != nil {
		return train.Sample{}, err
	}
	return samplesOf([]model.Completion{comp})[0], nil
}

var _ train.TurnPolicy = (*Model)(nil)
