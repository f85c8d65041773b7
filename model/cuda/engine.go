package cuda

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"

	"github.com/swetui/swetui/model"
)

// pref locates one parameter in the engine's arenas (model.Model's layout).
type pref struct {
	off, n int
	shape  []int
	decay  bool
}

type layerRefs struct {
	attnNorm, wq, wk, wv, bq, bk, bv, wo, mlpNorm, wg, wu, wd pref
}

// Options configures an engine.
type Options struct {
	// Act is the activation and compute-weight type: F32, or BF16 (CUDA
	// only) with fp32 master weights, gradients and optimiser state.
	Act DType
	// Train allocates gradients and AdamW moments; a reference engine
	// only runs forward.
	Train bool
	// MicroTokens bounds B·T of one micro-batch (0: 16384).
	MicroTokens int
	// HeadRows bounds the rows of one LM-head chunk (0: about 64M logits).
	HeadRows int
}

// Engine is the decoder on a device: weights, gradients and optimiser
// state in arenas laid out as model.Model's, one memory plan per shape
// bucket, and the forward, backward and update passes written once over
// the kernel list. Methods serialise on the engine.
type Engine struct {
	dev  Device
	cfg  model.Config
	act  DType
	opts Options
	np   int

	w, g, m, v Tensor // f32 master weights, gradients, AdamW moments
	wc         Tensor // compute copy in act (w itself when act is F32)
	embed      pref
	norm, lm   pref
	layers     []layerRefs
	decays     []pref // every parameter, for AdamW
	cos, sin   Tensor // f32 [context, head_dim/2]

	mu     sync.Mutex
	plans  map[[3]int]*plan
	uses   map[[3]int]int
	clock  int
	dec    *decodeState
	closed bool
}

// maxPlans bounds the buckets an engine keeps allocated.
const maxPlans = 4

// NewEngine uploads m's weights to dev.
func NewEngine(dev Device, m *model.Model, o Options) (*Engine, error) {
	cfg := m.Cfg
	if o.Act != F32 && o.Act != BF16 {
		return nil, fmt.Errorf("cuda engine: activation type %v must be f32 or bf16", o.Act)
	}
	if o.MicroTokens <= 0 {
		o.MicroTokens = 16384
	}
	e := &Engine{dev: dev, cfg: cfg, act: o.Act, opts: o, np: m.NumParams(),
		plans: map[[3]int]*plan{}, uses: map[[3]int]int{}}
	if err := e.index(m); err != nil {
		return nil, err
	}
	// Compile the kernels for this model before anything runs, so that a
	// source or head-size problem shows here.
	if c, ok := dev.(interface{ Compile(DType, int) error }); ok {
		if err := c.Compile(o.Act, cfg.HeadDim); err != nil {
			return nil, fmt.Errorf("cuda engine: %w", err)
		}
	}
	err := dev.Do(func() error {
		var err error
		alloc := func(dst *Tensor, dt DType, n int) {
			if err == nil {
				*dst, err = dev.Alloc(dt, n)
			}
		}
		alloc(&e.w, F32, e.np)
		if o.Train {
			alloc(&e.g, F32, e.np)
			alloc(&e.m, F32, e.np)
			alloc(&e.v, F32, e.np)
		}
		if o.Act == F32 {
			e.wc = e.w
		} else {
			alloc(&e.wc, o.Act, e.np)
		}
		half := cfg.HeadDim / 2
		alloc(&e.cos, F32, cfg.Context*half)
		alloc(&e.sin, F32, cfg.Context*half)
		if err != nil {
			return err
		}
		cos, sin := ropeTables(cfg)
		if err := dev.Upload(e.cos, cos); err != nil {
			return err
		}
		if err := dev.Upload(e.sin, sin); err != nil {
			return err
		}
		return e.upload(m)
	})
	if err != nil {
		e.Close()
		return nil, fmt.Errorf("cuda engine: %w", err)
	}
	return e, nil
}

