package cuda

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/swetui/swetui/model"
)

// turnRows is how many new tokens of a turn's context one decode step
// takes: they share a cache slot, each at its own position attending up to
// itself (the keys are written before attention reads them).
const turnRows = 64

// turnState keeps agent trajectories' keys and values on the device from
// one turn to the next, a cache slot a trajectory (model.Conversation's
// counterpart): a turn computes only what its context adds to the slot's.
type turnState struct {
	s    *decodeState
	key  int     // the weights' generation the slots were filled under
	held [][]int // per slot: the tokens its cache holds
	used []int   // per slot: when it was last used
	tick int
}

func (t *turnState) free(dev Device) {
	if t != nil {
		t.s.free(dev)
	}
}

// turnsFor returns the turn state of at least slots slots, empty when key
// (the weights' generation) is not the one its slots were filled under.
func (e *Engine) turnsFor(slots, key int) (*turnState, error) {
	if t := e.turns; t != nil && t.s.slots >= slots {
		if t.key != key {
			t.key = key
			for i := range t.held {
				t.held[i] = nil
			}
		}
		return t, nil
	}
	e.turns.free(e.dev)
	e.turns = nil
	rows := max(turnRows, slots)
	if err := e.loraScratch(rows); err != nil {
		return nil, err
	}
	s, ps := layoutDecode(e.cfg, e.act, rows, slots, e.cfg.Context)
	arenas, _, err := ps.alloc(e.dev)
	if err != nil {
		return nil, fmt.Errorf("turn caches of %d × %d: %w", slots, s.cap, err)
	}
	s.arenas = arenas
	e.turns = &turnState{s: s, key: key, held: make([][]int, slots), used: make([]int, slots)}
	return e.turns, nil
}

// slotFor picks the slot whose cache is the longest proper prefix of
// context (another trajectory's, departing from it, is left alone), else
// the least recently used one.
func (t *turnState) slotFor(context []int) int {
	best, bestLen := -1, 0
	for i, h := range t.held {
		if len(h) > bestLen && len(h) < len(context) && slices.Equal(h, context[:len(h)]) {
			best, bestLen = i, len(h)
		}
	}
	if best < 0 {
		best = 0
		for i := range t.used {
			if t.used[i] < t.used[best] {
				best = i
			}
		}
		t.held[best] = nil
	}
	t.tick++
	t.used[best] = t.tick
	return best
}

// SampleTurn draws one completion of context (Sample with n = 1) for an
// agent's trajectory, keeping its keys and values in one of slots cache
// slots for the next turn, which then computes only what it adds. A write
// of the weights drops every cache.
func (e *Engine) SampleTurn(ctx context.Context, context []int, slots int, o model.SampleOptions) (model.Completion, error) {
	c := e.cfg
	if len(context) == 0 || len(context) >= c.Context {
		return model.Completion{}, fmt.Errorf("cuda sample turn: context of %d tokens must be in [1, %d)", len(context), c.Context)
	}
	for _, t := range context {
		if t < 0 || t >= c.VocabSize {
			return model.Completion{}, fmt.Errorf("cuda sample turn: token %d outside vocab %d", t, c.VocabSize)
		}
	}
	if o.Rand == nil {
		o.Rand = rand.New(rand.NewPCG(1, 1))
	}
	maxNew := o.MaxNewTokens
	if maxNew <= 0 || len(context)+maxNew > c.Context {
		maxNew = c.Context - len(context)
	}
	stop := map[int]bool{}
	for _, t := range o.Stop {
		stop[t] = true
	}
	invT := float32(0)
	if o.Temperature > 0 {
		invT = 1 / o.Temperature
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	var t *turnState
	if err := e.dev.Do(func() (err error) { t, err = e.turnsFor(max(1, slots), e.wgen); return err }); err != nil {
		return model.Completion{}, fmt.Errorf("cuda sample turn: %w", err)
	}
	slot := t.slotFor(context)
	k := 0
	for k < len(t.held[slot]) && k < len(context)-1 && t.held[slot][k] == context[k] {
		k++
	}
	e.turnReused.Add(int64(k))
	// The rows still to compute: what context adds, then each token drawn.
	pending := slices.Clone(context[k:])
	pos := k
	var out model.Completion
	for {
		if err := ctx.Err(); err != nil {
			t.held[slot] = nil
			return model.Completion{}, err
		}
		R := min(len(pending), t.s.rows)
		last := R == len(pending) // this step's last row draws the next token
		tok, lp, err := e.turnStep(t.s, pending[:R], pos, slot, last, o.Rand, invT, o.TopP)
		if err != nil {
			t.held[slot] = nil
			return model.Completion{}, fmt.Errorf("cuda sample turn: %w", err)
		}
		pos += R
		pending = pending[R:]
		if !last {
			continue
		}
		out.Tokens = append(out.Tokens, tok)
		out.Logprobs = append(out.Logprobs, lp)
		if stop[tok] {
			break
		}
		if len(out.Tokens) >= maxNew {
			out.Truncated = true
			break
		}
		pending = append(pending, tok)
	}
	t.held[slot] = append(slices.Clone(context), out.Tokens[:len(out.Tokens)-1]...)
	return out, nil
}

// turnStep runs toks through the decoder at positions pos.. of slot
// (their keys and values cached there) and, when draw, samples the token
// after the last one.
func (e *Engine) turnStep(s *decodeState, toks []int, pos0, slot int, draw bool, rng *rand.Rand, invT, topP float32) (int, float32, error) {
	R := len(toks)
	tok, pos, slots, length := make([]int32, R), make([]int32, R), make([]int32, R), make([]int32, R)
	us := make([]float32, R)
	for r, t := range toks {
		tok[r], pos[r], slots[r], length[r] = int32(t), int32(pos0+r), int32(slot), int32(pos0+r+1)
	}
	if draw {
		us[R-1] = rng.Float32() // one draw a token, as Sample makes
	}
	got, lps := make([]int32, 1), make([]float32, 1)
	err := e.dev.Do(func() error {
		for _, up := range []struct {
			t Tensor
			v []int32
		}{{s.tok, tok}, {s.pos, pos}, {s.slot, slots}, {s.length, length}} {
			if err := e.dev.Upload(up.t.View(0, R), up.v); err != nil {
				return err
			}
		}
		if err := e.dev.Upload(s.u.View(0, R), us); err != nil {
			return err
		}
		if !draw {
			e.decodeStep(s, R, 0, invT, topP)
			return nil
		}
		e.decodeStep(s, R, 1, invT, topP)
		if err := e.dev.Download(got, s.stok.View(R-1, 1)); err != nil {
			return err
		}
		return e.dev.Download(lps, s.lp.View(R-1, 1))
	})
	return int(got[0]), lps[0], err
}
