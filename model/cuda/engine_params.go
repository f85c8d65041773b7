package cuda

import (
	"errors"
	"fmt"

	"github.com/swetui/swetui/model"
)

// The weights' and moments' ways in and out of the device: from and to a
// model.Model, from another engine, and one parameter's arena at a time.

// upload copies m's weights into the master arena and the compute copy.
// Call inside dev.Do.
func (e *Engine) upload(m *model.Model) error {
	if !m.HasWeights() {
		if e.opts.Source == nil {
			return errors.New("upload: a model layout without weights and no Options.Source")
		}
		i := 0
		err := e.opts.Source.Each(m, func(p *model.Param, data []float32) error {
			if i >= len(e.decays) {
				return fmt.Errorf("upload: %s: more parameters than the engine's %d", p.Name, len(e.decays))
			}
			err := e.uploadParam(e.decays[i], data)
			i++
			return err
		})
		return err
	}
	if e.bf16Base {
		all := m.Weights()
		for _, p := range e.decays {
			if err := e.uploadParam(p, all[p.off:p.off+p.n]); err != nil {
				return err
			}
		}
		return nil
	}
	if err := e.dev.Upload(e.w, m.Weights()); err != nil {
		return err
	}
	if e.act != F32 {
		e.dev.Cast(e.wc, e.w, e.np)
	}
	return nil
}

// uploadParam copies one parameter's values into its master and compute
// copy; a bf16-only base's matrices go straight to bf16, rounded as the
// cast from a master would round them. Call inside dev.Do.
func (e *Engine) uploadParam(p pref, data []float32) error {
	if len(data) != p.n {
		return fmt.Errorf("upload: %s: %d values for %d", p.name, len(data), p.n)
	}
	if p.master < 0 {
		return e.dev.Upload(e.wcv(p), data)
	}
	if err := e.dev.Upload(e.wv(p), data); err != nil {
		return err
	}
	if e.act != F32 {
		e.dev.Cast(e.wcv(p), e.wv(p), p.n)
	}
	return nil
}

// downloadParam copies one parameter's values (its master, or a bf16-only
// base's bf16 values widened) into dst. Call inside dev.Do.
func (e *Engine) downloadParam(p pref, dst []float32) error {
	if p.master < 0 {
		return e.dev.Download(dst, e.wcv(p))
	}
	return e.dev.Download(dst, e.wv(p))
}

