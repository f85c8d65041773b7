package model

import (
	"fmt"
	"hash"
	"hash/fnv"
	"math"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/swetui/swetui/internal/vec"
)

// Fused float32 ops for gorgonia. Each is a small kernel with its own
// symbolic gradient, written because gorgonia lacks norms, RoPE, SiLU and
// cross-entropy, and because its SoftMax/LogSoftMax can return NaN and its
// ByIndices gradient is wrong off axis 0 (docs/ARCHITECTURE.md §9). Every
// op owns its output buffer and rewrites it whole in Do, so the tape
// machine may reuse that buffer for other registers between runs.

// kop is the common part of our ops: a name, the input ranks, an output
// shape rule and a forward kernel over raw float32 slices.
type kop struct {
	name    string
	inDims  []int
	outDims int
	shape   func(in []tensor.Shape) tensor.Shape
	fwd     func(in [][]float32, out []float32)
	// grads builds the gradient nodes for each input (nil entries mean the
	// input is not differentiated).
	grads func(in G.Nodes, out, grad *G.Node) (G.Nodes, error)
	// noGrad marks inputs that are not differentiated (e.g. target ids).
	noGrad []bool

	buf *tensor.Dense
}

func (o *kop) Arity() int { return len(o.inDims) }

func (o *kop) Type() hm.Type {
	ts := make([]hm.Type, 0, len(o.inDims)+1)
	for _, d := range o.inDims {
		ts = append(ts, G.TensorType{Dims: d, Of: tensor.Float32})
	}
	ts = append(ts, G.TensorType{Dims: o.outDims, Of: tensor.Float32})
	return hm.NewFnType(ts...)
}

func (o *kop) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	ss := make([]tensor.Shape, len(in))
	for i, d := range in {
		s, ok := d.(tensor.Shape)
		if !ok {
			return nil, fmt.Errorf("%s: input %d has no shape", o.name, i)
		}
		ss[i] = s
	}
	return o.shape(ss), nil
}

func (o *kop) Do(vals ...G.Value) (G.Value, error) {
	if len(vals) != len(o.inDims) {
		return nil, fmt.Errorf("%s: got %d inputs, want %d", o.name, len(vals), len(o.inDims))
	}
	in := make([][]float32, len(vals))
	shapes := make([]tensor.Shape, len(vals))
	for i, v := range vals {
		d, ok := v.(*tensor.Dense)
		if !ok {
			return nil, fmt.Errorf("%s: input %d is %T, want *tensor.Dense", o.name, i, v)
		}
		if d.IsView() {
			return nil, fmt.Errorf("%s: input %d is a view; ops need contiguous tensors", o.name, i)
		}
		f, ok := d.Data().([]float32)
		if !ok {
			return nil, fmt.Errorf("%s: input %d has dtype %v, want float32", o.name, i, d.Dtype())
		}
		in[i], shapes[i] = f, d.Shape()
	}
	s := o.shape(shapes)
	if o.buf == nil || !o.buf.Shape().Eq(s) {
		o.buf = tensor.New(tensor.WithShape(s...), tensor.Of(tensor.Float32))
	}
	o.fwd(in, o.buf.Data().([]float32))
	return o.buf, nil
}

func (o *kop) ReturnsPtr() bool      { return false }
func (o *kop) CallsExtern() bool     { return false }
func (o *kop) OverwritesInput() int  { return -1 }
func (o *kop) String() string        { return o.name }
func (o *kop) WriteHash(h hash.Hash) { fmt.Fprintf(h, "%s@%p", o.name, o) } // unique per instance: never merged
func (o *kop) Hashcode() uint32 {
	h := fnv.New32a()
	o.WriteHash(h)
	return h.Sum32()
}

func (o *kop) DiffWRT(n int) []bool {
	w := make([]bool, n)
	if o.grads == nil {
		return w
	}
	for i := range w {
		w[i] = i >= len(o.noGrad) || !o.noGrad[i]
	}
	return w
}

