package cuda

import (
	"errors"
	"math"
	"time"

	"github.com/swetui/swetui/model"
)

// trainable is what Step updates: every weight, or with LoRA the
// adapters only (their masters, gradients, moments, compute copy, params).
func (e *Engine) trainable() (w, g, m, v, wc Tensor, params []pref) {
	if e.lora != nil {
		s := e.lora
		return s.w, s.g, s.m, s.v, s.wc, s.params
	}
	return e.w, e.g, e.m, e.v, e.wc, e.decays
}

// ZeroGrad clears the gradient arena.
func (e *Engine) ZeroGrad() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, g, _, _, _, _ := e.trainable()
	return e.dev.Do(func() error {
		e.dev.Zero(g)
		return nil
	})
}

// Grads copies the gradient arena into dst (model layout; with LoRA the
// adapters', model.LoRA's layout).
func (e *Engine) Grads(dst []float32) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, g, _, _, _, _ := e.trainable()
	return e.dev.Do(func() error { return e.dev.Download(dst, g) })
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
	_, g, _, _, _, _ := e.trainable()
	e.dev.SumSquares(parts, g, g.N)
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
//
// A ZeRO-1 rank (Options.Shard) updates its part of the weights only, with
// the moments it keeps, then takes every other rank's updated part
// (broadcast from its owner); its gradients must already be the sum over
// the ranks (DataParallel.Step all-reduces them first).
func (e *Engine) Step(opt *model.AdamW, lr, clip float64) (float64, error) {
	w, g, mom, vel, wc, params := e.trainable()
	if g.N == 0 {
		return 0, errors.New("cuda engine: step on an engine built without training state")
	}
	sh := e.opts.Shard
	if sh.Ranks > 1 && e.group == nil {
		return 0, errors.New("cuda engine: step: a ZeRO-1 shard without its communicators")
	}
	lo, hi := sh.Of(g.N)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.wgen++
	// The compute copy follows the masters once every part of them is in.
	refresh := func() error {
		if e.act != F32 {
			e.dev.Cast(wc, w, w.N)
		}
		return nil
	}
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
		for _, p := range params {
			a.Decay = 1
			if p.decay {
				a.Decay = float32(1 - lr*opt.WeightDecay)
			}
			from, to := max(p.off, lo), min(p.off+p.n, hi) // the part of p this engine updates
			if from < to {
				n := to - from
				e.dev.AdamW(w.View(from, n), g.View(from, n), mom.View(from-lo, n), vel.View(from-lo, n), n, a)
			}
		}
		e.dev.Zero(g)
		if sh.Ranks > 1 {
			return nil // the other ranks' parts come first
		}
		return refresh()
	})
	if err != nil || sh.Ranks <= 1 {
		return norm, err
	}
	// A ZeRO-1 rank: the broadcasts in a Do of their own (which ends
	// synchronized), so that the collective's time is its own.
	start := time.Now()
	err = e.dev.Do(func() error {
		for q := range sh.Ranks {
			qlo, qhi := Shard{q, sh.Ranks}.Of(g.N)
			if qhi > qlo {
				if err := e.group.Broadcast(sh.Rank, w.View(qlo, qhi-qlo), q); err != nil {
					return err
				}
			}
		}
		return nil
	})
	e.collective.Add(int64(time.Since(start)))
	if err != nil {
		return norm, err
	}
	return norm, e.dev.Do(refresh)
}
