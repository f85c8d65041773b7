package model

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/swetui/swetui/internal/sgemm"
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

// decoder runs the model in plain Go for one Sample call. The weights are
// packed for the matmul kernel once per call, with the q/k/v and the
// gate/up projections fused into one product each, so that a decoding step
// makes one pass over each layer's weights for all G sequences. The
// prompt's keys and values are cached once and shared by the G completions
// (keys transposed, so that the scores of all G·group query heads against
// them are one product); each completion's own keys and values go in its
// suffix cache. Every buffer is allocated up front: a decoding step
// allocates nothing.
type decoder struct {
	c                     Config
	P, maxNew, G          int
	qkvw, group           int
	qkv, wo, gu, down     []*sgemm.Packed // per layer
	qkvBias               [][]float32     // per layer, nil without biases
	head                  *sgemm.Packed
	pk, pv                [][]float32 // per layer: [kvh][HD][P], [kvh][P][HD]
	sk, sv                [][]float32 // per layer: [G][kvh][HD][maxNew], [G][kvh][maxNew][HD]
	x, h, fused, att, tmp []float32   // [rows, ·] scratch, rows = max(P, G)
	act, xs, logits       []float32
	q, k, v               []float32 // prefill: q, k, v apart, as attnForward wants them
	qb, ob, sc            []float32 // decoding: gathered queries, outputs, scores
}

func (m *Model) newDecoder(P, maxNew, G int) *decoder {
	c := m.Cfg
	hd := c.HeadDim
	qd, kvd := c.Heads*hd, c.KVHeads*hd
	d := m.packedDecoder(max(P, G))
	d.P, d.maxNew, d.G = P, maxNew, G
	for range m.layers {
		d.pk = append(d.pk, make([]float32, kvd*P))
		d.pv = append(d.pv, make([]float32, kvd*P))
		d.sk = append(d.sk, make([]float32, G*kvd*maxNew))
		d.sv = append(d.sv, make([]float32, G*kvd*maxNew))
	}
	d.xs, d.logits = make([]float32, G*c.DModel), make([]float32, G*c.VocabSize)
	d.q, d.k, d.v = make([]float32, P*qd), make([]float32, P*kvd), make([]float32, P*kvd)
	d.qb, d.ob = make([]float32, G*d.group*hd), make([]float32, G*d.group*hd)
	d.sc = make([]float32, G*d.group*(P+maxNew))
	return d
}

// packedDecoder packs m's weights for the matmul kernel and allocates the
// scratch of R rows that projecting and the MLP use; the caches are the
// caller's.
func (m *Model) packedDecoder(R int) *decoder {
	c := m.Cfg
	D, hd, F := c.DModel, c.HeadDim, c.DFF
	qd, kvd := c.Heads*hd, c.KVHeads*hd
	d := &decoder{c: c, qkvw: qd + 2*kvd, group: c.Heads / c.KVHeads}
	W := func(i int) []float32 { return m.Params[i].W }
	for _, l := range m.layers {
		d.qkv = append(d.qkv, sgemm.PackCols(nil, D, [][]float32{W(l.wq), W(l.wk), W(l.wv)}, []int{qd, kvd, kvd}))
		d.wo = append(d.wo, sgemm.PackCols(nil, qd, [][]float32{W(l.wo)}, []int{D}))
		d.gu = append(d.gu, sgemm.PackCols(nil, D, [][]float32{W(l.wg), W(l.wu)}, []int{F, F}))
		d.down = append(d.down, sgemm.PackCols(nil, F, [][]float32{W(l.wd)}, []int{D}))
		var b []float32
		if l.bq >= 0 {
			b = slices.Concat(W(l.bq), W(l.bk), W(l.bv))
		}
		d.qkvBias = append(d.qkvBias, b)
	}
	d.head = sgemm.PackCols(nil, D, [][]float32{W(m.lmHead)}, []int{c.VocabSize})
	return d.withRows(R)
}