func (o *kop) SymDiff(in G.Nodes, out, grad *G.Node) (G.Nodes, error) {
	if o.grads == nil {
		return nil, fmt.Errorf("%s: not differentiable", o.name)
	}
	return o.grads(in, out, grad)
}

func same(i int) func([]tensor.Shape) tensor.Shape {
	return func(s []tensor.Shape) tensor.Shape { return s[i].Clone() }
}

func apply(o *kop, in ...*G.Node) (*G.Node, error) {
	n, err := G.ApplyOp(o, in...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.name, err)
	}
	return n, nil
}

// RMSNorm: y = x · w / sqrt(mean(x²) + eps), x [N, D], w [D] -> [N, D].
func rmsNorm(x, w *G.Node, eps float64) (*G.Node, error) {
	o := &kop{name: "RMSNorm", inDims: []int{2, 1}, outDims: 2, shape: same(0),
		fwd: func(in [][]float32, out []float32) { rmsNormRows(out, in[0], in[1], eps) }}
	o.grads = func(in G.Nodes, _, g *G.Node) (G.Nodes, error) {
		dx, err := apply(&kop{name: "RMSNormDX", inDims: []int{2, 1, 2}, outDims: 2, shape: same(0),
			fwd: func(in [][]float32, out []float32) { rmsNormDX(out, in[0], in[1], in[2], eps) }}, in[0], in[1], g)
		if err != nil {
			return nil, err
		}
		dw, err := apply(&kop{name: "RMSNormDW", inDims: []int{2, 2}, outDims: 1,
			shape: func(s []tensor.Shape) tensor.Shape { return tensor.Shape{s[0][1]} },
			fwd:   func(in [][]float32, out []float32) { rmsNormDW(out, in[0], in[1], eps) }}, in[0], g)
		if err != nil {
			return nil, err
		}
		return G.Nodes{dx, dw}, nil
	}
	return apply(o, x, w)
}

// dx = r·(g∘w) − x·r³/D·Σ_j g_j w_j x_j per row.
func rmsNormDX(dx, x, w, g []float32, eps float64) {
	d := len(w)
	parallelFor(len(x)/d, func(lo, hi int) {
		for n := lo; n < hi; n++ {
			xr, gr, dr := x[n*d:(n+1)*d], g[n*d:(n+1)*d], dx[n*d:(n+1)*d]
			r := rmsInv(xr, eps)
			var dot float64
			for j := range xr {
				dot += float64(gr[j]) * float64(w[j]) * float64(xr[j])
			}
			c := float32(dot) * r * r * r / float32(d)
			for j := range xr {
				dr[j] = r*gr[j]*w[j] - xr[j]*c
			}
		}
	})
}

// dw_j = Σ_n g_nj x_nj r_n.
func rmsNormDW(dw, x, g []float32, eps float64) {
	d := len(dw)
	clear(dw)
	for n := 0; n < len(x)/d; n++ {
		xr, gr := x[n*d:(n+1)*d], g[n*d:(n+1)*d]
		r := rmsInv(xr, eps)
		for j := range dw {
			dw[j] += gr[j] * xr[j] * r
		}
	}
}

// addBias: y = x + b, x [N, C], b [C].
func addBias(x, b *G.Node) (*G.Node, error) {
	o := &kop{name: "AddBias", inDims: []int{2, 1}, outDims: 2, shape: same(0),
		fwd: func(in [][]float32, out []float32) {
			c := len(in[1])
			for i, v := range in[0] {
				out[i] = v + in[1][i%c]
			}
		}}
	o.grads = func(in G.Nodes, _, g *G.Node) (G.Nodes, error) {
		db, err := apply(&kop{name: "ColSum", inDims: []int{2}, outDims: 1,
			shape: func(s []tensor.Shape) tensor.Shape { return tensor.Shape{s[0][1]} },
			fwd: func(in [][]float32, out []float32) {
				clear(out)
				c := len(out)
				for i, v := range in[0] {
					out[i%c] += v
				}
			}}, g)
		if err != nil {
			return nil, err
		}
		return G.Nodes{g, db}, nil
	}
	return apply(o, x, b)
}