// ropeTables are cos and sin of position·θ_i, computed as model does.
func ropeTables(c model.Config) (cos, sin []float32) {
	half := c.HeadDim / 2
	cos, sin = make([]float32, c.Context*half), make([]float32, c.Context*half)
	for p := 0; p < c.Context; p++ {
		for i := 0; i < half; i++ {
			a := float64(p) * math.Pow(c.RopeTheta, -float64(2*i)/float64(c.HeadDim))
			cos[p*half+i], sin[p*half+i] = float32(math.Cos(a)), float32(math.Sin(a))
		}
	}
	return cos, sin
}

// index finds every parameter by its Hugging Face name.
func (e *Engine) index(m *model.Model) error {
	refs := map[string]pref{}
	off := 0
	for _, p := range m.Params {
		refs[p.Name] = pref{off: off, n: len(p.W), shape: p.Shape, decay: p.Decay}
		e.decays = append(e.decays, refs[p.Name])
		off += len(p.W)
	}
	if off != e.np {
		return fmt.Errorf("cuda engine: parameters cover %d of %d weights", off, e.np)
	}
	var missing []string
	get := func(name string, optional bool) pref {
		r, ok := refs[name]
		if !ok && !optional {
			missing = append(missing, name)
		}
		if !ok {
			r.off = -1
		}
		return r
	}
	e.embed = get("model.embed_tokens.weight", false)
	e.norm = get("model.norm.weight", false)
	e.lm = get("lm_head.weight", false)
	for i := 0; i < e.cfg.Layers; i++ {
		pre := fmt.Sprintf("model.layers.%d.", i)
		bias := !e.cfg.AttnBias
		e.layers = append(e.layers, layerRefs{
			attnNorm: get(pre+"input_layernorm.weight", false),
			wq:       get(pre+"self_attn.q_proj.weight", false),
			wk:       get(pre+"self_attn.k_proj.weight", false),
			wv:       get(pre+"self_attn.v_proj.weight", false),
			bq:       get(pre+"self_attn.q_proj.bias", bias),
			bk:       get(pre+"self_attn.k_proj.bias", bias),
			bv:       get(pre+"self_attn.v_proj.bias", bias),
			wo:       get(pre+"self_attn.o_proj.weight", false),
			mlpNorm:  get(pre+"post_attention_layernorm.weight", false),
			wg:       get(pre+"mlp.gate_proj.weight", false),
			wu:       get(pre+"mlp.up_proj.weight", false),
			wd:       get(pre+"mlp.down_proj.weight", false),
		})
	}
	if len(missing) > 0 {
		return fmt.Errorf("cuda engine: model lacks %v", missing)
	}
	return nil
}

// Config is the architecture the engine runs.
func (e *Engine) Config() model.Config { return e.cfg }

// Device is the device the engine runs on.
func (e *Engine) Device() Device { return e.dev }

// upload copies m's weights into the master arena and the compute copy.
// Call inside dev.Do.
func (e *Engine) upload(m *model.Model) error {
	if err := e.dev.Upload(e.w, m.Weights()); err != nil {
		return err
	}
	if e.act != F32 {
		e.dev.Cast(e.wc, e.w, e.np)
	}
	return nil
}

