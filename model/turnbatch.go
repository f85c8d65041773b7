package model

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"

	"github.com/swetui/swetui/internal/sgemm"
)

// A TurnBatch samples the next replies of several conversations at once
// (the agent trajectories in flight): each decoding step runs one token of
// every conversation in it through the model as the rows of one product
// per weight matrix, each row attending to its own conversation's cache.
// Conversations join whenever their turn comes (Add computes what their
// context adds to their cache) and leave when their reply ends (Step
// returns them): continuous batching. A reply is drawn exactly as
// Conversation.Sample draws it; only the order of the draws from a shared
// random source differs. The conversations it makes (NewConversation) share
// its packed weights, which are the model's as the batch was made: neither
// may outlive an update of the weights. Not safe for concurrent use.
type TurnBatch struct {
	m     *Model
	d     *decoder // packed weights; scratch of rows rows
	rows  int
	turns []*turn // in the batch, in the order they joined
	pos   []int   // each fed row's position
	sc    [][]float32
	smp   *sampler
}

// turn is one conversation's reply in the making.
type turn struct {
	cv     *Conversation
	o      SampleOptions
	maxNew int
	stop   map[int]bool
	out    Completion
	logits []float32 // what the next draw is from: its own, or a row of the batch's
}

// Finished is a reply a Step ended: its conversation's cache holds its
// context and the reply but its last token, as after Conversation.Sample.
type Finished struct {
	Conversation *Conversation
	Completion   Completion
}

// NewTurnBatch packs m's weights for a batch of at most rows replies.
func (m *Model) NewTurnBatch(rows int) *TurnBatch {
	if rows < 1 {
		rows = 1
	}
	b := &TurnBatch{m: m, d: m.packedDecoder(rows), rows: rows, pos: make([]int, rows), smp: newSampler(m.Cfg.VocabSize)}
	b.d.xs = make([]float32, rows*m.Cfg.DModel)
	b.d.logits = make([]float32, rows*m.Cfg.VocabSize)
	// One score buffer per core: the rows' attention splits across them.
	for range max(1, min(rows, runtime.GOMAXPROCS(0))) {
		b.sc = append(b.sc, make([]float32, b.d.group*m.Cfg.Context))
	}
	return b
}

// NewConversation makes an empty conversation over the batch's packed
// weights.
func (b *TurnBatch) NewConversation() *Conversation {
	return b.m.newConversation(b.d.withRows(convChunk))
}

// Len is how many replies are in the making; Free how many more may join.
func (b *TurnBatch) Len() int  { return len(b.turns) }
func (b *TurnBatch) Free() int { return b.rows - len(b.turns) }

// Add starts cv's reply to context: its cache is brought to the context
// (as Conversation.Sample does) and its first token is drawn at the next
// Step. cv must be the batch's and not in it already.
func (b *TurnBatch) Add(ctx context.Context, cv *Conversation, context []int, o SampleOptions) error {
	if cv.m != b.m || cv.d.head != b.d.head {
		return fmt.Errorf("model.TurnBatch: the conversation is not the batch's")
	}
	if b.Free() == 0 {
		return fmt.Errorf("model.TurnBatch: all %d rows are taken", b.rows)
	}
	if slices.ContainsFunc(b.turns, func(t *turn) bool { return t.cv == cv }) {
		return fmt.Errorf("model.TurnBatch: the conversation has a reply in the making")
	}
	logits, err := cv.begin(ctx, context)
	if err != nil {
		return err
	}
	tr := &turn{cv: cv, o: o, logits: slices.Clone(logits)}
	tr.maxNew, tr.stop = tr.o.limits(b.m.Cfg.Context, len(context))
	tr.out = Completion{Tokens: make([]int, 0, tr.maxNew), Logprobs: make([]float32, 0, tr.maxNew)}
	b.turns = append(b.turns, tr)
	return nil
}

// Remove takes cv's reply out of the batch unfinished (its caller gave
// up); the conversation's cache holds what was computed of it.
func (b *TurnBatch) Remove(cv *Conversation) {
	b.turns = slices.DeleteFunc(b.turns, func(t *turn) bool { return t.cv == cv })
}

// Step draws the next token of every reply in the batch, in the order they
// joined, and returns those that ended (a stop token, or their length);
// the others' tokens go through the model together, for the next Step.
// A caller that gives up on a reply takes it out (Remove).
func (b *TurnBatch) Step() []Finished {
	var done []Finished
	feed, toks := b.turns[:0], make([]int, 0, len(b.turns))
	for _, tr := range b.turns {
		tok, lp := b.smp.draw(tr.logits, tr.o)
		if tr.out.appendDraw(tok, lp, tr.stop, tr.maxNew) {
			feed = append(feed, tr) // in place: feed never passes the loop
			toks = append(toks, tok)
			continue
		}
		done = append(done, Finished{Conversation: tr.cv, Completion: tr.out})
	}
	clear(b.turns[len(feed):])
	b.turns = feed
	if len(feed) == 0 {
		return done
	}
	V := b.m.Cfg.VocabSize
	logits := b.forward(feed, toks)
	for r, tr := range feed {
		tr.logits = logits[r*V : (r+1)*V]
	}
	return done
}

// forward runs toks[r] at the next position of feed[r]'s conversation,
// caching its key and value there, and returns the rows' logits [R, V].
func (b *TurnBatch) forward(feed []*turn, toks []int) []float32 {
	m, d := b.m, b.d
	c := m.Cfg
	R, D, hd := len(feed), c.DModel, c.HeadDim
	qd, group := c.Heads*hd, d.group
	scale := float32(1 / math.Sqrt(float64(hd)))
	emb := m.Params[m.embed].W
	for r, tok := range toks {
		copy(d.x[r*D:(r+1)*D], emb[tok*D:(tok+1)*D])
		b.pos[r] = len(feed[r].cv.toks)
	}
	// attend is row r's attention, with sc for its scores: the same
	// products, in the same order, as Conversation.chunk's for one token.
	attend := func(li, r int, sc []float32) {
		cv, p := feed[r].cv, b.pos[r]
		S, n := cv.cap, b.pos[r]+1
		kc, vc := cv.kc[li], cv.vc[li]
		row := d.fused[r*d.qkvw : (r+1)*d.qkvw]
		cv.cacheKV(li, p, row)
		for kh := 0; kh < c.KVHeads; kh++ {
			sgemm.SgemmSerial(false, false, group, n, hd, scale, row[kh*group*hd:], hd, kc[kh*hd*S:], S, 0, sc, n)
			for i := 0; i < group; i++ {
				softmaxRow(sc[i*n : (i+1)*n])
			}
			sgemm.SgemmSerial(false, false, group, hd, n, 1, sc, n, vc[kh*S*hd:], hd, 0, d.att[r*qd+kh*group*hd:], hd)
		}
	}
	for li := range m.layers {
		d.project(m, li, R, func(r int) int { return b.pos[r] })
		// The rows' attention, each against its own cache, across the
		// cores: worker k takes rows k, k+w, ... with its own scores.
		w := min(len(b.sc), R)
		var wg sync.WaitGroup
		for k := 1; k < w; k++ {
			wg.Go(func() {
				for r := k; r < R; r += w {
					attend(li, r, b.sc[k])
				}
			})
		}
		for r := 0; r < R; r += w {
			attend(li, r, b.sc[0])
		}
		wg.Wait()
		d.mlp(m, li, R)
	}
	for r, tr := range feed {
		tr.cv.toks = append(tr.cv.toks, toks[r])
	}
	return d.lmHead(m, d.x, R)
}