// withRows is a decoder with d's packed weights and scratch of its own for
// R rows: decoders that never run at once share one packing.
func (d *decoder) withRows(R int) *decoder {
	c := d.c
	D, F, qd := c.DModel, c.DFF, c.Heads*c.HeadDim
	e := &decoder{c: c, qkvw: d.qkvw, group: d.group, qkv: d.qkv, wo: d.wo, gu: d.gu, down: d.down, qkvBias: d.qkvBias, head: d.head}
	e.x, e.h, e.tmp = make([]float32, R*D), make([]float32, R*D), make([]float32, R*D)
	e.fused, e.att = make([]float32, R*max(e.qkvw, 2*F)), make([]float32, R*qd)
	e.act = make([]float32, R*F)
	return e
}

// mul is C = A·W for R rows, split across cores only when that pays.
func mul(w *sgemm.Packed, R int, a []float32, c []float32) {
	w.Mul(R, 1, a, w.K, 0, c, w.N)
}

// mlp adds attention's output projection and the SwiGLU block of layer li
// to the residual stream of R rows.
func (d *decoder) mlp(m *Model, li, R int) {
	c := d.c
	D, F := c.DModel, c.DFF
	l := m.layers[li]
	mul(d.wo[li], R, d.att, d.tmp)
	vec.Axpy(d.x[:R*D], d.tmp, 1)
	rmsNormRows(d.h[:R*D], d.x[:R*D], m.Params[l.mlpNorm].W, c.NormEps)
	mul(d.gu[li], R, d.h, d.fused) // [R, 2F]: gate then up
	for r := 0; r < R; r++ {
		gu := d.fused[r*2*F : (r+1)*2*F]
		vec.SiLUMul(d.act[r*F:(r+1)*F], gu[:F], gu[F:])
	}
	mul(d.down[li], R, d.act, d.tmp)
	vec.Axpy(d.x[:R*D], d.tmp, 1)
}

// project computes the fused q/k/v rows of R rows, row r at position
// pos(r) (RoPE applied).
func (d *decoder) project(m *Model, li, R int, pos func(r int) int) {
	c := d.c
	D, qd, kvd := c.DModel, c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	l := m.layers[li]
	rmsNormRows(d.h[:R*D], d.x[:R*D], m.Params[l.attnNorm].W, c.NormEps)
	mul(d.qkv[li], R, d.h, d.fused)
	for r := 0; r < R; r++ {
		row := d.fused[r*d.qkvw : (r+1)*d.qkvw]
		if b := d.qkvBias[li]; b != nil {
			vec.Axpy(row, b, 1)
		}
		m.rope.rotate(row[:qd], pos(r), 1)
		m.rope.rotate(row[qd:qd+kvd], pos(r), 1)
	}
}

// prefill runs the prompt through the model, filling the shared cache, and
// returns the logits of its last token.
func (d *decoder) prefill(m *Model, prompt []int) []float32 {
	c := d.c
	P, D, hd := d.P, c.DModel, c.HeadDim
	qd, kvd := c.Heads*hd, c.KVHeads*hd
	emb := m.Params[m.embed].W
	for r, t := range prompt {
		copy(d.x[r*D:(r+1)*D], emb[t*D:(t+1)*D])
	}
	as := attnShape{B: 1, T: P, H: c.Heads, KVH: c.KVHeads, HD: hd}
	for li := range m.layers {
		d.project(m, li, P, func(r int) int { return r })
		for r := 0; r < P; r++ {
			row := d.fused[r*d.qkvw : (r+1)*d.qkvw]
			copy(d.q[r*qd:(r+1)*qd], row[:qd])
			copy(d.k[r*kvd:(r+1)*kvd], row[qd:qd+kvd])
			copy(d.v[r*kvd:(r+1)*kvd], row[qd+kvd:])
		}
		// The training graph's attention kernel, so prompt positions match it.
		attnForward(as, d.q, d.k, d.v, d.att[:P*qd], nil)
		pk, pv := d.pk[li], d.pv[li]
		for kh := 0; kh < c.KVHeads; kh++ {
			for r := 0; r < P; r++ {
				kr, vr := d.k[r*kvd+kh*hd:r*kvd+(kh+1)*hd], d.v[r*kvd+kh*hd:r*kvd+(kh+1)*hd]
				for i, x := range kr {
					pk[(kh*hd+i)*P+r] = x
				}
				copy(pv[(kh*P+r)*hd:], vr)
			}
		}
		d.mlp(m, li, P)
	}
	return d.lmHead(m, d.x[(P-1)*D:P*D], 1)
}