// Upload replaces the engine's weights with m's (same architecture).
func (e *Engine) Upload(m *model.Model) error {
	if m.NumParams() != e.np {
		return fmt.Errorf("cuda engine: upload: model has %d weights, engine %d", m.NumParams(), e.np)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.dev.Do(func() error { return e.upload(m) })
}

// Download copies the master weights into m, and the AdamW moments into
// opt when both are non-nil (for checkpoints).
func (e *Engine) Download(m *model.Model, opt *model.AdamW) error {
	if m.NumParams() != e.np {
		return fmt.Errorf("cuda engine: download: model has %d weights, engine %d", m.NumParams(), e.np)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.dev.Do(func() error {
		if err := e.dev.Download(m.Weights(), e.w); err != nil {
			return err
		}
		if opt != nil && e.m.N > 0 {
			mm, vv := opt.State()
			if err := e.dev.Download(mm, e.m); err != nil {
				return err
			}
			return e.dev.Download(vv, e.v)
		}
		return nil
	})
}

// UploadOptim replaces the AdamW moments with opt's (after a resume).
func (e *Engine) UploadOptim(opt *model.AdamW) error {
	if e.m.N == 0 {
		return errors.New("cuda engine: upload optimiser: engine was built without training state")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	mm, vv := opt.State()
	return e.dev.Do(func() error {
		if err := e.dev.Upload(e.m, mm); err != nil {
			return err
		}
		return e.dev.Upload(e.v, vv)
	})
}

// CopyWeightsFrom copies src's weights on the device (same architecture,
// same device): refreshing a sampling snapshot or the reference.
func (e *Engine) CopyWeightsFrom(src *Engine) error {
	if src.np != e.np || src.dev != e.dev {
		return errors.New("cuda engine: copy weights: engines differ in size or device")
	}
	if src != e {
		src.mu.Lock()
		defer src.mu.Unlock()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.dev.Do(func() error {
		e.dev.Copy(e.w, src.w)
		if e.act != F32 {
			e.dev.Cast(e.wc, e.w, e.np)
		}
		return nil
	})
}

// Close frees the engine's device memory.
func (e *Engine) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	return e.dev.Do(func() error {
		for k, p := range e.plans {
			p.free(e.dev)
			delete(e.plans, k)
		}
		e.dec.free(e.dev)
		e.dec = nil
		for _, t := range []Tensor{e.w, e.g, e.m, e.v, e.cos, e.sin} {
			if t.N > 0 {
				e.dev.Free(t)
			}
		}
		if e.act != F32 && e.wc.N > 0 {
			e.dev.Free(e.wc)
		}
		return nil
	})
}

// Weights views: compute copy, master, gradient.
func (e *Engine) wcv(p pref) Tensor { return e.wc.View(p.off, p.n) }
func (e *Engine) wv(p pref) Tensor  { return e.w.View(p.off, p.n) }
func (e *Engine) gv(p pref) Tensor  { return e.g.View(p.off, p.n) }

func (e *Engine) headRows() int {
	if e.opts.HeadRows > 0 {
		return e.opts.HeadRows
	}
	return max(1, (64<<20)/e.cfg.VocabSize)
}

// planFor returns bucket (B, T)'s plan, freeing the least recently used
// one beyond maxPlans. Call inside dev.Do.
func (e *Engine) planFor(B, T int, train bool) (*plan, error) {
	k := [3]int{B, T, 0}
	if train {
		k[2] = 1
	}
	e.clock++
	e.uses[k] = e.clock
	if p, ok := e.plans[k]; ok {
		return p, nil
	}
	if len(e.plans) >= maxPlans {
		var oldest [3]int
		least := e.clock + 1
		for key := range e.plans {
			if e.uses[key] < least {
				oldest, least = key, e.uses[key]
			}
		}
		e.plans[oldest].free(e.dev)
		delete(e.plans, oldest)
		delete(e.uses, oldest)
	}
	p, err := e.newPlan(B, T, train)
	if err != nil {
		return nil, err
	}
	e.plans[k] = p
	return p, nil
}

// PlanBytes is the device memory of bucket (B, T)'s plan, allocating it.
func (e *Engine) PlanBytes(B, T int, train bool) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var n int
	err := e.dev.Do(func() error {
		p, err := e.planFor(B, T, train)
		if err == nil {
			n = p.bytes
		}
		return err
	})
	return n, err
}

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
	return e.pass(ctx, &b, nil, nil)
}

// Backward runs forward and backward of Σ cot·logprob and ADDS the
// gradients into the engine's gradient arena (as model.Model.Backward).
func (e *Engine) Backward(ctx context.Context, b model.Batch, cot [][]float32) (*model.Result, error) {
	if cot == nil {
		return nil, errors.New("cuda engine: backward: nil cotangent")
	}
	return e.pass(ctx, &b, cot, nil)
}

// BackwardEntropy is Backward with a cotangent on each token's entropy
// too; entCot may be nil.
func (e *Engine) BackwardEntropy(ctx context.Context, b model.Batch, cot, entCot [][]float32) (*model.Result, error) {
	if cot == nil {
		return nil, errors.New("cuda engine: backward: nil cotangent")
	}
	return e.pass(ctx, &b, cot, entCot)
}

func (e *Engine) pass(ctx context.Context, b *model.Batch, cot, entCot [][]float32) (*model.Result, error) {
	if err := checkBatch(e.cfg, b, cot); err != nil {
		return nil, fmt.Errorf("cuda engine: %w", err)
	}
	if entCot != nil {
		if err := checkBatch(e.cfg, b, entCot); err != nil {
			return nil, fmt.Errorf("cuda engine: entropy %w", err)
		}
	}
	train := cot != nil
	if train && e.g.N == 0 {
		return nil, errors.New("cuda engine: backward on an engine built without training state")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
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
}

// linearBack: gW [k, n] += inᵀ dout; din [M, k] = dout Wᵀ (+= when acc).
func (e *Engine) linearBack(din, in, dout Tensor, w pref, M, k, n int, acc bool) {
	e.dev.Gemm(true, false, k, n, M, 1, in, k, dout, n, 1, e.gv(w), n)
	beta := float32(0)
	if acc {
		beta = 1
	}
	e.dev.Gemm(false, true, M, k, n, 1, dout, n, e.wcv(w), n, beta, din, k)
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
	N, D, F := p.N, c.DModel, c.DFF
	Hq, Hkv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	eps := float32(c.NormEps)
	d.Embed(p.x[0], e.wcv(e.embed), p.tok, N, D)
	as := e.attnShape(p)
	for l, L := range e.layers {
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
		d.SwiGLU(p.s, p.g[i], p.u[i], N*F)
		e.linear(p.tmp, p.s, L.wd, pref{off: -1}, N, F, D)
		if !xout.same(xmid) {
			d.Copy(xout, xmid)
		}
		d.AddInto(xout, p.tmp, N*D)
	}
	d.RMSNorm(p.hF, p.rstdF, p.last(), e.wv(e.norm), N, D, eps)
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
		xin, xmid, _ := p.resid(l)
		// MLP block: xout = xmid + swiglu(h2 Wg, h2 Wu) Wd.
		d.Cast(p.dxa, p.dx, N*D)
		d.SwiGLU(p.s, p.g[l], p.u[l], N*F)
		e.linearBack(p.ds, p.s, p.dxa, L.wd, N, F, D, false)
		d.SwiGLUBackward(p.dg, p.du, p.ds, p.g[l], p.u[l], N*F)
		e.linearBack(p.dh, p.h2[l], p.dg, L.wg, N, D, F, false)
		e.linearBack(p.dh, p.h2[l], p.du, L.wu, N, D, F, true)
		d.RMSNormBackward(p.dx, e.gv(L.mlpNorm), p.dh, xmid, e.wv(L.mlpNorm), p.rstd2[l], N, D)
		// Attention block: xmid = xin + attn(rope(h1 Wq), rope(h1 Wk), h1 Wv) Wo.
		d.Cast(p.dxa, p.dx, N*D)
		e.linearBack(p.do, p.o[l], p.dxa, L.wo, N, Hq, D, false)
		d.AttentionBackward(p.dq, p.dk, p.dv, p.delta, p.q[l], p.k[l], p.v[l], p.o[l], p.do, p.alse[l], as)
		d.RoPE(p.dq, e.cos, e.sin, p.pos, N, Hq, c.HeadDim, true)
		d.RoPE(p.dk, e.cos, e.sin, p.pos, N, Hkv, c.HeadDim, true)
		if L.bq.off >= 0 {
			d.BiasBackward(e.gv(L.bq), p.dq, N, Hq)
			d.BiasBackward(e.gv(L.bk), p.dk, N, Hkv)
			d.BiasBackward(e.gv(L.bv), p.dv, N, Hkv)
		}
		e.linearBack(p.dh, p.h1[l], p.dq, L.wq, N, D, Hq, false)
		e.linearBack(p.dh, p.h1[l], p.dk, L.wk, N, D, Hkv, true)
		e.linearBack(p.dh, p.h1[l], p.dv, L.wv, N, D, Hkv, true)
		d.RMSNormBackward(p.dx, e.gv(L.attnNorm), p.dh, xin, e.wv(L.attnNorm), p.rstd1[l], N, D)
	}
	d.EmbedBackward(e.gv(e.embed), p.dx, p.tok, N, D)
}

// ZeroGrad clears the gradient arena.
func (e *Engine) ZeroGrad() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.dev.Do(func() error {
		e.dev.Zero(e.g)
		return nil
	})
}

