package cuda

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/swetui/swetui/model"
)

// decodeState is the sampler's memory: the KV cache (per layer, Slots
// sequences of Cap positions) and one decode step's buffers for up to
// Slots rows. It is kept between calls and regrown when a call needs more.
type decodeState struct {
	slots, cap int
	rows       int // a step's rows at most (slots, or more for a turn's prefill)
	kc, vc     []Tensor
	arenas     []Tensor

	tok, pos, slot, length, stok Tensor // i32 [slots]
	u, lp, rstd                  Tensor // f32 [slots]
	x                            Tensor // f32 [slots, D]
	h, tmp, q, k, v, o           Tensor
	g, up, s, hF, logits         Tensor
}

func (s *decodeState) free(dev Device) {
	if s == nil {
		return
	}
	for _, a := range s.arenas {
		dev.Free(a)
	}
	s.arenas = nil
}

// decodeFor returns a decode state of at least slots × capacity.
func (e *Engine) decodeFor(slots, capacity int) (*decodeState, error) {
	if err := e.loraScratch(slots); err != nil {
		return nil, err
	}
	if s := e.dec; s != nil && s.slots >= slots && s.cap >= capacity {
		return s, nil
	}
	e.dec.free(e.dev)
	e.dec = nil
	// Round up so that nearby calls reuse the state.
	s, ps := layoutDecode(e.cfg, e.act, slots, slots, min(e.cfg.BucketT(capacity), e.cfg.Context))
	arenas, _, err := ps.alloc(e.dev)
	if err != nil {
		return nil, fmt.Errorf("kv cache of %d × %d: %w", slots, s.cap, err)
	}
	s.arenas = arenas
	e.dec = s
	return s, nil
}

// layoutDecode lays out a decode state of slots × cp, its steps of up to
// rows rows, without allocating it.
func layoutDecode(c model.Config, act DType, rows, slots, cp int) (*decodeState, *planSpec) {
	D, F, V := c.DModel, c.DFF, c.VocabSize
	Hq, Hkv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	s := &decodeState{slots: slots, cap: cp, rows: rows}
	var ps planSpec
	ps.layers(&s.kc, act, c.Layers, slots*cp*Hkv)
	ps.layers(&s.vc, act, c.Layers, slots*cp*Hkv)
	for _, t := range []*Tensor{&s.tok, &s.pos, &s.slot, &s.length, &s.stok} {
		ps.add(t, I32, rows)
	}
	for _, t := range []*Tensor{&s.u, &s.lp, &s.rstd} {
		ps.add(t, F32, rows)
	}
	ps.add(&s.x, F32, rows*D)
	for _, b := range []struct {
		t *Tensor
		n int
	}{{&s.h, D}, {&s.tmp, D}, {&s.q, Hq}, {&s.k, Hkv}, {&s.v, Hkv}, {&s.o, Hq},
		{&s.g, F}, {&s.up, F}, {&s.s, F}, {&s.hF, D}, {&s.logits, V}} {
		ps.add(b.t, act, rows*b.n)
	}
	return s, &ps
}

func (e *Engine) cacheShape(s *decodeState) CacheShape {
	c := e.cfg
	return CacheShape{Slots: s.slots, Cap: s.cap, H: c.Heads, KVH: c.KVHeads, HD: c.HeadDim,
		Scale: float32(1 / math.Sqrt(float64(c.HeadDim)))}
}

