package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"

	"github.com/swetui/swetui/config"
)

// Config is the policy's architecture: a Llama/Qwen2-style decoder (RMSNorm,
// RoPE, SwiGLU, grouped-query attention). Head size is DModel/Heads unless
// HeadDim is set (Hugging Face checkpoints may set it explicitly).
type Config struct {
	Layers  int `json:"num_hidden_layers"`
	DModel  int `json:"hidden_size"`
	Heads   int `json:"num_attention_heads"`
	KVHeads int `json:"num_key_value_heads"`
	HeadDim int `json:"head_dim"`
	DFF     int `json:"intermediate_size"`
	// Context is the longest sequence the model runs: model.context for a
	// fresh model; a loaded one takes the run's with SetContext.
	Context int `json:"max_position_embeddings"`
	// MaxPositions is the max_position_embeddings a loaded config.json
	// declared (0 for a fresh model); saving writes the larger of it and
	// Context, so that a run at a shorter context keeps the model's own.
	MaxPositions int     `json:"-"`
	VocabSize    int     `json:"vocab_size"`
	RopeTheta    float64 `json:"rope_theta"`
	NormEps      float64 `json:"rms_norm_eps"`
	// AttnBias adds biases to the q, k and v projections (Qwen2 has them).
	AttnBias bool `json:"attention_bias"`
}

// ConfigFrom maps the [model] section of config.toml onto an architecture.
func ConfigFrom(c config.Model) Config {
	return Config{Layers: c.Layers, DModel: c.DModel, Heads: c.Heads, KVHeads: c.KVHeads,
		DFF: c.DFF, Context: c.Context, VocabSize: c.VocabSize, RopeTheta: c.RopeTheta, NormEps: 1e-6}
}

// withDefaults fills derived fields so that two equal architectures compare equal.
func (c Config) withDefaults() Config {
	if c.HeadDim == 0 && c.Heads > 0 {
		c.HeadDim = c.DModel / c.Heads
	}
	if c.KVHeads == 0 {
		c.KVHeads = c.Heads
	}
	if c.RopeTheta == 0 {
		c.RopeTheta = 10000
	}
	if c.NormEps == 0 {
		c.NormEps = 1e-6
	}
	return c
}

// Validate reports the first field that makes the architecture unbuildable.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Layers < 1:
		return fmt.Errorf("model config: layers=%d must be >= 1", c.Layers)
	case c.DModel < 1:
		return fmt.Errorf("model config: d_model=%d must be >= 1", c.DModel)
	case c.Heads < 1 || c.KVHeads < 1 || c.Heads%c.KVHeads != 0:
		return fmt.Errorf("model config: heads=%d must be a positive multiple of kv_heads=%d", c.Heads, c.KVHeads)
	case c.HeadDim < 2 || c.HeadDim%2 != 0:
		return fmt.Errorf("model config: head_dim=%d must be even and >= 2", c.HeadDim)
	case c.DFF < 1:
		return fmt.Errorf("model config: d_ff=%d must be >= 1", c.DFF)
	case c.Context < 2:
		return fmt.Errorf("model config: context=%d must be >= 2", c.Context)
	case c.VocabSize < 2:
		return fmt.Errorf("model config: vocab_size=%d must be >= 2", c.VocabSize)
	}
	return nil
}

// BucketT is the padded length for a batch whose longest sequence has n
// tokens: a power of two from 32, capped at the context, so that a handful
// of compiled graphs (model) and device plans (model/cuda) serve every batch.
func (c Config) BucketT(n int) int {
	t := 32
	for t < n {
		t *= 2
	}
	return min(t, c.Context)
}

// Param is one named weight tensor. W and G are windows into the model's
// arena of weights and gradients, so the optimiser, the gorgonia graph and the
// sampler all read and write the same float32 memory. Shapes are stored
// [in, out] for projections (x @ W); checkpoints transpose to Hugging Face's
// [out, in] on the way out and back on the way in.
type Param struct {
	Name  string
	Shape []int
	W     []float32
	G     []float32
	// Decay is true for matrices; norms and biases are not weight-decayed.
	Decay bool
}

// layer holds the indices into Model.Params of one transformer block.
type layer struct {
	attnNorm, wq, wk, wv, bq, bk, bv, wo, mlpNorm, wg, wu, wd int
}