// Grads copies the gradient arena into dst (model layout).
func (e *Engine) Grads(dst []float32) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.dev.Do(func() error { return e.dev.Download(dst, e.g) })
}

// GradNorm is the global L2 norm of the accumulated gradients.
func (e *Engine) GradNorm() (float64, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var n float64
	err := e.dev.Do(func() error {
		var err error
		n, err = e.gradNorm()
		return err
	})
	return n, err
}

func (e *Engine) gradNorm() (float64, error) {
	parts, err := e.dev.Alloc(F32, SumSquaresParts)
	if err != nil {
		return 0, err
	}
	defer e.dev.Free(parts)
	e.dev.SumSquares(parts, e.g, e.np)
	host := make([]float32, SumSquaresParts)
	if err := e.dev.Download(host, parts); err != nil {
		return 0, err
	}
	var ss float64
	for _, v := range host {
		ss += float64(v)
	}
	return math.Sqrt(ss), nil
}

// Step clips the gradients to a global norm of clip (0: off), applies
// one AdamW update at lr with opt's hyper-parameters (advancing opt.Step,
// as model.AdamW.Update does), refreshes the compute copy and clears the
// gradients. It returns the norm before clipping.
func (e *Engine) Step(opt *model.AdamW, lr, clip float64) (float64, error) {
	if e.m.N == 0 {
		return 0, errors.New("cuda engine: step on an engine built without training state")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	var norm float64
	err := e.dev.Do(func() error {
		var err error
		if norm, err = e.gradNorm(); err != nil {
			return err
		}
		gs := float32(1)
		if clip > 0 && norm > clip {
			gs = float32(clip / (norm + 1e-6))
		}
		opt.Step++
		bc1 := 1 - math.Pow(opt.Beta1, float64(opt.Step))
		bc2 := 1 - math.Pow(opt.Beta2, float64(opt.Step))
		a := AdamWArgs{B1: float32(opt.Beta1), B2: float32(opt.Beta2), Eps: float32(opt.Eps),
			StepSize: float32(lr / bc1), InvBC2: float32(1 / bc2), GScale: gs}
		for _, p := range e.decays {
			a.Decay = 1
			if p.decay {
				a.Decay = float32(1 - lr*opt.WeightDecay)
			}
			e.dev.AdamW(e.wv(p), e.gv(p), e.m.View(p.off, p.n), e.v.View(p.off, p.n), p.n, a)
		}
		if e.act != F32 {
			e.dev.Cast(e.wc, e.w, e.np)
		}
		e.dev.Zero(e.g)
		return nil
	})
	return norm, err
}