// lmHead returns the logits of R rows of the residual stream.
func (d *decoder) lmHead(m *Model, x []float32, R int) []float32 {
	D, V := d.c.DModel, d.c.VocabSize
	rmsNormRows(d.xs[:R*D], x[:R*D], m.Params[m.norm].W, d.c.NormEps)
	d.head.Mul(R, 1, d.xs, D, 0, d.logits, V)
	return d.logits[:R*V]
}

// step decodes one token for each of the R active completions seqs (all at
// position P+t, t tokens after the prompt) and returns their logits [R, V].
func (d *decoder) step(m *Model, seqs, toks []int, t int) []float32 {
	c := d.c
	R, D, hd := len(seqs), c.DModel, c.HeadDim
	qd, kvd, group, P, S := c.Heads*hd, c.KVHeads*hd, d.group, d.P, d.maxNew
	scale := float32(1 / math.Sqrt(float64(hd)))
	emb := m.Params[m.embed].W
	for r, tok := range toks {
		copy(d.x[r*D:(r+1)*D], emb[tok*D:(tok+1)*D])
	}
	n, ld := P+t+1, P+S // keys per query; score row stride
	for li := range m.layers {
		d.project(m, li, R, func(int) int { return P + t })
		sk, sv := d.sk[li], d.sv[li]
		for r, s := range seqs {
			row := d.fused[r*d.qkvw : (r+1)*d.qkvw]
			for kh := 0; kh < c.KVHeads; kh++ {
				base := (s*c.KVHeads + kh) * hd * S
				for i, x := range row[qd+kh*hd : qd+(kh+1)*hd] {
					sk[base+i*S+t] = x
				}
				copy(sv[base+t*hd:], row[qd+kvd+kh*hd:qd+kvd+(kh+1)*hd])
			}
		}
		Q := R * group // query rows per kv head
		for kh := 0; kh < c.KVHeads; kh++ {
			for r := 0; r < R; r++ {
				copy(d.qb[r*group*hd:(r+1)*group*hd], d.fused[r*d.qkvw+kh*group*hd:])
			}
			// Scores against the shared prompt, then each completion's own
			// keys, side by side in one row per query head.
			sgemm.SgemmSerial(false, false, Q, P, hd, scale, d.qb, hd, d.pk[li][kh*hd*P:], P, 0, d.sc, ld)
			for r, s := range seqs {
				base := (s*c.KVHeads + kh) * hd * S
				sgemm.SgemmSerial(false, false, group, t+1, hd, scale, d.qb[r*group*hd:], hd, sk[base:], S, 0, d.sc[r*group*ld+P:], ld)
			}
			for i := 0; i < Q; i++ {
				softmaxRow(d.sc[i*ld : i*ld+n])
			}
			sgemm.SgemmSerial(false, false, Q, hd, P, 1, d.sc, ld, d.pv[li][kh*P*hd:], hd, 0, d.ob, hd)
			for r, s := range seqs {
				base := (s*c.KVHeads + kh) * hd * S
				sgemm.SgemmSerial(false, false, group, hd, t+1, 1, d.sc[r*group*ld+P:], ld, sv[base:], hd, 1, d.ob[r*group*hd:], hd)
			}
			for r := 0; r < R; r++ {
				copy(d.att[r*qd+kh*group*hd:r*qd+(kh+1)*group*hd], d.ob[r*group*hd:(r+1)*group*hd])
			}
		}
		d.mlp(m, li, R)
	}
	return d.lmHead(m, d.x, R)
}