// Model is the policy: a config, its weights and gradient accumulators in
// two flat arenas, and the gorgonia graphs compiled for each shape bucket.
// Logprobs and Backward serialise on the model; Sample only reads the
// weights, so it may run beside them, but never beside an optimiser Update:
// sample from a Clone (refreshed with CopyWeightsFrom) while training.
type Model struct {
	Cfg    Config
	Params []Param
	data   []float32 // all weights, contiguous
	grad   []float32 // all gradients, same layout
	np     int       // weights in the layout (also for a Layout, which has no arena)

	embed, norm, lmHead int // indices into Params
	layers              []layer

	rope   *ropeTable
	mu     sync.Mutex // serialises graph runs (Logprobs, Backward)
	graphs map[graphKey]*graph
	uses   int
	// MicroBatch is how many sequences one compiled graph holds; larger
	// batches are split, and gradients accumulate across the pieces.
	MicroBatch int
	// MicroTokens > 0 also bounds a graph's sequences × padded length
	// (model.micro_tokens): gorgonia holds whole attention matrices, so
	// at long contexts fewer sequences share a graph.
	MicroTokens int
}

// New builds a model with freshly initialised weights: N(0, 0.02) for
// matrices, with the residual output projections scaled by 1/sqrt(2·layers)
// (GPT-2), ones for the norms and zeros for biases.
func New(cfg Config, seed uint64) (*Model, error) {
	m, err := newEmpty(cfg)
	if err != nil {
		return nil, err
	}
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	resid := 0.02 / math.Sqrt(2*float64(m.Cfg.Layers))
	for i := range m.Params {
		p := &m.Params[i]
		switch {
		case len(p.Shape) == 1 && isNorm(p.Name):
			for j := range p.W {
				p.W[j] = 1
			}
		case len(p.Shape) == 1: // bias
		default:
			std := 0.02
			if isResidualOut(p.Name) {
				std = resid
			}
			for j := range p.W {
				p.W[j] = float32(r.NormFloat64() * std)
			}
		}
	}
	return m, nil
}

func isNorm(name string) bool {
	return hasSuffix(name, "layernorm.weight") || name == "model.norm.weight"
}

func isResidualOut(name string) bool {
	return hasSuffix(name, "o_proj.weight") || hasSuffix(name, "down_proj.weight")
}

func hasSuffix(s, suf string) bool { return len(s) >= len(suf) && s[len(s)-len(suf):] == suf }

// newLayout lays out the parameters without their arena.
func newLayout(cfg Config) (*Model, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("model.New: %w", err)
	}
	m := &Model{Cfg: cfg, MicroBatch: 4, graphs: map[graphKey]*graph{}}
	d, hd, v, f := cfg.DModel, cfg.HeadDim, cfg.VocabSize, cfg.DFF
	qd, kvd := cfg.Heads*hd, cfg.KVHeads*hd
	type spec struct {
		name  string
		shape []int
	}
	var specs []spec
	add := func(name string, shape ...int) int {
		specs = append(specs, spec{name, shape})
		return len(specs) - 1
	}
	m.embed = add("model.embed_tokens.weight", v, d)
	for i := 0; i < cfg.Layers; i++ {
		pre := fmt.Sprintf("model.layers.%d.", i)
		var l layer
		l.attnNorm = add(pre+"input_layernorm.weight", d)
		l.wq = add(pre+"self_attn.q_proj.weight", d, qd)
		l.wk = add(pre+"self_attn.k_proj.weight", d, kvd)
		l.wv = add(pre+"self_attn.v_proj.weight", d, kvd)
		l.bq, l.bk, l.bv = -1, -1, -1
		if cfg.AttnBias {
			l.bq = add(pre+"self_attn.q_proj.bias", qd)
			l.bk = add(pre+"self_attn.k_proj.bias", kvd)
			l.bv = add(pre+"self_attn.v_proj.bias", kvd)
		}
		l.wo = add(pre+"self_attn.o_proj.weight", qd, d)
		l.mlpNorm = add(pre+"post_attention_layernorm.weight", d)
		l.wg = add(pre+"mlp.gate_proj.weight", d, f)
		l.wu = add(pre+"mlp.up_proj.weight", d, f)
		l.wd = add(pre+"mlp.down_proj.weight", f, d)
		m.layers = append(m.layers, l)
	}
	m.norm = add("model.norm.weight", d)
	m.lmHead = add("lm_head.weight", d, v)

	for _, s := range specs {
		m.Params = append(m.Params, Param{Name: s.name, Shape: s.shape, Decay: len(s.shape) == 2})
		m.np += prod(s.shape)
	}
	return m, nil
}

