package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
)

// LoRA (Hu et al., 2021) trains, for each target projection W [in, out],
// two small matrices A [in, r] and B [r, out] and leaves W frozen:
//
//	W_eff = W + s·A·B,  s = alpha / r
//
// B starts at zero, so training starts from the base model exactly. On the
// CPU the adapters train through a merged copy: gorgonia differentiates
// W_eff, and the chain rule gives the adapters' gradients from it
//
//	∂L/∂A = s·(∂L/∂W_eff)·Bᵀ,  ∂L/∂B = s·Aᵀ·(∂L/∂W_eff)
//
// (AdapterGrads); the device engine (model/cuda) runs the adapters beside
// the frozen weights instead, and the CPU path is its oracle.

// LoRATargets are the projections an adapter can wrap, by their module
// names (PEFT's target_modules); all of them are the default: RL
// fine-tuning of code models with LoRA does best with every linear layer
// adapted (the LM head and embeddings stay frozen).
var LoRATargets = []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}

// LoRAConfig is the adapters' shape.
type LoRAConfig struct {
	Rank    int
	Alpha   float64
	Targets []string // module names from LoRATargets
}

// Scale is s = alpha / r.
func (c LoRAConfig) Scale() float64 { return c.Alpha / float64(c.Rank) }

// Validate names the first field that cannot be used.
func (c LoRAConfig) Validate() error {
	if c.Rank < 1 {
		return fmt.Errorf("lora: rank=%d must be >= 1", c.Rank)
	}
	if !(c.Alpha > 0) {
		return fmt.Errorf("lora: alpha=%v must be > 0", c.Alpha)
	}
	if len(c.Targets) == 0 {
		return fmt.Errorf("lora: no target modules (choose from %v)", LoRATargets)
	}
	for _, t := range c.Targets {
		if !slices.Contains(LoRATargets, t) {
			return fmt.Errorf("lora: target module %q is not one of %v", t, LoRATargets)
		}
	}
	return nil
}

// LoRA is a set of adapters for one model: for every targeted weight an
// A and a B Param, in the base model's parameter order, in one arena.
type LoRA struct {
	Cfg LoRAConfig
	// Params are A then B of each adapter; names are the base weight's with
	// ".weight" replaced by ".lora_A.weight" / ".lora_B.weight" (PEFT's,
	// without its "base_model.model." prefix).
	Params []Param
	// Base names the weight adapter i wraps (Params[2i], Params[2i+1]).
	Base       []string
	data, grad []float32
}

// targetOf is the module name of a projection weight ("q_proj"), or "".
func targetOf(name string) string {
	if !strings.HasSuffix(name, "_proj.weight") {
		return ""
	}
	name = strings.TrimSuffix(name, ".weight")
	return name[strings.LastIndex(name, ".")+1:]
}

// NewLoRA lays out adapters for m's targeted weights: A drawn as PEFT draws
// it (Kaiming-uniform with a=√5: U(−1/√in, 1/√in)), B zero.
func NewLoRA(m *Model, c LoRAConfig, seed uint64) (*LoRA, error) {
	l, err := newLoRAEmpty(m, c)
	if err != nil {
		return nil, err
	}
	r := rand.New(rand.NewPCG(seed, seed^0x10a4))
	for i := 0; i < len(l.Params); i += 2 {
		a := &l.Params[i]
		bound := 1 / math.Sqrt(float64(a.Shape[0]))
		for j := range a.W {
			a.W[j] = float32((2*r.Float64() - 1) * bound)
		}
	}
	return l, nil
}