// Sample draws n completions of prompt (as model.Model.Sample: stop
// tokens are kept, MaxNewTokens and the context bound the length). The
// prompt but its last token is prefilled once through the training
// forward; its keys and values are copied to every completion's cache
// slot, and the n completions then decode together, one step per token,
// the first step feeding each the prompt's last token.
func (e *Engine) Sample(ctx context.Context, prompt []int, n int, o model.SampleOptions) ([]model.Completion, error) {
	c := e.cfg
	if len(prompt) == 0 || len(prompt) >= c.Context {
		return nil, fmt.Errorf("cuda sample: prompt of %d tokens must be in [1, %d)", len(prompt), c.Context)
	}
	for _, t := range prompt {
		if t < 0 || t >= c.VocabSize {
			return nil, fmt.Errorf("cuda sample: prompt token %d outside vocab %d", t, c.VocabSize)
		}
	}
	if n < 1 {
		return nil, fmt.Errorf("cuda sample: n=%d must be >= 1", n)
	}
	if o.Rand == nil {
		o.Rand = rand.New(rand.NewPCG(1, 1))
	}
	P := len(prompt)
	maxNew := o.MaxNewTokens
	if maxNew <= 0 || P+maxNew > c.Context {
		maxNew = c.Context - P
	}
	stop := map[int]bool{}
	for _, t := range o.Stop {
		stop[t] = true
	}
	invT, topP := float32(0), o.TopP
	if o.Temperature > 0 {
		invT = 1 / o.Temperature
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	var s *decodeState
	err := e.dev.Do(func() error {
		var err error
		if s, err = e.decodeFor(n, P+maxNew); err != nil {
			return err
		}
		return e.prefill(s, prompt[:P-1], n)
	})
	if err != nil {
		return nil, fmt.Errorf("cuda sample: %w", err)
	}
	out := make([]model.Completion, n)
	active := make([]int, n)
	toks := make([]int, n)
	for i := range active {
		active[i], toks[i] = i, prompt[P-1]
	}
	for len(active) > 0 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		R := len(active)
		tok, pos, slot, length := make([]int32, R), make([]int32, R), make([]int32, R), make([]int32, R)
		us := make([]float32, R)
		for r, i := range active {
			p := P - 1 + len(out[i].Tokens)
			tok[r], pos[r], slot[r], length[r] = int32(toks[i]), int32(p), int32(i), int32(p+1)
			us[r] = o.Rand.Float32()
		}
		got, lps := make([]int32, R), make([]float32, R)
		err := e.dev.Do(func() error {
			for _, up := range []struct {
				t Tensor
				v []int32
			}{{s.tok, tok}, {s.pos, pos}, {s.slot, slot}, {s.length, length}} {
				if err := e.dev.Upload(up.t.View(0, R), up.v); err != nil {
					return err
				}
			}
			if err := e.dev.Upload(s.u.View(0, R), us); err != nil {
				return err
			}
			e.decodeStep(s, R, R, invT, topP)
			if err := e.dev.Download(got, s.stok.View(0, R)); err != nil {
				return err
			}
			return e.dev.Download(lps, s.lp.View(0, R))
		})
		if err != nil {
			return nil, fmt.Errorf("cuda sample: %w", err)
		}
		next := active[:0:0]
		for r, i := range active {
			t := int(got[r])
			cp := &out[i]
			cp.Tokens = append(cp.Tokens, t)
			cp.Logprobs = append(cp.Logprobs, lps[r])
			switch {
			case stop[t]:
			case len(cp.Tokens) >= maxNew:
				cp.Truncated = true
			default:
				next = append(next, i)
				toks[i] = t
			}
		}
		active = next
	}
	return out, nil
}