// Layout is a model of cfg without weights: its parameters' names, shapes
// and order, for a device engine that reads the weights itself
// (Weights.Each) so that the host never holds them. Nothing may run on it.
func Layout(cfg Config) (*Model, error) { return newLayout(cfg) }

// newEmpty lays out the parameter arena with zero weights.
func newEmpty(cfg Config) (*Model, error) {
	m, err := newLayout(cfg)
	if err != nil {
		return nil, err
	}
	m.data = make([]float32, m.np)
	m.grad = make([]float32, m.np)
	off := 0
	for i := range m.Params {
		p := &m.Params[i]
		n := prod(p.Shape)
		p.W, p.G = m.data[off:off+n:off+n], m.grad[off:off+n:off+n]
		off += n
	}
	m.rope = newRopeTable(m.Cfg.HeadDim, m.Cfg.Context, m.Cfg.RopeTheta)
	return m, nil
}

func prod(s []int) int {
	n := 1
	for _, v := range s {
		n *= v
	}
	return n
}

// SetContext makes n the longest sequence the model runs: the run's
// model.context rather than the max_position_embeddings of the config.json
// it was loaded from. RoPE has no position table to outgrow, so n may pass
// what the checkpoint was trained at (those positions are new to it).
// Compiled graphs are dropped; call it before the model runs.
func (m *Model) SetContext(n int) error {
	if n < 2 {
		return fmt.Errorf("model.SetContext: context=%d must be >= 2", n)
	}
	if m.Cfg.MaxPositions == 0 {
		m.Cfg.MaxPositions = m.Cfg.Context
	}
	m.Cfg.Context = n
	if m.rope != nil {
		m.rope = newRopeTable(m.Cfg.HeadDim, n, m.Cfg.RopeTheta)
	}
	for k, g := range m.graphs {
		g.vm.Close()
		delete(m.graphs, k)
	}
	return nil
}

// NumParams is the number of weights.
func (m *Model) NumParams() int { return m.np }

// HasWeights is false for a Layout.
func (m *Model) HasWeights() bool { return m.data != nil }

// Weights and Grads expose the flat arenas (same layout; Params index them).
func (m *Model) Weights() []float32 { return m.data }

// Grads is the gradient arena that Backward accumulates into.
func (m *Model) Grads() []float32 { return m.grad }

// ZeroGrad clears the accumulated gradients.
func (m *Model) ZeroGrad() { clear(m.grad) }

// Clone returns an independent copy of the weights (no gradients, no graphs):
// the frozen reference for the KL term, or the sampler's copy in async mode.
func (m *Model) Clone() *Model {
	c, _ := newEmpty(m.Cfg) // m.Cfg was validated when m was built
	copy(c.data, m.data)
	c.MicroBatch, c.MicroTokens = m.MicroBatch, m.MicroTokens
	return c
}

// CopyWeightsFrom overwrites the weights with src's (same architecture);
// cheap way to refresh a sampler copy without re-allocating graphs.
func (m *Model) CopyWeightsFrom(src *Model) error {
	if err := m.Cfg.match(src.Cfg); err != nil {
		return fmt.Errorf("model.CopyWeightsFrom: %w", err)
	}
	copy(m.data, src.data)
	return nil
}

// Param returns the parameter with the given (Hugging Face) name.
func (m *Model) Param(name string) (*Param, bool) {
	for i := range m.Params {
		if m.Params[i].Name == name {
			return &m.Params[i], true
		}
	}
	return nil, false
}

// match names the first architecture field where c and o differ. The
// context is not one: RoPE has no position table, so the same weights run
// at any length (SetContext).
func (c Config) match(o Config) error {
	c, o = c.withDefaults(), o.withDefaults()
	fields := []struct {
		name string
		a, b any
	}{
		{"layers", c.Layers, o.Layers}, {"d_model", c.DModel, o.DModel}, {"heads", c.Heads, o.Heads},
		{"kv_heads", c.KVHeads, o.KVHeads}, {"head_dim", c.HeadDim, o.HeadDim}, {"d_ff", c.DFF, o.DFF},
		{"vocab_size", c.VocabSize, o.VocabSize},
		{"rope_theta", c.RopeTheta, o.RopeTheta}, {"rms_norm_eps", c.NormEps, o.NormEps},
		{"attention_bias", c.AttnBias, o.AttnBias},
	}
	for _, f := range fields {
		if f.a != f.b {
			return fmt.Errorf("architecture mismatch: %s is %v, want %v", f.name, f.b, f.a)
		}
	}
	return nil
}
