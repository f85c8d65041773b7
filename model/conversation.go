package model

import (
	"context"
	"math"

	"github.com/swetui/swetui/internal/sgemm"
)

// A Conversation is one sequence sampled turn after turn (an agent's
// trajectory: its replies, and the observations put between them), whose
// keys and values stay cached from one turn to the next: a turn prefills
// only the tokens its context adds to what the cache holds, instead of the
// whole trajectory so far. It holds the weights as they were when it was
// made (packed for the matmul kernel): a Conversation must not outlive an
// update of the model's weights. Not safe for concurrent use.
type Conversation struct {
	m    *Model
	d    *decoder // packed weights, and scratch for convChunk rows
	cap  int
	toks []int       // the tokens whose keys and values are cached, in order
	kc   [][]float32 // per layer: keys [kvh][HD][cap], transposed
	vc   [][]float32 // per layer: values [kvh][cap][HD]
	qb   []float32   // [convChunk·group, HD]: one kv head's queries
	ob   []float32   // [convChunk·group, HD]: their outputs
	sc   []float32   // [convChunk·group, cap]: their scores
	smp  *sampler
}

// convChunk is how many new tokens one pass prefills: it bounds the
// scratch (scores are rows × the cache's length).
const convChunk = 128

// NewConversation makes an empty conversation over m's current weights,
// with room for the model's context.
func (m *Model) NewConversation() *Conversation {
	return m.newConversation(m.packedDecoder(convChunk))
}

// newConversation makes an empty conversation whose passes run on d (its
// packed weights, its scratch of convChunk rows).
func (m *Model) newConversation(d *decoder) *Conversation {
	c := m.Cfg
	hd := c.HeadDim
	kvd := c.KVHeads * hd
	cv := &Conversation{m: m, d: d, cap: c.Context, smp: newSampler(c.VocabSize)}
	cv.d.xs, cv.d.logits = make([]float32, c.DModel), make([]float32, c.VocabSize)
	for range m.layers {
		cv.kc = append(cv.kc, make([]float32, kvd*cv.cap))
		cv.vc = append(cv.vc, make([]float32, kvd*cv.cap))
	}
	group := c.Heads / c.KVHeads
	cv.qb, cv.ob = make([]float32, convChunk*group*hd), make([]float32, convChunk*group*hd)
	cv.sc = make([]float32, convChunk*group*cv.cap)
	return cv
}

// Cached returns how many tokens' keys and values the conversation holds.
func (cv *Conversation) Cached() int { return len(cv.toks) }

// Sample draws one completion of context (n = 1 of Model.Sample, the same
// options). The part of context the cache already holds is not computed
// again; a context that departs from it is computed from where it departs.
// The completion's tokens but its last are cached after it, so that the
// next turn's context (this one, the completion and what follows) adds only
// its own tokens.
func (cv *Conversation) Sample(ctx context.Context, context []int, o SampleOptions) (Completion, error) {
	logits, err := cv.begin(ctx, context)
	if err != nil {
		return Completion{}, err
	}
	maxNew, stop := o.limits(cv.m.Cfg.Context, len(context))
	out := Completion{Tokens: make([]int, 0, maxNew), Logprobs: make([]float32, 0, maxNew)}
	for {
		tok, lp := cv.smp.draw(logits, o)
		if !out.appendDraw(tok, lp, stop, maxNew) {
			return out, nil
		}
		if logits, err = cv.extend(ctx, []int{tok}); err != nil {
			return Completion{}, err
		}
	}
}

// begin brings the cache to context but its last token, which it computes
// too, and returns that token's logits: the first draw's. The cache is kept
// as far as it agrees with context.
func (cv *Conversation) begin(ctx context.Context, context []int) ([]float32, error) {
	if err := cv.m.checkContext("model.Conversation: context", context); err != nil {
		return nil, err
	}
	k := 0
	for k < len(cv.toks) && k < len(context)-1 && cv.toks[k] == context[k] {
		k++
	}
	cv.toks = cv.toks[:k]
	return cv.extend(ctx, context[k:])
}

// extend computes toks after the cached tokens, caching their keys and
// values, and returns the logits of the last one.
func (cv *Conversation) extend(ctx context.Context, toks []int) ([]float32, error) {
	D := cv.m.Cfg.DModel
	var R int
	for len(toks) > 0 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		R = min(len(toks), convChunk)
		cv.chunk(toks[:R])
		toks = toks[R:]
	}
	return cv.d.lmHead(cv.m, cv.d.x[(R-1)*D:R*D], 1), nil
}

// cacheKV caches, in layer li at position p, the key and value of a fused
// q/k/v row (keys transposed, so one product scores a query against all).
func (cv *Conversation) cacheKV(li, p int, row []float32) {
	c := cv.m.Cfg
	hd, S := c.HeadDim, cv.cap
	qd, kvd := c.Heads*hd, c.KVHeads*hd
	kc, vc := cv.kc[li], cv.vc[li]
	for kh := 0; kh < c.KVHeads; kh++ {
		for i, x := range row[qd+kh*hd : qd+(kh+1)*hd] {
			kc[(kh*hd+i)*S+p] = x
		}
		copy(vc[(kh*S+p)*hd:], row[qd+kvd+kh*hd:qd+kvd+(kh+1)*hd])
	}
}

// chunk runs R ≤ convChunk new tokens through the model at the positions
// after the cache, each attending to the cache and to the new tokens up to
// itself, and caches their keys and values.
func (cv *Conversation) chunk(toks []int) {
	m, d := cv.m, cv.d
	c := m.Cfg
	R, D, hd, S := len(toks), c.DModel, c.HeadDim, cv.cap
	qd, group := c.Heads*hd, d.group
	start := len(cv.toks)
	n := start + R // keys the last new token sees
	scale := float32(1 / math.Sqrt(float64(hd)))
	emb := m.Params[m.embed].W
	for r, t := range toks {
		copy(d.x[r*D:(r+1)*D], emb[t*D:(t+1)*D])
	}
	gemm := sgemm.SgemmSerial
	if R > 1 {
		gemm = sgemm.Sgemm
	}
	Q := R * group // query rows per kv head
	for li := range m.layers {
		d.project(m, li, R, func(r int) int { return start + r })
		kc, vc := cv.kc[li], cv.vc[li]
		for r := 0; r < R; r++ {
			cv.cacheKV(li, start+r, d.fused[r*d.qkvw:(r+1)*d.qkvw])
		}
		for kh := 0; kh < c.KVHeads; kh++ {
			for r := 0; r < R; r++ {
				copy(cv.qb[r*group*hd:(r+1)*group*hd], d.fused[r*d.qkvw+kh*group*hd:])
			}
			gemm(false, false, Q, n, hd, scale, cv.qb, hd, kc[kh*hd*S:], S, 0, cv.sc, n)
			for i := 0; i < Q; i++ {
				row := cv.sc[i*n : (i+1)*n]
				seen := start + i/group + 1 // causal: up to the query's own position
				softmaxRow(row[:seen])
				clear(row[seen:])
			}
			gemm(false, false, Q, hd, n, 1, cv.sc, n, vc[kh*S*hd:], hd, 0, cv.ob, hd)
			for r := 0; r < R; r++ {
				copy(d.att[r*qd+kh*group*hd:r*qd+(kh+1)*group*hd], cv.ob[r*group*hd:(r+1)*group*hd])
			}
		}
		d.mlp(m, li, R)
	}
	cv.toks = append(cv.toks, toks...)
}
