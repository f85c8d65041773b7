package cuda

import (
	"errors"
	"fmt"

	"github.com/swetui/swetui/model"
)

// With LoRA the engine keeps the base weights frozen (no gradients, no
// AdamW moments for them) and trains adapters beside each targeted
// projection: out = in·W + s·(in·A)·B. The backward pass recomputes in·A
// rather than keeping it, and sends the frozen weights' gradients (norms,
// biases) to a small sink that is never read. The KL reference is the same
// engine with the adapters switched off (LoRAReference): no second copy of
// the weights.

// loraState is the adapters on the device, laid out as model.LoRA's arena.
type loraState struct {
	cfg    model.LoRAConfig
	scale  float32
	np     int
	w, wc  Tensor // f32 masters, compute copy in act (w itself when F32)
	g, m   Tensor // f32 gradients and AdamW moments (training only)
	v      Tensor
	params []pref      // A then B of each adapter
	byBase map[int]int // base weight offset -> adapter index
	sink   Tensor      // f32: frozen norms' and biases' gradients
	t, dt  Tensor      // act scratch [rows, r]
	rows   int         // rows the scratch holds
	base   []string    // base weight names, for errors
	train  bool
}

// newLoRA uploads l's adapters; call inside dev.Do after index.
func (e *Engine) newLoRA(l *model.LoRA, train bool) error {
	s := &loraState{cfg: l.Cfg, scale: float32(l.Cfg.Scale()), np: l.NumParams(), byBase: map[int]int{},
		base: l.Base, train: train}
	refs := map[string]pref{}
	for _, r := range e.decays {
		refs[r.name] = r
	}
	off := 0
	for i, name := range l.Base {
		w, ok := refs[name]
		if !ok {
			return fmt.Errorf("lora: the engine's model has no %s", name)
		}
		s.byBase[w.off] = i
		for _, p := range l.Params[2*i : 2*i+2] {
			s.params = append(s.params, pref{name: p.Name, off: off, n: len(p.W), shape: p.Shape, decay: p.Decay})
			off += len(p.W)
		}
	}
	if off != s.np {
		return fmt.Errorf("lora: adapters cover %d of %d weights", off, s.np)
	}
	c := e.cfg
	var err error
	alloc := func(dst *Tensor, dt DType, n int) {
		if err == nil {
			*dst, err = e.dev.Alloc(dt, n)
		}
	}
	alloc(&s.w, F32, s.np)
	if e.act == F32 {
		s.wc = s.w
	} else {
		alloc(&s.wc, e.act, s.np)
	}
	if train {
		lo, hi := e.opts.Shard.Of(s.np)
		alloc(&s.g, F32, s.np)
		alloc(&s.m, F32, hi-lo)
		alloc(&s.v, F32, hi-lo)
		alloc(&s.sink, F32, max(c.DModel, c.Heads*c.HeadDim, c.KVHeads*c.HeadDim))
	}
	e.lora = s
	if err != nil {
		return err
	}
	return e.uploadLoRA(l.Weights())
}

// uploadLoRA copies adapter weights in; call inside dev.Do.
func (e *Engine) uploadLoRA(w []float32) error {
	s := e.lora
	if err := e.dev.Upload(s.w, w); err != nil {
		return err
	}
	if e.act != F32 {
		e.dev.Cast(s.wc, s.w, s.np)
	}
	return nil
}

// loraScratch makes sure the scratch holds rows rows; call inside dev.Do.
func (e *Engine) loraScratch(rows int) error {
	s := e.lora
	if s == nil || s.rows >= rows {
		return nil
	}
	for _, t := range []Tensor{s.t, s.dt} {
		if t.N > 0 {
			e.dev.Free(t)
		}
	}
	s.t, s.dt, s.rows = Tensor{}, Tensor{}, 0
	var err error
	if s.t, err = e.dev.Alloc(e.act, rows*s.cfg.Rank); err != nil {
		return fmt.Errorf("lora scratch: %w", err)
	}
	if s.train {
		if s.dt, err = e.dev.Alloc(e.act, rows*s.cfg.Rank); err != nil {
			return fmt.Errorf("lora scratch: %w", err)
		}
	}
	s.rows = rows
	return nil
}

func (s *loraState) free(dev Device) {
	for _, t := range []Tensor{s.w, s.g, s.m, s.v, s.sink, s.t, s.dt} {
		if t.N > 0 {
			dev.Free(t)
		}
	}
	if s.wc.N > 0 && !s.wc.same(s.w) {
		dev.Free(s.wc)
	}
}

// adapter returns the adapter of base weight w, if it has one and the
// adapters are on.
func (e *Engine) adapter(w pref) (a, b pref, ok bool) {
	if e.lora == nil || e.baseOnly {
		return pref{}, pref{}, false
	}
	i, ok := e.lora.byBase[w.off]
	if !ok {
		return pref{}, pref{}, false
	}
	return e.lora.params[2*i], e.lora.params[2*i+1], true
}

