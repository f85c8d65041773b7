package cuda

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/swetui/swetui/model"
)

func checkBatch(c model.Config, b *model.Batch, cot [][]float32) error {
	if len(b.Tokens) != len(b.PromptLen) {
		return fmt.Errorf("batch: %d sequences but %d prompt lengths", len(b.Tokens), len(b.PromptLen))
	}
	if cot != nil && len(cot) != len(b.Tokens) {
		return fmt.Errorf("batch: %d cotangents for %d sequences", len(cot), len(b.Tokens))
	}
	for i, seq := range b.Tokens {
		pl := b.PromptLen[i]
		if pl < 1 || pl > len(seq) {
			return fmt.Errorf("batch: sequence %d: prompt length %d outside [1, %d]", i, pl, len(seq))
		}
		if len(seq) > c.Context {
			return fmt.Errorf("batch: sequence %d: %d tokens exceed context %d", i, len(seq), c.Context)
		}
		for _, t := range seq {
			if t < 0 || t >= c.VocabSize {
				return fmt.Errorf("batch: sequence %d: token %d outside vocab %d", i, t, c.VocabSize)
			}
		}
		if cot != nil && len(cot[i]) != len(seq)-pl {
			return fmt.Errorf("batch: sequence %d: cotangent has %d values for %d completion tokens", i, len(cot[i]), len(seq)-pl)
		}
	}
	return nil
}

// Logprobs runs the forward pass: per-completion-token logprobs and
// entropies at the batch's temperature (as model.Model.Logprobs).
func (e *Engine) Logprobs(ctx context.Context, b model.Batch) (*model.Result, error) {
	return e.pass(ctx, &b, nil, nil, false)
}

// LogprobsBase is Logprobs with the LoRA adapters switched off: the frozen
// base model, a LoRA run's KL reference.
func (e *Engine) LogprobsBase(ctx context.Context, b model.Batch) (*model.Result, error) {
	return e.pass(ctx, &b, nil, nil, true)
}

// Backward runs forward and backward of Σ cot·logprob and ADDS the
// gradients into the engine's gradient arena (as model.Model.Backward).
func (e *Engine) Backward(ctx context.Context, b model.Batch, cot [][]float32) (*model.Result, error) {
	if cot == nil {
		return nil, errors.New("cuda engine: backward: nil cotangent")
	}
	return e.pass(ctx, &b, cot, nil, false)
}

// BackwardEntropy is Backward with a cotangent on each token's entropy
// too; entCot may be nil.
func (e *Engine) BackwardEntropy(ctx context.Context, b model.Batch, cot, entCot [][]float32) (*model.Result, error) {
	if cot == nil {
		return nil, errors.New("cuda engine: backward: nil cotangent")
	}
	return e.pass(ctx, &b, cot, entCot, false)
}

