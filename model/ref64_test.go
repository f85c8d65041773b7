package model

import "math"

// An independent float64 implementation of the model, written as plain loops
// straight from the Llama equations. Tests use it for finite differences
// (exact enough in float64) and as a second opinion on the forward pass.

type ref64 struct {
	cfg Config
	w   map[string][]float64
}

func newRef64(m *Model) *ref64 {
	r := &ref64{cfg: m.Cfg, w: map[string][]float64{}}
	for _, p := range m.Params {
		r.w[p.Name] = f64s(p.W)
	}
	return r
}

func f64s(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

func rms64(x, w []float64, d int, eps float64) []float64 {
	y := make([]float64, len(x))
	for n := 0; n < len(x)/d; n++ {
		var ss float64
		for j := 0; j < d; j++ {
			ss += x[n*d+j] * x[n*d+j]
		}
		r := 1 / math.Sqrt(ss/float64(d)+eps)
		for j := 0; j < d; j++ {
			y[n*d+j] = x[n*d+j] * r * w[j]
		}
	}
	return y
}

// matmul64: x [n, in] @ w [in, out].
func matmul64(x, w []float64, in, out int) []float64 {
	n := len(x) / in
	y := make([]float64, n*out)
	for i := 0; i < n; i++ {
		for k := 0; k < in; k++ {
			a := x[i*in+k]
			for j := 0; j < out; j++ {
				y[i*out+j] += a * w[k*out+j]
			}
		}
	}
	return y
}

// rope64 rotates pairs (i, i+hd/2) of each head by pos·θ^(−2i/hd).
func rope64(x []float64, width, hd, T int, theta float64) []float64 {
	y := append([]float64(nil), x...)
	half := hd / 2
	for n := 0; n < len(x)/width; n++ {
		pos := float64(n % T)
		for h := 0; h < width/hd; h++ {
			o := n*width + h*hd
			for i := 0; i < half; i++ {
				a := pos * math.Pow(theta, -float64(2*i)/float64(hd))
				c, s := math.Cos(a), math.Sin(a)
				x1, x2 := x[o+i], x[o+i+half]
				y[o+i] = x1*c - x2*s
				y[o+i+half] = x2*c + x1*s
			}
		}
	}
	return y
}

func attn64(q, k, v []float64, s attnShape) []float64 {
	T, HD := s.T, s.HD
	qw, kw := s.H*HD, s.KVH*HD
	out := make([]float64, len(q))
	for b := 0; b < s.B; b++ {
		for h := 0; h < s.H; h++ {
			kh := h / (s.H / s.KVH)
			for i := 0; i < T; i++ {
				sc := make([]float64, i+1)
				mx := math.Inf(-1)
				for j := 0; j <= i; j++ {
					var d float64
					for e := 0; e < HD; e++ {
						d += q[(b*T+i)*qw+h*HD+e] * k[(b*T+j)*kw+kh*HD+e]
					}
					sc[j] = d / math.Sqrt(float64(HD))
					mx = math.Max(mx, sc[j])
				}
				var z float64
				for j := range sc {
					sc[j] = math.Exp(sc[j] - mx)
					z += sc[j]
				}
				for j := range sc {
					for e := 0; e < HD; e++ {
						out[(b*T+i)*qw+h*HD+e] += sc[j] / z * v[(b*T+j)*kw+kh*HD+e]
					}
				}
			}
		}
	}
	return out
}

// logprob64 returns (log softmax(z/τ)[t], entropy) per row; t<0 rows give 0.
func logprob64(z []float64, t []int, v int, temp float64) (lp, ent []float64) {
	lp, ent = make([]float64, len(t)), make([]float64, len(t))
	for n, tt := range t {
		if tt < 0 {
			continue
		}
		row := z[n*v : (n+1)*v]
		mx := math.Inf(-1)
		for _, x := range row {
			mx = math.Max(mx, x/temp)
		}
		var s float64
		for _, x := range row {
			s += math.Exp(x/temp - mx)
		}
		lse := mx + math.Log(s)
		lp[n] = row[tt]/temp - lse
		for _, x := range row {
			l := x/temp - lse
			ent[n] -= math.Exp(l) * l
		}
	}
	return lp, ent
}

func silu64(x float64) float64 { return x / (1 + math.Exp(-x)) }

// logits returns [B·T, V] for tokens packed [B, T].
func (r *ref64) logits(tokens []int, B, T int) []float64 {
	c := r.cfg
	d, hd := c.DModel, c.HeadDim
	qd, kvd := c.Heads*hd, c.KVHeads*hd
	x := make([]float64, len(tokens)*d)
	emb := r.w["model.embed_tokens.weight"]
	for n, t := range tokens {
		copy(x[n*d:(n+1)*d], emb[t*d:(t+1)*d])
	}
	as := attnShape{B: B, T: T, H: c.Heads, KVH: c.KVHeads, HD: hd}
	for i := 0; i < c.Layers; i++ {
		w := func(s string) []float64 { return r.w["model.layers."+itoa(i)+"."+s] }
		h := rms64(x, w("input_layernorm.weight"), d, c.NormEps)
		q := matmul64(h, w("self_attn.q_proj.weight"), d, qd)
		k := matmul64(h, w("self_attn.k_proj.weight"), d, kvd)
		v := matmul64(h, w("self_attn.v_proj.weight"), d, kvd)
		if c.AttnBias {
			addRow64(q, w("self_attn.q_proj.bias"))
			addRow64(k, w("self_attn.k_proj.bias"))
			addRow64(v, w("self_attn.v_proj.bias"))
		}
		q, k = rope64(q, qd, hd, T, c.RopeTheta), rope64(k, kvd, hd, T, c.RopeTheta)
		a := matmul64(attn64(q, k, v, as), w("self_attn.o_proj.weight"), qd, d)
		for j := range x {
			x[j] += a[j]
		}
		h = rms64(x, w("post_attention_layernorm.weight"), d, c.NormEps)
		g := matmul64(h, w("mlp.gate_proj.weight"), d, c.DFF)
		u := matmul64(h, w("mlp.up_proj.weight"), d, c.DFF)
		for j := range g {
			g[j] = silu64(g[j]) * u[j]
		}
		f := matmul64(g, w("mlp.down_proj.weight"), c.DFF, d)
		for j := range x {
			x[j] += f[j]
		}
	}
	x = rms64(x, r.w["model.norm.weight"], d, c.NormEps)
	return matmul64(x, r.w["lm_head.weight"], d, c.VocabSize)
}

func addRow64(x, b []float64) {
	for i := range x {
		x[i] += b[i%len(b)]
	}
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}

// objective is Σ cot·logprob over completion tokens of a batch, in float64.
func (r *ref64) objective(b Batch, cot [][]float32) float64 {
	temp := float64(b.Temperature)
	if temp == 0 {
		temp = 1
	}
	var total float64
	for i, seq := range b.Tokens {
		T := len(seq)
		z := r.logits(seq, 1, T)
		t := make([]int, T)
		for j := range t {
			t[j] = -1
		}
		pl := b.PromptLen[i]
		for j := pl; j < T; j++ {
			t[j-1] = seq[j]
		}
		lp, _ := logprob64(z, t, r.cfg.VocabSize, temp)
		for j := pl; j < T; j++ {
			total += float64(cot[i][j-pl]) * lp[j-1]
		}
	}
	return total
}
