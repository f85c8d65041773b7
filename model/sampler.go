package model

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"

	"github.com/swetui/swetui/internal/vec"
)

// SampleOptions controls decoding.
type SampleOptions struct {
	// Temperature divides the logits; 0 decodes greedily (and reports
	// logprobs at temperature 1).
	Temperature float32
	// TopP keeps the smallest set of tokens whose probability reaches TopP
	// (nucleus sampling); 0 or >= 1 disables it.
	TopP float32
	// MaxNewTokens bounds each completion (the context bounds it too).
	MaxNewTokens int
	// Stop ends a completion when one of these tokens is sampled; the stop
	// token is kept as the completion's last token (it is part of what the
	// policy chose, and GRPO trains on it).
	Stop []int
	// Rand is the source of randomness; nil uses a fixed seed.
	Rand *rand.Rand
}

// Completion is one sampled continuation of a prompt.
type Completion struct {
	Tokens []int
	// Logprobs are the behaviour logprobs of Tokens: log softmax(logits/T)
	// of the sampled token over the full vocabulary (before top-p
	// truncation), which is what Logprobs with Batch.Temperature = T
	// recomputes (TRL does the same).
	Logprobs []float32
	// Truncated is true when the completion ended without a stop token
	// (MaxNewTokens or the context ran out).
	Truncated bool
}

// kvCache holds one sequence's keys and values, per layer [context, Hkv].
type kvCache struct {
	k, v [][]float32
	n    int // positions filled
}

func (m *Model) newCache(capacity int) *kvCache {
	kvd := m.Cfg.KVHeads * m.Cfg.HeadDim
	c := &kvCache{}
	for range m.layers {
		c.k = append(c.k, make([]float32, capacity*kvd))
		c.v = append(c.v, make([]float32, capacity*kvd))
	}
	return c
}

func (c *kvCache) cloneN(n int) *kvCache {
	d := &kvCache{n: c.n}
	for l := range c.k {
		k, v := make([]float32, len(c.k[l])), make([]float32, len(c.v[l]))
		copy(k, c.k[l][:n])
		copy(v, c.v[l][:n])
		d.k, d.v = append(d.k, k), append(d.v, v)
	}
	return d
}

// decRow is one token being run through the decoder: its sequence's cache
// and its position.
type decRow struct {
	c   *kvCache
	pos int
	tok int
}

