package cuda

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/swetui/swetui/model"
)

// pref locates one parameter in the engine's arenas (model.Model's layout).
type pref struct {
	name   string
	off, n int
	// master is the offset of the parameter's fp32 values in the master
	// arena, off unless the engine keeps a frozen base in bf16 only, where
	// only norms and biases have one (-1 for the rest).
	master int
	shape  []int
	decay  bool
}

type layerRefs struct {
	attnNorm, wq, wk, wv, bq, bk, bv, wo, mlpNorm, wg, wu, wd pref
}

// Options configures an engine.
type Options struct {
	// Act is the activation and compute-weight type: F32, or BF16 with
	// fp32 master weights, gradients and optimiser state. With LoRA and
	// BF16 the frozen base is held in bf16 only: its matrices have no fp32
	// masters (norms and biases keep theirs), 4 bytes a weight saved.
	Act DType
	// Train allocates gradients and AdamW moments; a reference engine
	// only runs forward.
	Train bool
	// MicroTokens bounds B·T of one micro-batch (0: 16384).
	MicroTokens int
	// HeadRows bounds the rows of one LM-head chunk (0: about 64M logits).
	HeadRows int
	// Recompute keeps only each layer's input for the backward pass, which
	// runs the layer's forward again: activations of one layer, not of
	// every layer, for a second forward pass's time. The same values
	// (the same kernels on the same inputs).
	Recompute bool
	// LoRA, when set, freezes the base weights and trains these adapters
	// (engine_lora.go).
	LoRA *model.LoRA
	// Source, when set, is where the weights are read from, one tensor at
	// a time, for a model given as a model.Layout: the host never holds
	// them whole.
	Source *model.Weights
	// Shard, on a rank of a data-parallel run with the optimiser sharded
	// (ZeRO-1), is the rank's share: it keeps and updates the AdamW
	// moments of its part of the trainable weights only (Step then takes
	// the updated parts from the other ranks). Zero: the whole.
	Shard Shard
}

// Shard is rank Rank's part of Ranks equal parts (the last may be
// shorter); Ranks 0 or 1 is the whole.
type Shard struct{ Rank, Ranks int }

// Of is the shard's range of n weights.
func (s Shard) Of(n int) (lo, hi int) {
	if s.Ranks <= 1 {
		return 0, n
	}
	chunk := (n + s.Ranks - 1) / s.Ranks
	lo = min(n, s.Rank*chunk)
	return lo, min(n, lo+chunk)
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
	// bf16Base: a frozen LoRA base in act only; w holds just the norms and
	// biases (pref.master), and wc is the weights.
	bf16Base bool
	nMaster  int // w's length
	embed    pref
	norm, lm pref
	layers   []layerRefs
	decays   []pref // every parameter, for AdamW
	cos, sin Tensor // f32 [context, head_dim/2]

	mu     sync.Mutex
	plans  map[[3]int]*plan
	uses   map[[3]int]int
	clock  int
	dec    *decodeState
	turns  *turnState // agent trajectories' caches (turns.go)
	wgen   int        // counts writes of the weights: a turn cache holds one generation's keys
	closed bool

	lora *loraState // nil: full fine-tuning
	// baseOnly switches the adapters off for one pass (the reference).
	baseOnly bool
	// sharedBase marks a snapshot that reads its parent's base weights.
	sharedBase bool
	// group is a ZeRO-1 rank's communicators (Options.Shard), through
	// which Step takes the other ranks' updated parts.
	group *Comms
	// collective is the time (ns) spent in collectives so far, memUsed and
	// memTotal the device's memory when the last one ran (a data-parallel
	// rank's share on screen; atomics: read while a call holds mu).
	collective, memUsed, memTotal atomic.Int64
	// turnReused counts the context tokens agent turns took from a turn
	// cache instead of computing them.
	turnReused atomic.Int64
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
		plans: map[[3]int]*plan{}, uses: map[[3]int]int{}, bf16Base: o.LoRA != nil && o.Act != F32}
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
		alloc(&e.w, F32, e.nMaster)
		if o.Train && o.LoRA == nil {
			lo, hi := o.Shard.Of(e.np)
			alloc(&e.g, F32, e.np)
			alloc(&e.m, F32, hi-lo)
			alloc(&e.v, F32, hi-lo)
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
		if err := e.upload(m); err != nil {
			return err
		}
		if o.LoRA != nil {
			return e.newLoRA(o.LoRA, o.Train)
		}
		return nil
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
		n := 1
		for _, d := range p.Shape {
			n *= d
		}
		master := off
		if e.bf16Base {
			master = -1
			if len(p.Shape) == 1 { // a norm or a bias: read in fp32
				master = e.nMaster
				e.nMaster += n
			}
		}
		refs[p.Name] = pref{name: p.Name, off: off, n: n, master: master, shape: p.Shape, decay: p.Decay}
		e.decays = append(e.decays, refs[p.Name])
		off += n
	}
	if !e.bf16Base {
		e.nMaster = off
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
		e.turns.free(e.dev)
		e.turns = nil
		if e.lora != nil {
			e.lora.free(e.dev)
		}
		if e.sharedBase {
			return nil
		}
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
func (e *Engine) wv(p pref) Tensor  { return e.w.View(p.master, p.n) }
func (e *Engine) gv(p pref) Tensor {
	if e.lora != nil { // frozen: the gradient goes to the sink
		return e.lora.sink.View(0, p.n)
	}
	return e.g.View(p.off, p.n)
}

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
	// The cached plans never hold more than the largest one a pass can
	// need (what MemoryPlan counts as activations).
	_, spec := layoutPlan(e.cfg, e.act, e.headRows(), B, T, train, e.opts.Recompute)
	need := spec.bytes()
	for len(e.plans) > 0 && (len(e.plans) >= maxPlans || e.cachedPlanBytes()+need > e.planBudget()) {
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
	if err := e.loraScratch(B * T); err != nil {
		return nil, err
	}
	p, err := e.newPlan(B, T, train)
	if err != nil {
		return nil, err
	}
	e.plans[k] = p
	return p, nil
}

func (e *Engine) cachedPlanBytes() int {
	n := 0
	for _, p := range e.plans {
		n += p.bytes
	}
	return n
}

// planBudget is the largest plan a pass of this engine can need.
func (e *Engine) planBudget() int {
	return maxPlanBytes(e.cfg, e.act, e.headRows(), e.opts.MicroTokens, e.opts.Train, e.opts.Recompute)
}

// maxPlanBytes is the largest bucket plan a pass can need: for every
// padded length T, as many sequences as microTokens allows (at least one).
func maxPlanBytes(c model.Config, act DType, headRows, microTokens int, train, recompute bool) int {
	most := 0
	for T := 32; ; T *= 2 {
		T = min(T, c.Context)
		_, s := layoutPlan(c, act, headRows, max(1, microTokens/T), T, train, recompute)
		most = max(most, s.bytes())
		if T == c.Context {
			return most
		}
	}
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