// loraForward adds s·(in·A)·B to out [M, n] (in [M, k]).
func (e *Engine) loraForward(out, in Tensor, w pref, M, k, n int) {
	a, b, ok := e.adapter(w)
	if !ok {
		return
	}
	s, r := e.lora, e.lora.cfg.Rank
	t := s.t.View(0, M*r)
	e.dev.Gemm(false, false, M, r, k, 1, in, k, s.wc.View(a.off, a.n), r, 0, t, r)
	e.dev.Gemm(false, false, M, n, r, s.scale, t, r, s.wc.View(b.off, b.n), n, 1, out, n)
}

// loraBackward adds the adapter's gradients and its share of din
// (din [M, k] already holds dout·Wᵀ).
func (e *Engine) loraBackward(din, in, dout Tensor, w pref, M, k, n int) {
	a, b, ok := e.adapter(w)
	if !ok {
		return
	}
	s, r := e.lora, e.lora.cfg.Rank
	t, dt := s.t.View(0, M*r), s.dt.View(0, M*r)
	e.dev.Gemm(false, false, M, r, k, 1, in, k, s.wc.View(a.off, a.n), r, 0, t, r)         // t = in·A
	e.dev.Gemm(true, false, r, n, M, s.scale, t, r, dout, n, 1, s.g.View(b.off, b.n), n)   // gB += s·tᵀ·dout
	e.dev.Gemm(false, true, M, r, n, s.scale, dout, n, s.wc.View(b.off, b.n), n, 0, dt, r) // dt = s·dout·Bᵀ
	e.dev.Gemm(true, false, k, r, M, 1, in, k, dt, r, 1, s.g.View(a.off, a.n), r)          // gA += inᵀ·dt
	e.dev.Gemm(false, true, M, k, r, 1, dt, r, s.wc.View(a.off, a.n), r, 1, din, k)        // din += dt·Aᵀ
}

// LoRA reports the adapters' shape, or false for full fine-tuning.
func (e *Engine) LoRA() (model.LoRAConfig, bool) {
	if e.lora == nil {
		return model.LoRAConfig{}, false
	}
	return e.lora.cfg, true
}

// DownloadLoRA copies the adapters' master weights into l and, when opt is
// non-nil, their AdamW moments into opt.
func (e *Engine) DownloadLoRA(l *model.LoRA, opt *model.AdamW) error {
	if e.lora == nil {
		return errors.New("cuda engine: download adapters: the engine has none")
	}
	if l.NumParams() != e.lora.np {
		return fmt.Errorf("cuda engine: download adapters: %d weights, engine %d", l.NumParams(), e.lora.np)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.dev.Do(func() error {
		if err := e.dev.Download(l.Weights(), e.lora.w); err != nil {
			return err
		}
		if opt == nil || e.lora.g.N == 0 {
			return nil
		}
		mm, vv := opt.State()
		if len(mm) != e.lora.np {
			return fmt.Errorf("cuda engine: download adapters: optimiser holds %d weights, adapters %d", len(mm), e.lora.np)
		}
		return e.downloadMoments(mm, vv)
	})
}

// UploadLoRA replaces the adapters with l's and, when opt is non-nil and
// has taken steps, their moments with opt's (a resume).
func (e *Engine) UploadLoRA(l *model.LoRA, opt *model.AdamW) error {
	if e.lora == nil {
		return errors.New("cuda engine: upload adapters: the engine has none")
	}
	if l.NumParams() != e.lora.np {
		return fmt.Errorf("cuda engine: upload adapters: %d weights, engine %d", l.NumParams(), e.lora.np)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.wgen++
	return e.dev.Do(func() error {
		if err := e.uploadLoRA(l.Weights()); err != nil {
			return err
		}
		if opt == nil || e.lora.g.N == 0 {
			return nil
		}
		mm, vv := opt.State()
		if len(mm) != e.lora.np {
			return fmt.Errorf("cuda engine: upload adapters: optimiser holds %d weights, adapters %d", len(mm), e.lora.np)
		}
		return e.uploadMoments(mm, vv)
	})
}

// adapterCopy makes c (a forward-only engine of e's shape) a snapshot that
// reads e's frozen base weights and holds its own copy of the adapters:
// sampling snapshots cost the adapters' memory, not the model's.
func (e *Engine) adapterCopy(c *Engine) (*Engine, error) {
	c.w, c.wc, c.cos, c.sin, c.sharedBase = e.w, e.wc, e.cos, e.sin, true
	s := &loraState{cfg: e.lora.cfg, scale: e.lora.scale, np: e.lora.np, params: e.lora.params,
		byBase: e.lora.byBase, base: e.lora.base}
	c.lora = s
	err := e.dev.Do(func() error {
		var err error
		if s.w, err = e.dev.Alloc(F32, s.np); err != nil {
			return err
		}
		s.wc = s.w
		if e.act != F32 {
			s.wc, err = e.dev.Alloc(e.act, s.np)
		}
		return err
	})
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("cuda engine: adapter copy: %w", err)
	}
	if err := c.CopyWeightsFrom(e); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}