// RoPE over x [B·T, heads·headDim]: row n is position n mod T (sequences are
// packed from position 0).
func rope(x *G.Node, tab *ropeTable, T int) (*G.Node, error) {
	mk := func(name string, sign float32) *kop {
		return &kop{name: name, inDims: []int{2}, outDims: 2, shape: same(0),
			fwd: func(in [][]float32, out []float32) {
				copy(out, in[0])
				w := x.Shape()[1]
				parallelFor(len(out)/w, func(lo, hi int) {
					for n := lo; n < hi; n++ {
						tab.rotate(out[n*w:(n+1)*w], n%T, sign)
					}
				})
			}}
	}
	o := mk("RoPE", 1)
	o.grads = func(_ G.Nodes, _, g *G.Node) (G.Nodes, error) {
		dx, err := apply(mk("RoPEInv", -1), g) // a rotation's adjoint is its inverse
		return G.Nodes{dx}, err
	}
	return apply(o, x)
}

// swiGLU: y = silu(a) ∘ b, a, b [N, F].
func swiGLU(a, b *G.Node) (*G.Node, error) {
	o := &kop{name: "SwiGLU", inDims: []int{2, 2}, outDims: 2, shape: same(0),
		fwd: func(in [][]float32, out []float32) {
			parallelChunks(len(out), func(lo, hi int) { vec.SiLUMul(out[lo:hi], in[0][lo:hi], in[1][lo:hi]) })
		}}
	o.grads = func(in G.Nodes, _, g *G.Node) (G.Nodes, error) {
		da, err := apply(&kop{name: "SwiGLUDA", inDims: []int{2, 2, 2}, outDims: 2, shape: same(0),
			fwd: func(in [][]float32, out []float32) {
				parallelChunks(len(out), func(lo, hi int) {
					vec.SiLUMulGradA(out[lo:hi], in[0][lo:hi], in[1][lo:hi], in[2][lo:hi])
				})
			}}, in[0], in[1], g)
		if err != nil {
			return nil, err
		}
		db, err := apply(&kop{name: "SwiGLUDB", inDims: []int{2, 2}, outDims: 2, shape: same(0),
			fwd: func(in [][]float32, out []float32) {
				parallelChunks(len(out), func(lo, hi int) { vec.SiLUMulGradB(out[lo:hi], in[0][lo:hi], in[1][lo:hi]) })
			}}, in[0], g)
		if err != nil {
			return nil, err
		}
		return G.Nodes{da, db}, nil
	}
	return apply(o, a, b)
}

// attnShape describes packed causal attention over B sequences of length T.
type attnShape struct{ B, T, H, KVH, HD int }

// attention: softmax(q kᵀ/√d + causal mask) v per head, with grouped-query
// heads (head h reads kv head h/(H/KVH)). q [B·T, H·HD], k, v [B·T, KVH·HD]
// -> [B·T, H·HD]. The causal mask alone handles right padding. The training
// variant keeps the probabilities for the backward pass.
func attention(q, k, v *G.Node, s attnShape, keep bool) (*G.Node, error) {
	var probs []float32 // [B, H, T, T] when keep
	if keep {
		probs = make([]float32, s.B*s.H*s.T*s.T)
	}
	fwd := &kop{name: "CausalAttention", inDims: []int{2, 2, 2}, outDims: 2, shape: same(0),
		fwd: func(in [][]float32, out []float32) { attnForward(s, in[0], in[1], in[2], out, probs) }}
	if !keep {
		return apply(fwd, q, k, v)
	}
	fwd.grads = func(in G.Nodes, out, g *G.Node) (G.Nodes, error) {
		var dk, dv []float32
		dq, err := apply(&kop{name: "CausalAttentionDQ", inDims: []int{2, 2, 2, 2, 2}, outDims: 2, shape: same(0),
			fwd: func(in [][]float32, out []float32) {
				if dk == nil {
					dk, dv = make([]float32, len(in[1])), make([]float32, len(in[2]))
				}
				attnBackward(s, in[0], in[1], in[2], probs, in[4], out, dk, dv)
			}}, in[0], in[1], in[2], out, g)
		if err != nil {
			return nil, err
		}
		// dk and dv come out of the same pass: these ops only copy them,
		// and take dq as an input so that they run after it.
		pick := func(name string, src *[]float32) *kop {
			return &kop{name: name, inDims: []int{2, 2}, outDims: 2, shape: same(0),
				fwd: func(_ [][]float32, out []float32) { copy(out, *src) }}
		}
		dkn, err := apply(pick("CausalAttentionDK", &dk), in[1], dq)
		if err != nil {
			return nil, err
		}
		dvn, err := apply(pick("CausalAttentionDV", &dv), in[2], dq)
		if err != nil {
			return nil, err
		}
		return G.Nodes{dq, dkn, dvn}, nil
	}
	return apply(fwd, q, k, v)
}