// prefill runs the forward pass over prefix (one sequence) and stores its
// keys and values in cache slot 0, then copies them to slots 1..n-1.
func (e *Engine) prefill(s *decodeState, prefix []int, n int) error {
	P := len(prefix)
	if P == 0 {
		return nil
	}
	T := e.cfg.BucketT(P)
	p, err := e.planFor(1, T, false)
	if err != nil {
		return err
	}
	tok, pos := make([]int32, T), make([]int32, T)
	for i := range pos {
		pos[i] = int32(i)
		if i < P {
			tok[i] = int32(prefix[i])
		}
	}
	if err := e.dev.Upload(p.tok, tok); err != nil {
		return err
	}
	if err := e.dev.Upload(p.pos, pos); err != nil {
		return err
	}
	kvd := e.cfg.KVHeads * e.cfg.HeadDim
	// Rows past P are padding; the causal mask keeps them out of rows < P.
	e.forward(p, func(l int, k, v Tensor) {
		e.dev.Copy(s.kc[l].View(0, P*kvd), k.View(0, P*kvd))
		e.dev.Copy(s.vc[l].View(0, P*kvd), v.View(0, P*kvd))
	})
	for l := range e.layers {
		for i := 1; i < n; i++ {
			at := i * s.cap * kvd
			e.dev.Copy(s.kc[l].View(at, P*kvd), s.kc[l].View(0, P*kvd))
			e.dev.Copy(s.vc[l].View(at, P*kvd), s.vc[l].View(0, P*kvd))
		}
	}
	return nil
}

// decodeStep runs R rows (token, position, cache slot) through the decoder,
// appending their keys and values to the cache, and samples the next token
// of its last head rows (a turn's prefill wants only its last row's).
func (e *Engine) decodeStep(s *decodeState, R, head int, invT, topP float32) {
	c, d := e.cfg, e.dev
	D, F, V := c.DModel, c.DFF, c.VocabSize
	Hq, Hkv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	eps := float32(c.NormEps)
	cs := e.cacheShape(s)
	x := s.x.View(0, R*D)
	h, tmp := s.h.View(0, R*D), s.tmp.View(0, R*D)
	q, o := s.q.View(0, R*Hq), s.o.View(0, R*Hq)
	k, v := s.k.View(0, R*Hkv), s.v.View(0, R*Hkv)
	g, up, sw := s.g.View(0, R*F), s.up.View(0, R*F), s.s.View(0, R*F)
	rstd, tok, pos, slot, length := s.rstd.View(0, R), s.tok.View(0, R), s.pos.View(0, R), s.slot.View(0, R), s.length.View(0, R)
	none := pref{off: -1}
	d.Embed(x, e.wcv(e.embed), tok, R, D)
	for l, L := range e.layers {
		d.RMSNorm(h, rstd, x, e.wv(L.attnNorm), R, D, eps)
		e.linear(q, h, L.wq, L.bq, R, D, Hq)
		e.linear(k, h, L.wk, L.bk, R, D, Hkv)
		e.linear(v, h, L.wv, L.bv, R, D, Hkv)
		d.RoPE(q, e.cos, e.sin, pos, R, Hq, c.HeadDim, false)
		d.RoPE(k, e.cos, e.sin, pos, R, Hkv, c.HeadDim, false)
		d.KVWrite(s.kc[l], s.vc[l], k, v, slot, pos, R, cs)
		d.AttentionDecode(o, q, s.kc[l], s.vc[l], slot, length, R, cs)
		e.linear(tmp, o, L.wo, none, R, Hq, D)
		d.AddInto(x, tmp, R*D)
		d.RMSNorm(h, rstd, x, e.wv(L.mlpNorm), R, D, eps)
		e.linear(g, h, L.wg, none, R, D, F)
		e.linear(up, h, L.wu, none, R, D, F)
		d.SwiGLU(sw, g, up, R*F)
		e.linear(tmp, sw, L.wd, none, R, F, D)
		d.AddInto(x, tmp, R*D)
	}
	if head == 0 {
		return
	}
	at := R - head
	hF := s.hF.View(0, head*D)
	d.RMSNorm(hF, s.rstd.View(at, head), x.View(at*D, head*D), e.wv(e.norm), head, D, eps)
	logits := s.logits.View(0, head*V)
	d.Gemm(false, false, head, V, D, 1, hF, D, e.wcv(e.lm), V, 0, logits, V)
	d.SampleTokens(s.stok.View(at, head), s.lp.View(at, head), logits, s.u.View(at, head), head, V, invT, topP)
}
