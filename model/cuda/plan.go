package cuda

import (
	"fmt"

	"github.com/swetui/swetui/model"
)

// A plan is the memory of one shape bucket: every buffer a forward (and,
// for training, backward) pass over B sequences of T positions touches,
// carved out of one arena per element type. Training keeps each layer's
// activations for the backward pass; a forward-only plan shares one set
// across layers, and so does a training plan that recomputes: it keeps
// only each layer's input, and the backward runs each layer's forward
// again into the shared set before its own backward. The LM head runs over chunks of at most HeadRows of the
// rows that have a target, so [rows, vocab] logits never exist whole.
type plan struct {
	B, T, N   int
	train     bool
	recompute bool
	headRows  int
	headM     int // rows with a target in the current micro-batch
	arenas    []Tensor
	bytes     int

	tok, pos               Tensor // i32 [N]
	rows, tgt              Tensor // i32 [N]: rows with a target, and the target
	cot, out, lse          Tensor // f32 [2N], [2N], [N] over those rows
	x, xm                  []Tensor
	rstd1, rstd2           []Tensor
	h1, h2, q, k, v, o     []Tensor
	g, u, alse             []Tensor
	tmp, s                 Tensor
	rstdF, hF, hsel        Tensor
	logits, dlogits        Tensor
	dx, dxa, ds, dg, du    Tensor
	dh, do, dq, dk, dv     Tensor
	delta, dhF, dhsel      Tensor
	ssq                    Tensor // f32 [SumSquaresParts]
	cfgL, cfgD, cfgF, cfgV int
}

// planSpec collects buffer requests before the arenas are sized.
type planSpec struct {
	dtypes []DType
	sizes  map[DType]int
	reqs   []planReq
}

type planReq struct {
	dst *Tensor
	dt  DType
	off int
	n   int
}

// align keeps every buffer on a 256-byte boundary (cuBLAS and vector
// loads want 16).
const align = 64

func (s *planSpec) add(dst *Tensor, dt DType, n int) {
	if s.sizes == nil {
		s.sizes = map[DType]int{}
	}
	if _, ok := s.sizes[dt]; !ok {
		s.dtypes = append(s.dtypes, dt)
	}
	off := s.sizes[dt]
	s.sizes[dt] = off + (n+align-1)/align*align
	s.reqs = append(s.reqs, planReq{dst, dt, off, n})
}

func (s *planSpec) layers(dst *[]Tensor, dt DType, count, n int) {
	*dst = make([]Tensor, count)
	for i := range *dst {
		s.add(&(*dst)[i], dt, n)
	}
}

// tensorAllocator is a device that wants a plan's tensors allocated one
// by one rather than carved out of arenas: the CUDA emulator, whose
// memcheck then bounds each tensor instead of each arena.
type tensorAllocator interface{ TensorAllocs() bool }

// alloc allocates the arenas and points every requested tensor into them
// (or, on a device that asks, allocates each tensor on its own).
func (s *planSpec) alloc(dev Device) ([]Tensor, int, error) {
	if ta, ok := dev.(tensorAllocator); ok && ta.TensorAllocs() {
		return s.allocEach(dev)
	}
	arenas := map[DType]Tensor{}
	var all []Tensor
	bytes := 0
	for _, dt := range s.dtypes {
		t, err := dev.Alloc(dt, s.sizes[dt])
		if err != nil {
			for _, a := range all {
				dev.Free(a)
			}
			return nil, 0, fmt.Errorf("memory plan: %d %v elements: %w", s.sizes[dt], dt, err)
		}
		arenas[dt] = t
		all = append(all, t)
		bytes += t.Bytes()
	}
	for _, r := range s.reqs {
		*r.dst = arenas[r.dt].View(r.off, r.n)
	}
	return all, bytes, nil
}

func (s *planSpec) allocEach(dev Device) ([]Tensor, int, error) {
	var all []Tensor
	bytes := 0
	for _, r := range s.reqs {
		t, err := dev.Alloc(r.dt, r.n)
		if err != nil {
			for _, a := range all {
				dev.Free(a)
			}
			return nil, 0, fmt.Errorf("memory plan: %d %v elements: %w", r.n, r.dt, err)
		}
		*r.dst = t
		all = append(all, t)
		bytes += t.Bytes()
	}
	return all, bytes, nil
}