// attnBlock is the query-block size of the causal attention kernels: a
// block of rows only meets the keys up to its last row, which skips most of
// the masked upper triangle (about 44% of the work at T=1024).
var attnBlock = 128

func attnForward(s attnShape, q, k, v, out, probs []float32) {
	T, HD := s.T, s.HD
	qw, kw := s.H*HD, s.KVH*HD
	group := s.H / s.KVH
	scale := float32(1 / math.Sqrt(float64(HD)))
	blk := attnBlock
	parallelFor(s.B*s.H, func(lo, hi int) {
		var scratch []float32
		for bh := lo; bh < hi; bh++ {
			b, h := bh/s.H, bh%s.H
			var p []float32 // [T, T]; row i is valid on [0, i]
			if probs != nil {
				p = probs[bh*T*T : (bh+1)*T*T]
			} else {
				if scratch == nil {
					scratch = make([]float32, T*T)
				}
				p = scratch
			}
			qo, ko := b*T*qw+h*HD, b*T*kw+(h/group)*HD
			for i0 := 0; i0 < T; i0 += blk {
				i1 := min(i0+blk, T)
				gemm1(false, true, i1-i0, i1, HD, scale, q[qo+i0*qw:], qw, k[ko:], kw, 0, p[i0*T:], T)
				for i := i0; i < i1; i++ {
					row := p[i*T : i*T+i1]
					softmaxRow(row[:i+1])
					clear(row[i+1:])
				}
				gemm1(false, false, i1-i0, HD, i1, 1, p[i0*T:], T, v[ko:], kw, 0, out[qo+i0*qw:], qw)
			}
		}
	})
}

// attnBackward: dV = Pᵀ dO, dP = dO Vᵀ, dS = P∘(dP − rowsum(P∘dP))/√d,
// dQ = dS K, dK = dSᵀ Q, by query blocks as in the forward pass. Work is
// split by (sequence, kv head) so that the heads sharing a kv head
// accumulate into it without races.
func attnBackward(s attnShape, q, k, v, probs, dout, dq, dk, dv []float32) {
	T, HD := s.T, s.HD
	qw, kw := s.H*HD, s.KVH*HD
	group := s.H / s.KVH
	scale := float32(1 / math.Sqrt(float64(HD)))
	blk := attnBlock
	clear(dk)
	clear(dv)
	parallelFor(s.B*s.KVH, func(lo, hi int) {
		dp := make([]float32, min(blk, T)*T)
		for bk := lo; bk < hi; bk++ {
			b, kh := bk/s.KVH, bk%s.KVH
			ko := b*T*kw + kh*HD
			for h := kh * group; h < (kh+1)*group; h++ {
				qo := b*T*qw + h*HD
				p := probs[(b*s.H+h)*T*T : (b*s.H+h+1)*T*T]
				for i0 := 0; i0 < T; i0 += blk {
					i1 := min(i0+blk, T)
					R := i1 - i0
					pb := p[i0*T:]
					gemm1(true, false, i1, HD, R, 1, pb, T, dout[qo+i0*qw:], qw, 1, dv[ko:], kw)
					gemm1(false, true, R, i1, HD, 1, dout[qo+i0*qw:], qw, v[ko:], kw, 0, dp, i1)
					for r := 0; r < R; r++ {
						i := i0 + r
						pr, dr := p[i*T:i*T+i+1], dp[r*i1:(r+1)*i1]
						var dot float32
						for j, pv := range pr {
							dot += pv * dr[j]
						}
						for j, pv := range pr {
							dr[j] = pv * (dr[j] - dot) * scale
						}
						clear(dr[i+1:])
					}
					gemm1(false, false, R, HD, i1, 1, dp, i1, k[ko:], kw, 0, dq[qo+i0*qw:], qw)
					gemm1(true, false, i1, HD, R, 1, dp, i1, q[qo+i0*qw:], qw, 1, dk[ko:], kw)
				}
			}
		}
	})
}