// decode runs rows through the model in plain Go, appending their keys and
// values to their caches, and returns the logits [len(want), V] of the rows
// whose index is in want. Rows of one sequence must come in position order.
func (m *Model) decode(rows []decRow, want []int) []float32 {
	c := m.Cfg
	R, D, hd := len(rows), c.DModel, c.HeadDim
	qd, kvd := c.Heads*hd, c.KVHeads*hd
	group := c.Heads / c.KVHeads
	scale := float32(1 / math.Sqrt(float64(hd)))
	W := func(i int) []float32 { return m.Params[i].W }

	x := make([]float32, R*D)
	emb := W(m.embed)
	for r, row := range rows {
		copy(x[r*D:(r+1)*D], emb[row.tok*D:(row.tok+1)*D])
	}
	h := make([]float32, R*D)
	q, k, v := make([]float32, R*qd), make([]float32, R*kvd), make([]float32, R*kvd)
	att := make([]float32, R*qd)
	g, u := make([]float32, R*c.DFF), make([]float32, R*c.DFF)
	tmp := make([]float32, R*D)
	linear := func(dst, src []float32, in, out, w, b int) {
		gemm(false, false, R, out, in, 1, src, in, W(w), out, 0, dst, out)
		if b >= 0 {
			bias := W(b)
			for i := range dst {
				dst[i] += bias[i%out]
			}
		}
	}
	for li, l := range m.layers {
		rmsNormRows(h, x, W(l.attnNorm), c.NormEps)
		linear(q, h, D, qd, l.wq, l.bq)
		linear(k, h, D, kvd, l.wk, l.bk)
		linear(v, h, D, kvd, l.wv, l.bv)
		for r, row := range rows {
			m.rope.rotate(q[r*qd:(r+1)*qd], row.pos, 1)
			m.rope.rotate(k[r*kvd:(r+1)*kvd], row.pos, 1)
			copy(row.c.k[li][row.pos*kvd:], k[r*kvd:(r+1)*kvd])
			copy(row.c.v[li][row.pos*kvd:], v[r*kvd:(r+1)*kvd])
		}
		if block := prefillBlock(rows); block {
			// One sequence, consecutive positions p0..p0+R-1: per head,
			// S = Q Kᵀ over the cache [R, p0+R], causal softmax, O = P V.
			p0, n := rows[0].pos, rows[0].pos+R
			kc, vc := rows[0].c.k[li], rows[0].c.v[li]
			parallelFor(c.Heads, func(lo, hi int) {
				s := make([]float32, R*n)
				for hh := lo; hh < hi; hh++ {
					ko := (hh / group) * hd
					gemm1(false, true, R, n, hd, scale, q[hh*hd:], qd, kc[ko:], kvd, 0, s, n)
					for r := 0; r < R; r++ {
						row := s[r*n : (r+1)*n]
						softmaxRow(row[:p0+r+1])
						clear(row[p0+r+1:])
					}
					gemm1(false, false, R, hd, n, 1, s, n, vc[ko:], kvd, 0, att[hh*hd:], qd)
				}
			})
		} else {
			parallelFor(R*c.Heads, func(lo, hi int) {
				var s []float32
				for rh := lo; rh < hi; rh++ {
					r, hh := rh/c.Heads, rh%c.Heads
					row := rows[r]
					ko := (hh / group) * hd
					s = slices.Grow(s[:0], row.pos+1)[:row.pos+1]
					kc, vc := row.c.k[li], row.c.v[li]
					// s = K[0..pos] · q, then o = sᵀ V[0..pos] (strided cache rows).
					gemm1(false, true, row.pos+1, 1, hd, scale, kc[ko:], kvd, q[r*qd+hh*hd:], hd, 0, s, 1)
					softmaxRow(s)
					gemm1(false, false, 1, hd, row.pos+1, 1, s, row.pos+1, vc[ko:], kvd, 0, att[r*qd+hh*hd:], hd)
				}
			})
		}
		linear(tmp, att, qd, D, l.wo, -1)
		for i := range x {
			x[i] += tmp[i]
		}
		rmsNormRows(h, x, W(l.mlpNorm), c.NormEps)
		linear(g, h, D, c.DFF, l.wg, -1)
		linear(u, h, D, c.DFF, l.wu, -1)
		vec.SiLUMul(g, g, u)
		gemm(false, false, R, D, c.DFF, 1, g, c.DFF, W(l.wd), D, 0, tmp, D)
		for i := range x {
			x[i] += tmp[i]
		}
	}
	for _, row := range rows {
		row.c.n = max(row.c.n, row.pos+1)
	}
	// Final norm and LM head only for the rows that are sampled from.
	xs := make([]float32, len(want)*D)
	for i, r := range want {
		copy(xs[i*D:(i+1)*D], x[r*D:(r+1)*D])
	}
	rmsNormRows(xs, xs, W(m.norm), c.NormEps)
	logits := make([]float32, len(want)*c.VocabSize)
	gemm(false, false, len(want), c.VocabSize, D, 1, xs, D, W(m.lmHead), c.VocabSize, 0, logits, c.VocabSize)
	return logits
}

// prefillBlock reports whether rows are one sequence at consecutive
// positions (a prompt being prefilled), which attention can do as GEMMs.
func prefillBlock(rows []decRow) bool {
	if len(rows) < 2 {
		return false
	}
	for i, r := range rows {
		if r.c != rows[0].c || r.pos != rows[0].pos+i {
			return false
		}
	}
	return true
}