// newPlan lays out and allocates the buffers of bucket (B, T).
func (e *Engine) newPlan(B, T int, train bool) (*plan, error) {
	p, s := layoutPlan(e.cfg, e.act, e.headRows(), B, T, train, e.opts.Recompute)
	arenas, bytes, err := s.alloc(e.dev)
	if err != nil {
		return nil, err
	}
	p.arenas, p.bytes = arenas, bytes
	return p, nil
}

// layoutPlan lays out the buffers of bucket (B, T) without allocating
// them: newPlan allocates the layout, MemoryPlan counts it. recompute
// matters only when training.
func layoutPlan(c model.Config, a DType, headRows, B, T int, train, recompute bool) (*plan, *planSpec) {
	N := B * T
	D, F, V := c.DModel, c.DFF, c.VocabSize
	Hq, Hkv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	L := c.Layers
	p := &plan{B: B, T: T, N: N, train: train, recompute: train && recompute, cfgL: L, cfgD: D, cfgF: F, cfgV: V}
	p.headRows = max(1, min(N, headRows))
	var s planSpec
	s.add(&p.tok, I32, N)
	s.add(&p.pos, I32, N)
	s.add(&p.rows, I32, N)
	s.add(&p.tgt, I32, N)
	s.add(&p.cot, F32, 2*N)
	s.add(&p.out, F32, 2*N)
	s.add(&p.lse, F32, N)
	per := 1 // sets of a layer's activations
	if train && !p.recompute {
		per = L
	}
	if train {
		s.layers(&p.x, F32, L+1, N*D)  // x[l] is layer l's input, x[L] the last output
		s.layers(&p.xm, F32, per, N*D) // after attention's residual add
	} else {
		s.layers(&p.x, F32, 1, N*D) // one residual stream, updated in place
	}
	s.layers(&p.rstd1, F32, per, N)
	s.layers(&p.rstd2, F32, per, N)
	s.layers(&p.h1, a, per, N*D)
	s.layers(&p.h2, a, per, N*D)
	s.layers(&p.q, a, per, N*Hq)
	s.layers(&p.k, a, per, N*Hkv)
	s.layers(&p.v, a, per, N*Hkv)
	s.layers(&p.o, a, per, N*Hq)
	s.layers(&p.g, a, per, N*F)
	s.layers(&p.u, a, per, N*F)
	s.layers(&p.alse, F32, per, N*c.Heads)
	s.add(&p.tmp, a, N*D)
	s.add(&p.s, a, N*F)
	s.add(&p.rstdF, F32, N)
	s.add(&p.hF, a, N*D)
	s.add(&p.hsel, a, N*D)
	s.add(&p.logits, a, p.headRows*V)
	if train {
		s.add(&p.dlogits, a, p.headRows*V)
		s.add(&p.dx, F32, N*D)
		s.add(&p.dxa, a, N*D)
		s.add(&p.ds, a, N*F)
		s.add(&p.dg, a, N*F)
		s.add(&p.du, a, N*F)
		s.add(&p.dh, a, N*D)
		s.add(&p.do, a, N*Hq)
		s.add(&p.dq, a, N*Hq)
		s.add(&p.dk, a, N*Hkv)
		s.add(&p.dv, a, N*Hkv)
		s.add(&p.delta, F32, N*c.Heads)
		s.add(&p.dhF, a, N*D)
		s.add(&p.dhsel, a, N*D)
	}
	return p, &s
}

// bytes is the memory the layout's arenas take.
func (s *planSpec) bytes() int {
	n := 0
	for _, dt := range s.dtypes {
		n += s.sizes[dt] * dt.Size()
	}
	return n
}

// layer returns the index of layer l's buffers (one shared set unless
// training without recomputing).
func (p *plan) layer(l int) int {
	if p.train && !p.recompute {
		return l
	}
	return 0
}

// resid returns layer l's residual stream: its input, after the attention
// block, and its output (all one buffer when not training).
func (p *plan) resid(l int) (in, mid, out Tensor) {
	if !p.train {
		return p.x[0], p.x[0], p.x[0]
	}
	return p.x[l], p.xm[p.layer(l)], p.x[l+1]
}

// last is the decoder's output before the final norm.
func (p *plan) last() Tensor { return p.x[len(p.x)-1] }

func (p *plan) free(dev Device) {
	for _, a := range p.arenas {
		dev.Free(a)
	}
	p.arenas = nil
}