// logprobOp: for logits z [N, V] and targets t [N] (float-coded token ids,
// −1 to skip a row) it returns [N, 2]: log softmax(z/τ)[t] and the entropy of
// softmax(z/τ). Fused so that no NaN-prone SoftMax or wrong-gradient
// ByIndices is involved, and the [N, V] log-probabilities never materialise.
type logprobOp struct {
	invTemp float32 // 1/τ, set per run
	// Per-row log-sum-exp of z/τ and entropy from the forward pass, which
	// the backward pass of the same run reuses.
	lse, ent []float32
}

func (l *logprobOp) node(z, t *G.Node) (*G.Node, error) {
	o := &kop{name: "ChosenLogprob", inDims: []int{2, 1}, outDims: 2,
		shape:  func(s []tensor.Shape) tensor.Shape { return tensor.Shape{s[0][0], 2} },
		fwd:    func(in [][]float32, out []float32) { l.forward(in[0], in[1], out) },
		noGrad: []bool{false, true}}
	o.grads = func(in G.Nodes, _, g *G.Node) (G.Nodes, error) {
		dz, err := apply(&kop{name: "ChosenLogprobDZ", inDims: []int{2, 1, 2}, outDims: 2, shape: same(0),
			fwd: func(in [][]float32, out []float32) { l.backward(in[0], in[1], in[2], out) }}, in[0], in[1], g)
		return G.Nodes{dz, nil}, err
	}
	return apply(o, z, t)
}

func (l *logprobOp) forward(z, t, out []float32) {
	n := len(t)
	v := len(z) / n
	if len(l.lse) != n {
		l.lse, l.ent = make([]float32, n), make([]float32, n)
	}
	parallelFor(n, func(lo, hi int) {
		scratch := make([]float32, v)
		for i := lo; i < hi; i++ {
			if t[i] < 0 {
				out[2*i], out[2*i+1] = 0, 0
				continue
			}
			lp, ent, lse := rowLogprob(z[i*v:(i+1)*v], int(t[i]), l.invTemp, scratch)
			out[2*i], out[2*i+1] = float32(lp), float32(ent)
			l.lse[i], l.ent[i] = float32(lse), float32(ent)
		}
	})
}

// dz_k = [g_lp·(δ_kt − p_k) − g_ent·p_k·(log p_k + H)] / τ, with
// log p_k = z_k/τ − lse: one pass of p_k·(a + b·z_k) from the forward
// pass's lse and H.
func (l *logprobOp) backward(z, t, g, dz []float32) {
	n := len(t)
	v := len(z) / n
	it := l.invTemp
	parallelFor(n, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			d := dz[i*v : (i+1)*v]
			gl, ge := g[2*i], g[2*i+1]
			if t[i] < 0 || (gl == 0 && ge == 0) {
				clear(d)
				continue
			}
			lse, h := l.lse[i], l.ent[i]
			vec.ExpAffine(d, z[i*v:(i+1)*v], it, lse, it*(-gl-ge*(h-lse)), -ge*it*it)
			d[int(t[i])] += gl * it
		}
	})
}
