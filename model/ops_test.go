package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// opCase is one hand-built op under a finite-difference check: inputs with
// shapes, the gorgonia construction, and an independent float64 function.
type opCase struct {
	name   string
	shapes [][]int
	build  func(in G.Nodes) (*G.Node, error)
	ref    func(in [][]float64) []float64
	// fixed marks inputs that are not differentiated (ids).
	fixed []bool
	init  func(i int, r *rand.Rand) float64
}

// gradOf runs the op in gorgonia and returns ∂Σ(out∘R)/∂input, with R random.
func gradOf(t *testing.T, c opCase, vals [][]float32, R []float32) (out []float32, grads [][]float32) {
	t.Helper()
	g := G.NewGraph()
	var nodes, wrt G.Nodes
	for i, s := range c.shapes {
		v := tensor.New(tensor.WithShape(s...), tensor.WithBacking(vals[i]))
		n := G.NewTensor(g, tensor.Float32, len(s), G.WithShape(s...), G.WithValue(v), G.WithName(string(rune('a'+i))))
		nodes = append(nodes, n)
		if i >= len(c.fixed) || !c.fixed[i] {
			wrt = append(wrt, n)
		}
	}
	y, err := c.build(nodes)
	if err != nil {
		t.Fatal(err)
	}
	rt := tensor.New(tensor.WithShape(y.Shape()...), tensor.WithBacking(R))
	rn := G.NewTensor(g, tensor.Float32, y.Dims(), G.WithShape(y.Shape()...), G.WithValue(rt), G.WithName("R"))
	var yv G.Value
	G.Read(y, &yv)
	cost := G.Must(G.Sum(G.Must(G.HadamardProd(y, rn))))
	if _, err := G.Grad(cost, wrt...); err != nil {
		t.Fatal(err)
	}
	vm := G.NewTapeMachine(g, G.BindDualValues(wrt...))
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		t.Fatal(err)
	}
	out = append(out, yv.Data().([]float32)...)
	for _, n := range wrt {
		gv, err := n.Grad()
		if err != nil {
			t.Fatal(err)
		}
		grads = append(grads, append([]float32(nil), gv.Data().([]float32)...))
	}
	return out, grads
}

func checkOp(t *testing.T, c opCase) {
	r := rand.New(rand.NewPCG(11, 12))
	vals := make([][]float32, len(c.shapes))
	for i, s := range c.shapes {
		vals[i] = make([]float32, prod(s))
		for j := range vals[i] {
			if c.init != nil {
				vals[i][j] = float32(c.init(i, r))
			} else {
				vals[i][j] = float32(r.NormFloat64())
			}
		}
	}
	in64 := make([][]float64, len(vals))
	for i := range vals {
		in64[i] = f64s(vals[i])
	}
	want := c.ref(in64)
	R := make([]float32, len(want))
	for i := range R {
		R[i] = float32(r.NormFloat64())
	}
	out, grads := gradOf(t, c, vals, R)
	for i := range want {
		if math.Abs(float64(out[i])-want[i]) > 1e-4*(1+math.Abs(want[i])) {
			t.Fatalf("%s: output %d = %v, float64 reference %v", c.name, i, out[i], want[i])
		}
	}
	obj := func() float64 {
		var s float64
		for i, v := range c.ref(in64) {
			s += v * float64(R[i])
		}
		return s
	}
	const h = 1e-6
	gi := 0
	for i := range vals {
		if i < len(c.fixed) && c.fixed[i] {
			continue
		}
		for j := range in64[i] {
			o := in64[i][j]
			in64[i][j] = o + h
			up := obj()
			in64[i][j] = o - h
			down := obj()
			in64[i][j] = o
			fd := (up - down) / (2 * h)
			if got := float64(grads[gi][j]); math.Abs(got-fd) > 1e-3*(1+math.Abs(fd)) {
				t.Errorf("%s: ∂/∂input%d[%d] = %.6g, finite difference %.6g", c.name, i, j, got, fd)
			}
		}
		gi++
	}
}

func TestOpGradientsFiniteDifference(t *testing.T) {
	const N, D, eps = 6, 8, 1e-6
	as := attnShape{B: 2, T: 5, H: 4, KVH: 2, HD: 4}
	tab := newRopeTable(4, 16, 10000)
	lp := &logprobOp{invTemp: 1 / 0.7}
	cases := []opCase{
		{name: "RMSNorm", shapes: [][]int{{N, D}, {D}},
			build: func(in G.Nodes) (*G.Node, error) { return rmsNorm(in[0], in[1], eps) },
			ref:   func(in [][]float64) []float64 { return rms64(in[0], in[1], D, eps) }},
		{name: "RoPE", shapes: [][]int{{N, 8}},
			build: func(in G.Nodes) (*G.Node, error) { return rope(in[0], tab, 3) },
			ref:   func(in [][]float64) []float64 { return rope64(in[0], 8, 4, 3, 10000) }},
		{name: "AddBias", shapes: [][]int{{N, D}, {D}},
			build: func(in G.Nodes) (*G.Node, error) { return addBias(in[0], in[1]) },
			ref: func(in [][]float64) []float64 {
				y := append([]float64(nil), in[0]...)
				addRow64(y, in[1])
				return y
			}},
		{name: "SwiGLU", shapes: [][]int{{N, D}, {N, D}},
			build: func(in G.Nodes) (*G.Node, error) { return swiGLU(in[0], in[1]) },
			ref: func(in [][]float64) []float64 {
				y := make([]float64, len(in[0]))
				for i, a := range in[0] {
					y[i] = silu64(a) * in[1][i]
				}
				return y
			}},
		{name: "CausalAttention-GQA", shapes: [][]int{{as.B * as.T, as.H * as.HD}, {as.B * as.T, as.KVH * as.HD}, {as.B * as.T, as.KVH * as.HD}},
			build: func(in G.Nodes) (*G.Node, error) { return attention(in[0], in[1], in[2], as, true) },
			ref:   func(in [][]float64) []float64 { return attn64(in[0], in[1], in[2], as) }},
		{name: "ChosenLogprob", shapes: [][]int{{N, 7}, {N}}, fixed: []bool{false, true},
			init: func(i int, r *rand.Rand) float64 {
				if i == 1 {
					return float64(r.IntN(8) - 1) // −1 marks a skipped row
				}
				return 2 * r.NormFloat64()
			},
			build: func(in G.Nodes) (*G.Node, error) { return lp.node(in[0], in[1]) },
			ref: func(in [][]float64) []float64 {
				t := make([]int, len(in[1]))
				for i, v := range in[1] {
					t[i] = int(v)
				}
				l, e := logprob64(in[0], t, 7, 0.7)
				out := make([]float64, 0, 2*len(t))
				for i := range t {
					out = append(out, l[i], e[i])
				}
				return out
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { checkOp(t, c) })
	}
	// The same attention with query blocks smaller than T (2 rows, and 3
	// rows so that the last block is short).
	for _, blk := range []int{2, 3} {
		t.Run(fmt.Sprintf("CausalAttention-block%d", blk), func(t *testing.T) {
			defer func(old int) { attnBlock = old }(attnBlock)
			attnBlock = blk
			checkOp(t, cases[4])
		})
	}
}