// Upload replaces the engine's weights with m's (same architecture).
func (e *Engine) Upload(m *model.Model) error {
	if m.NumParams() != e.np {
		return fmt.Errorf("cuda engine: upload: model has %d weights, engine %d", m.NumParams(), e.np)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.wgen++
	return e.dev.Do(func() error { return e.upload(m) })
}

// Download copies the master weights into m, and the AdamW moments into
// opt when both are non-nil (for checkpoints); a bf16-only base gives its
// bf16 values (a LoRA checkpoint never saves the base: it names it).
func (e *Engine) Download(m *model.Model, opt *model.AdamW) error {
	if m.NumParams() != e.np {
		return fmt.Errorf("cuda engine: download: model has %d weights, engine %d", m.NumParams(), e.np)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.dev.Do(func() error {
		if e.bf16Base {
			all := m.Weights()
			for _, p := range e.decays {
				if err := e.downloadParam(p, all[p.off:p.off+p.n]); err != nil {
					return err
				}
			}
			return nil
		}
		if err := e.dev.Download(m.Weights(), e.w); err != nil {
			return err
		}
		if opt != nil && e.g.N > 0 && e.lora == nil {
			mm, vv := opt.State()
			return e.downloadMoments(mm, vv)
		}
		return nil
	})
}

// downloadMoments copies the moments the engine keeps (its shard's part
// under ZeRO-1) into their place in the whole arenas mm and vv.
func (e *Engine) downloadMoments(mm, vv []float32) error {
	_, g, m, v, _, _ := e.trainable()
	lo, hi := e.opts.Shard.Of(g.N)
	if err := e.dev.Download(mm[lo:hi], m); err != nil {
		return err
	}
	return e.dev.Download(vv[lo:hi], v)
}

// uploadMoments replaces the moments the engine keeps with their part of
// mm and vv.
func (e *Engine) uploadMoments(mm, vv []float32) error {
	_, g, m, v, _, _ := e.trainable()
	lo, hi := e.opts.Shard.Of(g.N)
	if err := e.dev.Upload(m, mm[lo:hi]); err != nil {
		return err
	}
	return e.dev.Upload(v, vv[lo:hi])
}

// DownloadMoments copies the moments this engine keeps into opt's whole
// arenas (a ZeRO-1 rank's part of a checkpoint).
func (e *Engine) DownloadMoments(opt *model.AdamW) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	mm, vv := opt.State()
	if _, g, _, _, _, _ := e.trainable(); len(mm) != g.N {
		return fmt.Errorf("cuda engine: download moments: optimiser holds %d weights, engine trains %d", len(mm), g.N)
	}
	return e.dev.Do(func() error { return e.downloadMoments(mm, vv) })
}

// UploadOptim replaces the AdamW moments with opt's (after a resume).
func (e *Engine) UploadOptim(opt *model.AdamW) error {
	if e.lora != nil {
		return errors.New("cuda engine: upload optimiser: the engine trains adapters (UploadLoRA)")
	}
	if e.g.N == 0 {
		return errors.New("cuda engine: upload optimiser: engine was built without training state")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	mm, vv := opt.State()
	if len(mm) != e.np {
		return fmt.Errorf("cuda engine: upload optimiser: it holds %d weights, engine %d", len(mm), e.np)
	}
	return e.dev.Do(func() error { return e.uploadMoments(mm, vv) })
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
	e.wgen++
	if (src.lora == nil) != (e.lora == nil) || src.lora != nil && src.lora.np != e.lora.np {
		return errors.New("cuda engine: copy weights: engines differ in adapters")
	}
	if src.bf16Base != e.bf16Base || src.act != e.act {
		return errors.New("cuda engine: copy weights: engines differ in how they hold the weights")
	}
	return e.dev.Do(func() error {
		switch {
		case e.sharedBase:
		case e.bf16Base:
			e.dev.Copy(e.w, src.w)
			e.dev.Copy(e.wc, src.wc)
		default:
			e.dev.Copy(e.w, src.w)
			if e.act != F32 {
				e.dev.Cast(e.wc, e.w, e.np)
			}
		}
		if e.lora != nil {
			e.dev.Copy(e.lora.w, src.lora.w)
			if e.act != F32 {
				e.dev.Cast(e.lora.wc, e.lora.w, e.lora.np)
			}
		}
		return nil
	})
}

// Slot names one of a parameter's arenas.
type Slot int

// The arenas a parameter has: master weights, AdamW's first and second
// moments.
const (
	Weights Slot = iota
	Moment1
	Moment2
)

// param is parameter i, checked to hold n values.
func (e *Engine) param(i, n int) (pref, error) {
	if i < 0 || i >= len(e.decays) {
		return pref{}, fmt.Errorf("cuda engine: parameter %d of %d", i, len(e.decays))
	}
	p := e.decays[i]
	if n != p.n {
		return p, fmt.Errorf("cuda engine: %s: %d values for %d", p.name, n, p.n)
	}
	return p, nil
}

// paramIn is the part of parameter i (of n values) that moment arena s
// holds: all of it, or under ZeRO-1 (Options.Shard) the values in the
// engine's shard, as the view and its range [from, to) within the
// parameter (empty when the shard holds none of it).
func (e *Engine) paramIn(i int, s Slot, n int) (t Tensor, from, to int, err error) {
	p, err := e.param(i, n)
	if err != nil {
		return Tensor{}, 0, 0, err
	}
	arena := map[Slot]Tensor{Moment1: e.m, Moment2: e.v}[s]
	if e.g.N == 0 {
		return Tensor{}, 0, 0, fmt.Errorf("cuda engine: %s: no arena %d (built without training state?)", p.name, s)
	}
	lo, hi := e.opts.Shard.Of(e.g.N)
	a, b := max(p.off, lo), min(p.off+p.n, hi)
	if a >= b {
		return Tensor{}, 0, 0, nil
	}
	return arena.View(a-lo, b-a), a - p.off, b - p.off, nil
}

// ReadParam copies parameter i's values (model layout, in model.Model's
// parameter order) from arena s into dst: checkpoints stream a device's
// weights and moments a tensor at a time instead of a host copy.
func (e *Engine) ReadParam(i int, s Slot, dst []float32) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if s == Weights {
		p, err := e.param(i, len(dst))
		if err != nil {
			return err
		}
		return e.dev.Do(func() error { return e.downloadParam(p, dst) })
	}
	t, from, to, err := e.paramIn(i, s, len(dst))
	if err != nil || from == to {
		return err
	}
	return e.dev.Do(func() error { return e.dev.Download(dst[from:to], t) })
}

// WriteParam copies src into parameter i's arena s (the compute copy
// follows the weights): a resume streams a checkpoint onto the device.
func (e *Engine) WriteParam(i int, s Slot, src []float32) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if s == Weights {
		e.wgen++
		p, err := e.param(i, len(src))
		if err != nil {
			return err
		}
		return e.dev.Do(func() error { return e.uploadParam(p, src) })
	}
	t, from, to, err := e.paramIn(i, s, len(src))
	if err != nil || from == to {
		return err
	}
	return e.dev.Do(func() error { return e.dev.Upload(t, src[from:to]) })
}