// Sample draws n completions of prompt. The prompt is prefilled once; its
// KV cache is then copied to each completion, and the n completions decode
// together, one batched step per token.
func (m *Model) Sample(ctx context.Context, prompt []int, n int, o SampleOptions) ([]Completion, error) {
	if len(prompt) == 0 || len(prompt) >= m.Cfg.Context {
		return nil, fmt.Errorf("model.Sample: prompt of %d tokens must be in [1, %d)", len(prompt), m.Cfg.Context)
	}
	for _, t := range prompt {
		if t < 0 || t >= m.Cfg.VocabSize {
			return nil, fmt.Errorf("model.Sample: prompt token %d outside vocab %d", t, m.Cfg.VocabSize)
		}
	}
	if n < 1 {
		return nil, fmt.Errorf("model.Sample: n=%d must be >= 1", n)
	}
	if o.Rand == nil {
		o.Rand = rand.New(rand.NewPCG(1, 1))
	}
	maxNew := o.MaxNewTokens
	if maxNew <= 0 || len(prompt)+maxNew > m.Cfg.Context {
		maxNew = m.Cfg.Context - len(prompt)
	}
	capacity := len(prompt) + maxNew
	stop := map[int]bool{}
	for _, t := range o.Stop {
		stop[t] = true
	}

	base := m.newCache(capacity)
	rows := make([]decRow, len(prompt))
	for i, t := range prompt {
		rows[i] = decRow{c: base, pos: i, tok: t}
	}
	last := m.decode(rows, []int{len(prompt) - 1})
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	V := m.Cfg.VocabSize
	out := make([]Completion, n)
	caches := make([]*kvCache, n)
	logits := make([]float32, n*V)
	for i := range caches {
		if i == n-1 {
			caches[i] = base
		} else {
			caches[i] = base.cloneN(len(prompt) * m.Cfg.KVHeads * m.Cfg.HeadDim)
		}
		copy(logits[i*V:], last)
	}
	active := make([]int, n)
	for i := range active {
		active[i] = i
	}
	sc := newSampler(V)
	for step := 0; len(active) > 0; step++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		next := active[:0:0]
		rows = rows[:0]
		for ai, i := range active {
			tok, lp := sc.draw(logits[ai*V:(ai+1)*V], o)
			c := &out[i]
			c.Tokens = append(c.Tokens, tok)
			c.Logprobs = append(c.Logprobs, lp)
			switch {
			case stop[tok]:
			case len(c.Tokens) >= maxNew:
				c.Truncated = true
			default:
				next = append(next, i)
				rows = append(rows, decRow{c: caches[i], pos: len(prompt) + len(c.Tokens) - 1, tok: tok})
			}
		}
		active = next
		if len(active) == 0 {
			break
		}
		want := make([]int, len(rows))
		for i := range want {
			want[i] = i
		}
		logits = m.decode(rows, want)
	}
	return out, nil
}

type sampler struct {
	p   []float32
	idx []int
}

func newSampler(v int) *sampler { return &sampler{p: make([]float32, v), idx: make([]int, v)} }

// draw picks a token from logits and returns it with its logprob under
// softmax(logits/T) over the full vocabulary.
func (s *sampler) draw(logits []float32, o SampleOptions) (int, float32) {
	if o.Temperature <= 0 {
		best := 0
		for i, v := range logits {
			if v > logits[best] {
				best = i
			}
		}
		lp, _, _ := rowLogprob(logits, best, 1, s.p)
		return best, float32(lp)
	}
	inv := 1 / o.Temperature
	for i, v := range logits {
		s.p[i] = v * inv
	}
	softmaxRow(s.p)
	var tok int
	if o.TopP > 0 && o.TopP < 1 {
		for i := range s.idx {
			s.idx[i] = i
		}
		sort.Slice(s.idx, func(a, b int) bool { return s.p[s.idx[a]] > s.p[s.idx[b]] })
		var cum float32
		k := 0
		for k < len(s.idx) {
			cum += s.p[s.idx[k]]
			k++
			if cum >= o.TopP {
				break
			}
		}
		u := o.Rand.Float32() * cum
		tok = s.idx[k-1]
		for _, i := range s.idx[:k] {
			if u -= s.p[i]; u < 0 {
				tok = i
				break
			}
		}
	} else {
		u := o.Rand.Float32()
		tok = len(s.p) - 1
		for i, p := range s.p {
			if u -= p; u < 0 {
				tok = i
				break
			}
		}
	}
	lp, _, _ := rowLogprob(logits, tok, inv, s.p)
	return tok, float32(lp)
}
