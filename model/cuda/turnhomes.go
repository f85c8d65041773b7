package cuda

import (
	"slices"
	"sync"
)

// turnHomes remembers which rank holds the keys of each agent trajectory
// in flight: after a turn, the rank and the tokens its turn cache now
// holds (the context and the reply but its last token, as
// Engine.SampleTurn keeps them). The next turn's context extends them, so
// the rank whose tokens are its longest prefix is the trajectory's. It is
// bounded (keep's bound): the oldest are forgotten first (a forgotten trajectory's next
// turn goes to the least busy rank, and prefills there).
type turnHomes struct {
	mu    sync.Mutex
	homes []turnHome // oldest first
}

type turnHome struct {
	rank int
	held []int
}

// of returns the rank holding the longest proper prefix of context, or -1.
func (h *turnHomes) of(context []int) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	best, bestLen := -1, 0
	for _, t := range h.homes {
		if len(t.held) > bestLen && len(t.held) < len(context) && slices.Equal(t.held, context[:len(t.held)]) {
			best, bestLen = t.rank, len(t.held)
		}
	}
	return best
}

// keep records that rank r now holds context and reply (but its last
// token); what the trajectory held before (a prefix of it) is dropped, and
// the oldest beyond bound.
func (h *turnHomes) keep(r int, context, reply []int, bound int) {
	held := slices.Concat(context, reply[:max(len(reply)-1, 0)])
	h.mu.Lock()
	defer h.mu.Unlock()
	h.homes = slices.DeleteFunc(h.homes, func(t turnHome) bool {
		return len(t.held) <= len(held) && slices.Equal(t.held, held[:len(t.held)])
	})
	h.homes = append(h.homes, turnHome{rank: r, held: held})
	if over := len(h.homes) - bound; over > 0 {
		h.homes = slices.Delete(h.homes, 0, over)
	}
}
