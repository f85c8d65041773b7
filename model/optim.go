package model

import (
	"fmt"
	"math"

	"github.com/swetui/swetui/config"
)

// AdamW is decoupled-weight-decay Adam over the model's flat float32 arena
// (gorgonia's Adam is slow and keeps its state inside the graph).
type AdamW struct {
	Beta1, Beta2, Eps, WeightDecay float64
	// Step counts updates taken (bias correction uses it).
	Step int
	m, v []float32
}

// NewAdamW returns an optimiser for a model of n weights.
func NewAdamW(c config.Optim, n int) *AdamW {
	return &AdamW{Beta1: c.Beta1, Beta2: c.Beta2, Eps: c.Eps, WeightDecay: c.WeightDecay,
		m: make([]float32, n), v: make([]float32, n)}
}

// State exposes the moment arenas (same layout as Model.Weights) for
// checkpoints.
func (o *AdamW) State() (m, v []float32) { return o.m, o.v }

// Update takes one step at learning rate lr using the model's accumulated
// gradients; matrices are weight-decayed, norms and biases are not.
func (o *AdamW) Update(md *Model, lr float64) error {
	return o.UpdateParams(md.Params, len(md.data), lr)
}

// UpdateParams takes one step over params, which lie in an arena of n
// weights in order (a model's, or a LoRA's adapters).
func (o *AdamW) UpdateParams(params []Param, n int, lr float64) error {
	if len(o.m) != n {
		return fmt.Errorf("adamw: optimiser holds %d weights, the parameters %d", len(o.m), n)
	}
	o.Step++
	bc1 := 1 - math.Pow(o.Beta1, float64(o.Step))
	bc2 := 1 - math.Pow(o.Beta2, float64(o.Step))
	b1, b2 := float32(o.Beta1), float32(o.Beta2)
	stepSize := float32(lr / bc1)
	invBC2 := float32(1 / bc2)
	eps := float32(o.Eps)
	off := 0
	for _, p := range params {
		n := len(p.W)
		m, v := o.m[off:off+n], o.v[off:off+n]
		off += n
		decay := float32(1)
		if p.Decay {
			decay = float32(1 - lr*o.WeightDecay)
		}
		w, g := p.W, p.G
		parallelChunks(n, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				gi := g[i]
				m[i] = b1*m[i] + (1-b1)*gi
				v[i] = b2*v[i] + (1-b2)*gi*gi
				w[i] = w[i]*decay - stepSize*m[i]/(float32(math.Sqrt(float64(v[i]*invBC2)))+eps)
			}
		})
	}
	return nil
}

// ClipGradNorm scales the gradients so that their global L2 norm is at most
// maxNorm (no-op when maxNorm <= 0) and returns the norm before clipping.
func (md *Model) ClipGradNorm(maxNorm float64) float64 { return clipGradNorm(md.grad, maxNorm) }

// clipGradNorm scales grad to a global L2 norm of at most maxNorm (<= 0:
// no clipping) and returns the norm before.
func clipGradNorm(grad []float32, maxNorm float64) float64 {
	var ss float64
	for _, g := range grad {
		ss += float64(g) * float64(g)
	}
	norm := math.Sqrt(ss)
	if maxNorm > 0 && norm > maxNorm {
		s := float32(maxNorm / (norm + 1e-6))
		for i := range grad {
			grad[i] *= s
		}
	}
	return norm
}

// Schedule is a learning-rate schedule: linear warm-up over Warmup steps,
// then constant, or cosine decay to MinRatio·LR at Total steps.
type Schedule struct {
	LR       float64
	Warmup   int
	Kind     string // "constant" or "cosine"
	Total    int
	MinRatio float64
}

// NewSchedule reads [optim]; total is the run's step count (for cosine).
func NewSchedule(c config.Optim, total int) (Schedule, error) {
	if c.Schedule != "constant" && c.Schedule != "cosine" {
		return Schedule{}, fmt.Errorf("schedule: optim.schedule=%q must be constant or cosine", c.Schedule)
	}
	return Schedule{LR: c.LR, Warmup: c.Warmup, Kind: c.Schedule, Total: total}, nil
}

// At returns the learning rate for update number step (0-based).
func (s Schedule) At(step int) float64 {
	if step < s.Warmup {
		return s.LR * float64(step+1) / float64(s.Warmup)
	}
	if s.Kind != "cosine" || s.Total <= s.Warmup {
		return s.LR
	}
	frac := math.Min(1, float64(step-s.Warmup)/float64(s.Total-s.Warmup))
	return s.LR * (s.MinRatio + (1-s.MinRatio)*0.5*(1+math.Cos(math.Pi*frac)))
}