// base switches the LoRA adapters off (forward only).
func (e *Engine) pass(ctx context.Context, b *model.Batch, cot, entCot [][]float32, base bool) (*model.Result, error) {
	if err := checkBatch(e.cfg, b, cot); err != nil {
		return nil, fmt.Errorf("cuda engine: %w", err)
	}
	if entCot != nil {
		if err := checkBatch(e.cfg, b, entCot); err != nil {
			return nil, fmt.Errorf("cuda engine: entropy %w", err)
		}
	}
	train := cot != nil
	if train && e.g.N == 0 && (e.lora == nil || e.lora.g.N == 0) {
		return nil, errors.New("cuda engine: backward on an engine built without training state")
	}
	if base && train {
		return nil, errors.New("cuda engine: backward with the adapters off")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.baseOnly = base
	defer func() { e.baseOnly = false }()
	res := &model.Result{Logprobs: make([][]float32, len(b.Tokens)), Entropy: make([][]float32, len(b.Tokens))}
	order := make([]int, len(b.Tokens))
	for i := range order {
		order[i] = i
	}
	// Sorted by length so that each micro-batch pads little.
	sort.SliceStable(order, func(i, j int) bool { return len(b.Tokens[order[i]]) < len(b.Tokens[order[j]]) })
	for lo := 0; lo < len(order); {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		hi := lo + 1
		for hi < len(order) && (hi-lo+1)*e.cfg.BucketT(len(b.Tokens[order[hi]])) <= e.opts.MicroTokens {
			hi++
		}
		seqs := order[lo:hi]
		B := 1
		for B < len(seqs) {
			B *= 2
		}
		if B*e.cfg.BucketT(len(b.Tokens[seqs[len(seqs)-1]])) > e.opts.MicroTokens {
			B = len(seqs)
		}
		T := e.cfg.BucketT(len(b.Tokens[seqs[len(seqs)-1]]))
		err := e.dev.Do(func() error {
			p, err := e.planFor(B, T, train)
			if err != nil {
				return err
			}
			return e.runBatch(p, b, seqs, cot, entCot, res)
		})
		if err != nil {
			return nil, fmt.Errorf("cuda engine: %w", err)
		}
		lo = hi
	}
	return res, nil
}

// runBatch uploads one micro-batch, runs it and reads its results back.
func (e *Engine) runBatch(p *plan, b *model.Batch, seqs []int, cot, entCot [][]float32, res *model.Result) error {
	T, N := p.T, p.N
	tok, pos := make([]int32, N), make([]int32, N)
	for n := range pos {
		pos[n] = int32(n % T)
	}
	var rows, tgt []int32
	var cots []float32
	for r, s := range seqs {
		seq, pl := b.Tokens[s], b.PromptLen[s]
		for j, t := range seq {
			tok[r*T+j] = int32(t)
		}
		// Row t predicts token t+1: completion token j sits at row pl+j-1.
		for j := pl; j < len(seq); j++ {
			rows = append(rows, int32(r*T+j-1))
			tgt = append(tgt, int32(seq[j]))
			if p.train {
				var c, ce float32
				if cot != nil {
					c = cot[s][j-pl]
				}
				if entCot != nil {
					ce = entCot[s][j-pl]
				}
				cots = append(cots, c, ce)
			}
		}
	}
	M := len(rows)
	d := e.dev
	if err := d.Upload(p.tok, tok); err != nil {
		return err
	}
	if err := d.Upload(p.pos, pos); err != nil {
		return err
	}
	if M > 0 {
		if err := d.Upload(p.rows.View(0, M), rows); err != nil {
			return err
		}
		if err := d.Upload(p.tgt.View(0, M), tgt); err != nil {
			return err
		}
		if p.train {
			if err := d.Upload(p.cot.View(0, 2*M), cots); err != nil {
				return err
			}
		}
	}
	p.headM = M
	invT := float32(1)
	if b.Temperature > 0 {
		invT = 1 / b.Temperature
	}
	e.forward(p, nil)
	e.head(p, M, invT)
	if p.train {
		e.backward(p)
	}
	out := make([]float32, 2*M)
	if M > 0 {
		if err := d.Download(out, p.out.View(0, 2*M)); err != nil {
			return err
		}
	}
	k := 0
	for _, s := range seqs {
		n := len(b.Tokens[s]) - b.PromptLen[s]
		lp, ent := make([]float32, n), make([]float32, n)
		for j := 0; j < n; j++ {
			lp[j], ent[j] = out[2*k], out[2*k+1]
			k++
		}
		res.Logprobs[s], res.Entropy[s] = lp, ent
	}
	return nil
}

// linear: out [M, n] = in [M, k] @ W [k, n] (+ bias).
func (e *Engine) linear(out, in Tensor, w, b pref, M, k, n int) {
	e.dev.Gemm(false, false, M, n, k, 1, in, k, e.wcv(w), n, 0, out, n)
	if b.off >= 0 && b.n > 0 {
		e.dev.AddBias(out, e.wv(b), M, n)
	}
	e.loraForward(out, in, w, M, k, n)
}

// linearBack: gW [k, n] += inᵀ dout; din [M, k] = dout Wᵀ (+= when acc).
// With LoRA, W is frozen (no gW) and the adapter's share follows.
func (e *Engine) linearBack(din, in, dout Tensor, w pref, M, k, n int, acc bool) {
	if e.lora == nil {
		e.dev.Gemm(true, false, k, n, M, 1, in, k, dout, n, 1, e.gv(w), n)
	}
	beta := float32(0)
	if acc {
		beta = 1
	}
	e.dev.Gemm(false, true, M, k, n, 1, dout, n, e.wcv(w), n, beta, din, k)
	e.loraBackward(din, in, dout, w, M, k, n)
}

func (e *Engine) attnShape(p *plan) AttnShape {
	c := e.cfg
	return AttnShape{B: p.B, T: p.T, H: c.Heads, KVH: c.KVHeads, HD: c.HeadDim,
		Scale: float32(1 / math.Sqrt(float64(c.HeadDim)))}
}

// forward runs the decoder up to the final norm. onKV, when set, sees each
// layer's rotated keys and values (the sampler's prefill stores them).
func (e *Engine) forward(p *plan, onKV func(l int, k, v Tensor)) {
	c, d := e.cfg, e.dev
	N, D := p.N, c.DModel
	eps := float32(c.NormEps)
	d.Embed(p.x[0], e.wcv(e.embed), p.tok, N, D)
	for l := range e.layers {
		e.layerForward(p, l, onKV, true)
	}
	d.RMSNorm(p.hF, p.rstdF, p.last(), e.wv(e.norm), N, D, eps)
}

// layerForward runs layer l from its input p.x[l] into its buffers; with
// out false it stops once the MLP's gate and up projections are made,
// which is all a recomputing backward needs.
func (e *Engine) layerForward(p *plan, l int, onKV func(l int, k, v Tensor), out bool) {
	c, d := e.cfg, e.dev
	N, D, F := p.N, c.DModel, c.DFF
	Hq, Hkv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	eps := float32(c.NormEps)
	as := e.attnShape(p)
	L := e.layers[l]
	i := p.layer(l)
	xin, xmid, xout := p.resid(l)
	d.RMSNorm(p.h1[i], p.rstd1[i], xin, e.wv(L.attnNorm), N, D, eps)
	e.linear(p.q[i], p.h1[i], L.wq, L.bq, N, D, Hq)
	e.linear(p.k[i], p.h1[i], L.wk, L.bk, N, D, Hkv)
	e.linear(p.v[i], p.h1[i], L.wv, L.bv, N, D, Hkv)
	d.RoPE(p.q[i], e.cos, e.sin, p.pos, N, Hq, c.HeadDim, false)
	d.RoPE(p.k[i], e.cos, e.sin, p.pos, N, Hkv, c.HeadDim, false)
	if onKV != nil {
		onKV(l, p.k[i], p.v[i])
	}
	d.Attention(p.o[i], p.alse[i], p.q[i], p.k[i], p.v[i], as)
	e.linear(p.tmp, p.o[i], L.wo, pref{off: -1}, N, Hq, D)
	if !xmid.same(xin) {
		d.Copy(xmid, xin)
	}
	d.AddInto(xmid, p.tmp, N*D)
	d.RMSNorm(p.h2[i], p.rstd2[i], xmid, e.wv(L.mlpNorm), N, D, eps)
	e.linear(p.g[i], p.h2[i], L.wg, pref{off: -1}, N, D, F)
	e.linear(p.u[i], p.h2[i], L.wu, pref{off: -1}, N, D, F)
	if !out {
		return
	}
	d.SwiGLU(p.s, p.g[i], p.u[i], N*F)
	e.linear(p.tmp, p.s, L.wd, pref{off: -1}, N, F, D)
	if !xout.same(xmid) {
		d.Copy(xout, xmid)
	}
	d.AddInto(xout, p.tmp, N*D)
}

// head runs the LM head and the chosen-token logprob over the M rows that
// have a target, in chunks; when training it also runs their backward
// (the cotangent is known up front), leaving dhsel for backward.
func (e *Engine) head(p *plan, M int, invT float32) {
	if M == 0 {
		return
	}
	c, d := e.cfg, e.dev
	D, V := c.DModel, c.VocabSize
	d.GatherRows(p.hsel, p.hF, p.rows, M, D)
	for c0 := 0; c0 < M; c0 += p.headRows {
		cm := min(p.headRows, M-c0)
		hs := p.hsel.View(c0*D, cm*D)
		logits := p.logits.View(0, cm*V)
		out, lse, tgt := p.out.View(2*c0, 2*cm), p.lse.View(c0, cm), p.tgt.View(c0, cm)
		d.Gemm(false, false, cm, V, D, 1, hs, D, e.wcv(e.lm), V, 0, logits, V)
		d.ChosenLogprob(out, lse, logits, tgt, cm, V, invT)
		if !p.train {
			continue
		}
		dl := p.dlogits.View(0, cm*V)
		d.ChosenLogprobBackward(dl, logits, tgt, p.cot.View(2*c0, 2*cm), out, lse, cm, V, invT)
		e.linearBack(p.dhsel.View(c0*D, cm*D), hs, dl, e.lm, cm, D, V, false)
	}
}

// backward runs the decoder's backward pass from the head's dhsel,
// adding every parameter's gradient into the gradient arena.
func (e *Engine) backward(p *plan) {
	c, d := e.cfg, e.dev
	N, D, F := p.N, c.DModel, c.DFF
	Hq, Hkv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	M := p.headM
	d.Zero(p.dhF)
	if M > 0 {
		d.ScatterRows(p.dhF, p.dhsel, p.rows, M, D)
	}
	d.Zero(p.dx)
	d.RMSNormBackward(p.dx, e.gv(e.norm), p.dhF, p.last(), e.wv(e.norm), p.rstdF, N, D)
	as := e.attnShape(p)
	for l := len(e.layers) - 1; l >= 0; l-- {
		L := e.layers[l]
		if p.recompute { // the same kernels on the same input: the same values
			e.layerForward(p, l, nil, false)
		}
		i := p.layer(l)
		xin, xmid, _ := p.resid(l)
		// MLP block: xout = xmid + swiglu(h2 Wg, h2 Wu) Wd.
		d.Cast(p.dxa, p.dx, N*D)
		d.SwiGLU(p.s, p.g[i], p.u[i], N*F)
		e.linearBack(p.ds, p.s, p.dxa, L.wd, N, F, D, false)
		d.SwiGLUBackward(p.dg, p.du, p.ds, p.g[i], p.u[i], N*F)
		e.linearBack(p.dh, p.h2[i], p.dg, L.wg, N, D, F, false)
		e.linearBack(p.dh, p.h2[i], p.du, L.wu, N, D, F, true)
		d.RMSNormBackward(p.dx, e.gv(L.mlpNorm), p.dh, xmid, e.wv(L.mlpNorm), p.rstd2[i], N, D)
		// Attention block: xmid = xin + attn(rope(h1 Wq), rope(h1 Wk), h1 Wv) Wo.
		d.Cast(p.dxa, p.dx, N*D)
		e.linearBack(p.do, p.o[i], p.dxa, L.wo, N, Hq, D, false)
		d.AttentionBackward(p.dq, p.dk, p.dv, p.delta, p.q[i], p.k[i], p.v[i], p.o[i], p.do, p.alse[i], as)
		d.RoPE(p.dq, e.cos, e.sin, p.pos, N, Hq, c.HeadDim, true)
		d.RoPE(p.dk, e.cos, e.sin, p.pos, N, Hkv, c.HeadDim, true)
		if L.bq.off >= 0 {
			d.BiasBackward(e.gv(L.bq), p.dq, N, Hq)
			d.BiasBackward(e.gv(L.bk), p.dk, N, Hkv)
			d.BiasBackward(e.gv(L.bv), p.dv, N, Hkv)
		}
		e.linearBack(p.dh, p.h1[i], p.dq, L.wq, N, D, Hq, false)
		e.linearBack(p.dh, p.h1[i], p.dk, L.wk, N, D, Hkv, true)
		e.linearBack(p.dh, p.h1[i], p.dv, L.wv, N, D, Hkv, true)
		d.RMSNormBackward(p.dx, e.gv(L.attnNorm), p.dh, xin, e.wv(L.attnNorm), p.rstd1[i], N, D)
	}
	if e.lora == nil {
		d.EmbedBackward(e.gv(e.embed), p.dx, p.tok, N, D)
	}
}