func newLoRAEmpty(m *Model, c LoRAConfig) (*LoRA, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	l := &LoRA{Cfg: c}
	type spec struct {
		name  string
		shape []int
	}
	var specs []spec
	for _, p := range m.Params {
		if t := targetOf(p.Name); t == "" || !slices.Contains(c.Targets, t) {
			continue
		}
		stem := strings.TrimSuffix(p.Name, ".weight")
		in, out := p.Shape[0], p.Shape[1]
		specs = append(specs, spec{stem + ".lora_A.weight", []int{in, c.Rank}}, spec{stem + ".lora_B.weight", []int{c.Rank, out}})
		l.Base = append(l.Base, p.Name)
	}
	if len(l.Base) == 0 {
		return nil, fmt.Errorf("lora: the model has no %v projections", c.Targets)
	}
	total := 0
	for _, s := range specs {
		total += prod(s.shape)
	}
	l.data, l.grad = make([]float32, total), make([]float32, total)
	off := 0
	for _, s := range specs {
		n := prod(s.shape)
		l.Params = append(l.Params, Param{Name: s.name, Shape: s.shape,
			W: l.data[off : off+n : off+n], G: l.grad[off : off+n : off+n], Decay: true})
		off += n
	}
	return l, nil
}

// NumParams is the number of adapter weights.
func (l *LoRA) NumParams() int { return len(l.data) }

// Weights and Grads are the flat arenas (Params index them).
func (l *LoRA) Weights() []float32 { return l.data }

// Grads is the adapters' gradient arena.
func (l *LoRA) Grads() []float32 { return l.grad }

// ZeroGrad clears the adapters' gradients.
func (l *LoRA) ZeroGrad() { clear(l.grad) }

// Clone copies the adapters (weights only).
func (l *LoRA) Clone() *LoRA {
	c := &LoRA{Cfg: l.Cfg, Base: l.Base, data: slices.Clone(l.data), grad: make([]float32, len(l.grad))}
	off := 0
	for _, p := range l.Params {
		n := len(p.W)
		c.Params = append(c.Params, Param{Name: p.Name, Shape: p.Shape, W: c.data[off : off+n : off+n],
			G: c.grad[off : off+n : off+n], Decay: p.Decay})
		off += n
	}
	return c
}

// Merge writes base's weights with the adapters folded in into dst (same
// architecture; dst may be base itself, to fold them in place).
func (l *LoRA) Merge(dst, base *Model) error {
	if err := dst.Cfg.match(base.Cfg); err != nil {
		return fmt.Errorf("lora merge: %w", err)
	}
	if dst != base {
		copy(dst.data, base.data)
	}
	s := float32(l.Cfg.Scale())
	return l.eachAdapter(dst, "lora merge", func(w, a, b *Param, in, out, r int) {
		gemm(false, false, in, out, r, s, a.W, r, b.W, out, 1, w.W, out)
	})
}

// AdapterGrads adds to the adapters' gradients what merged's accumulated
// gradients (those of W_eff) give by the chain rule.
func (l *LoRA) AdapterGrads(merged *Model) error {
	s := float32(l.Cfg.Scale())
	return l.eachAdapter(merged, "lora grads", func(w, a, b *Param, in, out, r int) {
		gemm(false, true, in, r, out, s, w.G, out, b.W, out, 1, a.G, r) // s·G·Bᵀ
		gemm(true, false, r, out, in, s, a.W, r, w.G, out, 1, b.G, out) // s·Aᵀ·G
	})
}

// eachAdapter calls fn with every adapter: the weight W [in, out] of m it
// wraps, its A and B, and the rank; op names the caller in errors.
func (l *LoRA) eachAdapter(m *Model, op string, fn func(w, a, b *Param, in, out, r int)) error {
	for i, name := range l.Base {
		w, ok := m.Param(name)
		if !ok {
			return fmt.Errorf("%s: the model has no %s", op, name)
		}
		fn(w, &l.Params[2*i], &l.Params[2*i+1], w.Shape[0], w.Shape[1], l.Cfg.Rank)
	}
	return nil
}

// ClipGradNorm scales the adapters' gradients to a global L2 norm of at
// most maxNorm (<= 0: no clipping) and returns the norm before.
func (l *LoRA) ClipGradNorm(maxNorm float64) float64 { return clipGradNorm(l.grad, maxNorm) }
