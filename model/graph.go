package model

import (
	"context"
	"fmt"
	"sort"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Batch is a set of sequences for the training graph: each is a prompt
// followed by its completion, packed from position 0 and right-padded to the
// shape bucket by the model (so the causal mask suffices).
type Batch struct {
	Tokens    [][]int // prompt then completion
	PromptLen []int   // completion of sequence i is Tokens[i][PromptLen[i]:]
	// Temperature divides the logits before the softmax, as when sampling
	// (TRL does the same in both places); 0 means 1.
	Temperature float32
}

// Result holds per-completion-token values: Logprobs[i][j] is
// log π(Tokens[i][PromptLen[i]+j] | prefix) at the batch's temperature, and
// Entropy[i][j] the entropy of the distribution that token was drawn from.
type Result struct {
	Logprobs [][]float32
	Entropy  [][]float32
}

// MeanEntropy is the mean of Entropy over every token (0 when there are
// none): what a policy reports of a backward pass.
func (r *Result) MeanEntropy() float64 {
	sum, n := 0.0, 0
	for _, row := range r.Entropy {
		for _, e := range row {
			sum += float64(e)
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

// clearDualGrads is the workaround for gradients that accumulate in dual
// values across runs; a variable only so that a test can show the defect.
var clearDualGrads = true

type graphKey struct {
	B, T  int
	train bool
}

// graph is one compiled shape bucket: [B, T] tokens in, [B·T, 2]
// (logprob, entropy) out, and for training the gradient of
// Σ cot ∘ (logprob, entropy) with respect to every parameter.
type graph struct {
	B, T   int
	g      *G.ExprGraph
	vm     G.VM
	params G.Nodes

	tokens, targets, cot *G.Node
	tokT, tgtT, cotT     *tensor.Dense
	out                  G.Value
	lp                   *logprobOp
	lastUse              int
}

// maxGraphs bounds the compiled buckets a model keeps; the least recently
// used is dropped beyond it (a T=1024, B=4 training graph holds ~0.5 GB).
const maxGraphs = 8

func (m *Model) graphFor(B, T int, train bool) (*graph, error) {
	k := graphKey{B, T, train}
	m.uses++
	if gr, ok := m.graphs[k]; ok {
		gr.lastUse = m.uses
		return gr, nil
	}
	if len(m.graphs) >= maxGraphs {
		var oldest graphKey
		least := m.uses + 1
		for key, g := range m.graphs {
			if g.lastUse < least {
				oldest, least = key, g.lastUse
			}
		}
		m.graphs[oldest].vm.Close()
		delete(m.graphs, oldest)
	}
	gr, err := m.build(B, T, train)
	if err != nil {
		return nil, fmt.Errorf("model: build graph B=%d T=%d: %w", B, T, err)
	}
	gr.lastUse = m.uses
	m.graphs[k] = gr
	return gr, nil
}

// build lays out the forward pass (nanoGPT-style shape comments; N = B·T,
// D = d_model, Hq = heads·head_dim, Hkv = kv_heads·head_dim, F = d_ff).
func (m *Model) build(B, T int, train bool) (*graph, error) {
	c := m.Cfg
	N := B * T
	g := G.NewGraph()
	gr := &graph{B: B, T: T, g: g, lp: &logprobOp{invTemp: 1}}
	for _, p := range m.Params {
		w := tensor.New(tensor.WithShape(p.Shape...), tensor.WithBacking(p.W))
		gr.params = append(gr.params, G.NewTensor(g, tensor.Float32, len(p.Shape),
			G.WithShape(p.Shape...), G.WithValue(w), G.WithName(p.Name)))
	}
	P := func(i int) *G.Node { return gr.params[i] }
	gr.tokT = tensor.New(tensor.WithShape(N), tensor.Of(tensor.Int))
	gr.tgtT = tensor.New(tensor.WithShape(N), tensor.Of(tensor.Float32))
	gr.tokens = G.NewVector(g, tensor.Int, G.WithShape(N), G.WithName("tokens"), G.WithValue(gr.tokT))
	gr.targets = G.NewVector(g, tensor.Float32, G.WithShape(N), G.WithName("targets"), G.WithValue(gr.tgtT))

	var err error
	must := func(n *G.Node, e error) *G.Node {
		if e != nil && err == nil {
			err = e
		}
		return n
	}
	linear := func(x *G.Node, w, b int) *G.Node {
		y := must(G.Mul(x, P(w)))
		if b >= 0 && err == nil {
			y = must(addBias(y, P(b)))
		}
		return y
	}
	as := attnShape{B: B, T: T, H: c.Heads, KVH: c.KVHeads, HD: c.HeadDim}

	x := must(G.ByIndices(P(m.embed), gr.tokens, 0)) // [N, D]; axis-0 gather is the one ByIndices gets right
	for _, l := range m.layers {
		if err != nil {
			break
		}
		h := must(rmsNorm(x, P(l.attnNorm), c.NormEps)) // [N, D]
		q := linear(h, l.wq, l.bq)                      // [N, Hq]
		k := linear(h, l.wk, l.bk)                      // [N, Hkv]
		v := linear(h, l.wv, l.bv)                      // [N, Hkv]
		if err != nil {
			break
		}
		q, k = must(rope(q, m.rope, T)), must(rope(k, m.rope, T))
		if err != nil {
			break
		}
		a := must(attention(q, k, v, as, train))      // [N, Hq]
		x = must(G.Add(x, linear(a, l.wo, -1)))       // [N, D]
		h = must(rmsNorm(x, P(l.mlpNorm), c.NormEps)) // [N, D]
		if err != nil {
			break
		}
		f := must(swiGLU(linear(h, l.wg, -1), linear(h, l.wu, -1))) // [N, F]
		x = must(G.Add(x, linear(f, l.wd, -1)))                     // [N, D]
	}
	if err != nil {
		return nil, err
	}
	x = must(rmsNorm(x, P(m.norm), c.NormEps)) // [N, D]
	logits := linear(x, m.lmHead, -1)          // [N, V]
	if err != nil {
		return nil, err
	}
	out, err := gr.lp.node(logits, gr.targets) // [N, 2]: (logprob, entropy)
	if err != nil {
		return nil, err
	}
	G.Read(out, &gr.out) // intermediate values are overwritten after RunAll (docs/ARCHITECTURE.md §9, defect 4)

	if !train {
		gr.vm = G.NewTapeMachine(g)
		return gr, nil
	}
	gr.cotT = tensor.New(tensor.WithShape(N, 2), tensor.Of(tensor.Float32))
	gr.cot = G.NewMatrix(g, tensor.Float32, G.WithShape(N, 2), G.WithName("cotangent"), G.WithValue(gr.cotT))
	prod, err := G.HadamardProd(out, gr.cot)
	if err != nil {
		return nil, err
	}
	cost, err := G.Sum(prod) // scalar Σ cot ∘ (logprob, entropy)
	if err != nil {
		return nil, err
	}
	if _, err := G.Grad(cost, gr.params...); err != nil {
		return nil, err
	}
	gr.vm = G.NewTapeMachine(g, G.BindDualValues(gr.params...))
	return gr, nil
}

// run executes one micro-batch: rows seqs of b (at most gr.B of them).
// cot, when non-nil, is the cotangent of the logprobs (train graph).
func (gr *graph) run(m *Model, b *Batch, seqs []int, cot, entCot [][]float32, res *Result) error {
	T := gr.T
	toks := gr.tokT.Data().([]int)
	tgts := gr.tgtT.Data().([]float32)
	clear(toks)
	for i := range tgts {
		tgts[i] = -1
	}
	var cots []float32
	if gr.cotT != nil {
		cots = gr.cotT.Data().([]float32)
		clear(cots)
	}
	for r, s := range seqs {
		seq, pl := b.Tokens[s], b.PromptLen[s]
		copy(toks[r*T:], seq)
		// Row t predicts token t+1: completion token j sits at t = pl+j-1.
		for j := pl; j < len(seq); j++ {
			n := r*T + j - 1
			tgts[n] = float32(seq[j])
			if cots != nil {
				if cot != nil {
					cots[2*n] = cot[s][j-pl]
				}
				if entCot != nil {
					cots[2*n+1] = entCot[s][j-pl]
				}
			}
		}
	}
	gr.lp.invTemp = 1
	if b.Temperature > 0 {
		gr.lp.invTemp = 1 / b.Temperature
	}
	lets := []struct {
		n *G.Node
		v *tensor.Dense
	}{{gr.tokens, gr.tokT}, {gr.targets, gr.tgtT}}
	if gr.cot != nil {
		lets = append(lets, struct {
			n *G.Node
			v *tensor.Dense
		}{gr.cot, gr.cotT})
	}
	for _, l := range lets {
		if err := G.Let(l.n, l.v); err != nil {
			return fmt.Errorf("bind %s: %w", l.n.Name(), err)
		}
	}
	if gr.cot != nil && clearDualGrads {
		// The tape machine adds some parameters' gradients into their dual
		// values across runs instead of overwriting them (seen on the last
		// layers: final norm and LM head), so clear them before each run.
		for _, n := range gr.params {
			if gv, err := n.Grad(); err == nil && gv != nil {
				if d, ok := gv.Data().([]float32); ok {
					clear(d)
				}
			}
		}
	}
	defer gr.vm.Reset()
	if err := gr.vm.RunAll(); err != nil {
		return fmt.Errorf("run graph: %w", err)
	}
	out := gr.out.Data().([]float32)
	for r, s := range seqs {
		seq, pl := b.Tokens[s], b.PromptLen[s]
		lp, ent := make([]float32, len(seq)-pl), make([]float32, len(seq)-pl)
		for j := pl; j < len(seq); j++ {
			n := r*T + j - 1
			lp[j-pl], ent[j-pl] = out[2*n], out[2*n+1]
		}
		res.Logprobs[s], res.Entropy[s] = lp, ent
	}
	if gr.cot == nil {
		return nil
	}
	for i, n := range gr.params {
		gv, err := n.Grad()
		if err != nil {
			return fmt.Errorf("gradient of %s: %w", n.Name(), err)
		}
		gd, ok := gv.Data().([]float32)
		if !ok || len(gd) != len(m.Params[i].G) {
			return fmt.Errorf("gradient of %s: unexpected value %v", n.Name(), gv.Shape())
		}
		dst := m.Params[i].G
		for j, v := range gd {
			dst[j] += v
		}
	}
	return nil
}

func (m *Model) checkBatch(b *Batch, cot [][]float32) error {
	if len(b.Tokens) != len(b.PromptLen) {
		return fmt.Errorf("batch: %d sequences but %d prompt lengths", len(b.Tokens), len(b.PromptLen))
	}
	for i, seq := range b.Tokens {
		pl := b.PromptLen[i]
		if pl < 1 || pl > len(seq) {
			return fmt.Errorf("batch: sequence %d: prompt length %d outside [1, %d]", i, pl, len(seq))
		}
		if len(seq) > m.Cfg.Context {
			return fmt.Errorf("batch: sequence %d: %d tokens exceed context %d", i, len(seq), m.Cfg.Context)
		}
		for _, t := range seq {
			if t < 0 || t >= m.Cfg.VocabSize {
				return fmt.Errorf("batch: sequence %d: token %d outside vocab %d", i, t, m.Cfg.VocabSize)
			}
		}
		if cot != nil && len(cot[i]) != len(seq)-pl {
			return fmt.Errorf("batch: sequence %d: cotangent has %d values for %d completion tokens", i, len(cot[i]), len(seq)-pl)
		}
	}
	if cot != nil && len(cot) != len(b.Tokens) {
		return fmt.Errorf("batch: %d cotangents for %d sequences", len(cot), len(b.Tokens))
	}
	return nil
}

// Logprobs runs the forward pass only: per-completion-token logprobs and
// entropies. Used for the frozen reference and for old-policy logprobs.
func (m *Model) Logprobs(ctx context.Context, b Batch) (*Result, error) {
	return m.pass(ctx, &b, nil, nil)
}

// Backward runs forward and backward of Σ_t logprob_t · cot_t and ADDS the
// parameter gradients into Grads (call ZeroGrad between optimiser steps).
// It returns the same values as Logprobs. The caller owns the loss: cot is
// its derivative with respect to each completion token's logprob (SFT's is
// train.sftBatch).
func (m *Model) Backward(ctx context.Context, b Batch, cot [][]float32) (*Result, error) {
	if cot == nil {
		return nil, fmt.Errorf("model.Backward: nil cotangent")
	}
	return m.pass(ctx, &b, cot, nil)
}

// BackwardEntropy is Backward with an extra cotangent on the per-token
// entropy (an entropy bonus); entCot may be nil.
func (m *Model) BackwardEntropy(ctx context.Context, b Batch, cot, entCot [][]float32) (*Result, error) {
	if cot == nil {
		return nil, fmt.Errorf("model.BackwardEntropy: nil cotangent")
	}
	return m.pass(ctx, &b, cot, entCot)
}

// perGraph is how many sequences padded to T tokens one graph holds:
// MicroBatch, halved while they pass MicroTokens (at least one).
func (m *Model) perGraph(T int) int {
	n := max(1, m.MicroBatch)
	for m.MicroTokens > 0 && n > 1 && n*T > m.MicroTokens {
		n /= 2
	}
	return n
}

func (m *Model) pass(ctx context.Context, b *Batch, cot, entCot [][]float32) (*Result, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.checkBatch(b, cot); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	if entCot != nil {
		if err := m.checkBatch(b, entCot); err != nil {
			return nil, fmt.Errorf("model: entropy %w", err)
		}
	}
	res := &Result{Logprobs: make([][]float32, len(b.Tokens)), Entropy: make([][]float32, len(b.Tokens))}
	// Sort by length so that each micro-batch pads little.
	order := make([]int, len(b.Tokens))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(i, j int) bool { return len(b.Tokens[order[i]]) < len(b.Tokens[order[j]]) })
	mb := max(1, m.MicroBatch)
	for lo := 0; lo < len(order); {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		// Sorted by length: the longest of the next mb sets the bucket.
		n := m.perGraph(m.Cfg.BucketT(len(b.Tokens[order[min(lo+mb, len(order))-1]])))
		seqs := order[lo:min(lo+n, len(order))]
		lo += len(seqs)
		B := 1
		for B < len(seqs) {
			B *= 2
		}
		B = min(B, n)
		gr, err := m.graphFor(B, m.Cfg.BucketT(len(b.Tokens[seqs[len(seqs)-1]])), cot != nil)
		if err != nil {
			return nil, err
		}
		if err := gr.run(m, b, seqs, cot, entCot, res); err != nil {
			return nil, fmt.Errorf("model: %w", err)
		}
	}
	return res, nil
}