// Sample draws n completions of prompt. The prompt is prefilled once into a
// cache that the n completions share; they then decode together, one
// batched step per token.
func (m *Model) Sample(ctx context.Context, prompt []int, n int, o SampleOptions) ([]Completion, error) {
	if err := m.checkContext("model.Sample: prompt", prompt); err != nil {
		return nil, err
	}
	if n < 1 {
		return nil, fmt.Errorf("model.Sample: n=%d must be >= 1", n)
	}
	maxNew, stop := o.limits(m.Cfg.Context, len(prompt))
	d := m.newDecoder(len(prompt), maxNew, n)
	last := d.prefill(m, prompt)
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	V := m.Cfg.VocabSize
	out := make([]Completion, n)
	logits := make([]float32, n*V)
	active, toks := make([]int, n), make([]int, 0, n)
	for i := range out {
		out[i].Tokens, out[i].Logprobs = make([]int, 0, maxNew), make([]float32, 0, maxNew)
		copy(logits[i*V:], last)
		active[i] = i
	}
	sc := newSampler(V)
	for t := 0; len(active) > 0; t++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		next := active[:0]
		toks = toks[:0]
		for ai, i := range active {
			tok, lp := sc.draw(logits[ai*V:(ai+1)*V], o)
			if out[i].appendDraw(tok, lp, stop, maxNew) {
				next = append(next, i) // in place: next never passes ai
				toks = append(toks, tok)
			}
		}
		active = next
		if len(active) == 0 {
			break
		}
		logits = d.step(m, active, toks, t)
	}
	return out, nil
}

// appendDraw adds a drawn token and its logprob to c and reports whether
// c goes on: it ends at a stop token, or truncated at maxNew tokens.
func (c *Completion) appendDraw(tok int, lp float32, stop map[int]bool, maxNew int) bool {
	c.Tokens = append(c.Tokens, tok)
	c.Logprobs = append(c.Logprobs, lp)
	if stop[tok] {
		return false
	}
	if len(c.Tokens) >= maxNew {
		c.Truncated = true
		return false
	}
	return true
}

// checkContext says what is wrong with a context to sample after: empty,
// no room left in the model's context, or a token outside the vocabulary.
func (m *Model) checkContext(what string, context []int) error {
	if len(context) == 0 || len(context) >= m.Cfg.Context {
		return fmt.Errorf("%s of %d tokens must be in [1, %d)", what, len(context), m.Cfg.Context)
	}
	for _, t := range context {
		if t < 0 || t >= m.Cfg.VocabSize {
			return fmt.Errorf("%s token %d outside vocab %d", what, t, m.Cfg.VocabSize)
		}
	}
	return nil
}

// limits fills in o's random source (a fixed seed when nil) and returns
// how many tokens may follow a context of n tokens in a model of context
// tokens, and the stop set.
func (o *SampleOptions) limits(context, n int) (maxNew int, stop map[int]bool) {
	if o.Rand == nil {
		o.Rand = rand.New(rand.NewPCG(1, 1))
	}
	maxNew = o.MaxNewTokens
	if maxNew <= 0 || n+maxNew > context {
		maxNew = context - n
	}
	stop = map[int]bool{}
	for _, t := range o.Stop {
		stop[t] = true
	}
	return maxNew, stop
}

type sampler struct {
	p   []float32
	idx []int
}

func newSampler(v int) *sampler { return &sampler{p: make([]float32, v), idx: make([]int, v)} }

// draw picks a token from logits and returns it with its logprob under
// softmax(logits/T) over the full vocabulary. One exp pass serves both: the
// logprob is computed exactly as rowLogprob (and so the training graph)
// computes it.
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
	mx := vec.Max(logits) * inv
	sum := vec.ExpSum(s.p, logits, inv, mx) // unnormalised probabilities
	lse := float64(mx) + math.Log(float64(sum))
	var tok int
	if o.TopP > 0 && o.TopP < 1 {
		for i := range s.idx {
			s.idx[i] = i
		}
		slices.SortFunc(s.idx, func(a, b int) int { return cmp.Compare(s.p[b], s.p[a]) })
		var cum float32
		k := 0
		for k < len(s.idx) {
			cum += s.p[s.idx[k]]
			k++
			if cum >= o.TopP*sum {
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
		u := o.Rand.Float32() * sum
		tok = len(s.p) - 1
		for i, p := range s.p {
			if u -= p; u < 0 {
				tok = i
				break
			}
		}
	}
	return tok, float32(float64(logits[tok]*inv) - lse)
}
