package cuda

import (
	"fmt"
	"math"
	"slices"
	"unsafe"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"

	"github.com/swetui/swetui/internal/par"
)

// CPU is the kernel list in plain Go over host memory. It is the reference
// the CUDA kernels are checked against and what CI runs the engine's
// orchestration on. Its bf16 tensors are float32 words that hold
// bf16-rounded values wherever a value is set from outside a kernel
// (Upload, Cast): weights kept in bf16 are exactly the GPU's, while the
// kernels compute and keep activations in fp32.
type CPU struct{}

// NewCPU returns the CPU device.
func NewCPU() *CPU { return &CPU{} }

var _ Device = (*CPU)(nil)

// Info implements Device.
func (*CPU) Info() Info { return Info{Name: "cpu", Kind: "cpu"} }

// Alloc implements Device.
func (*CPU) Alloc(dt DType, n int) (Tensor, error) {
	if n == 0 {
		return Tensor{DT: dt}, nil
	}
	buf := make([]float32, n) // int32 shares the 4-byte layout
	return Tensor{DT: dt, N: n, h: unsafe.Pointer(&buf[0])}, nil
}

// Free implements Device; the garbage collector owns host memory.
func (*CPU) Free(Tensor) {}

// Upload implements Device.
func (*CPU) Upload(t Tensor, src any) error {
	switch s := src.(type) {
	case []float32:
		if t.DT != F32 && t.DT != BF16 || len(s) != t.N {
			return fmt.Errorf("cpu upload: %d float32 into %v[%d]", len(s), t.DT, t.N)
		}
		copy(t.f32(), s)
		roundBF16(t)
	case []int32:
		if t.DT != I32 || len(s) != t.N {
			return fmt.Errorf("cpu upload: %d int32 into %v[%d]", len(s), t.DT, t.N)
		}
		copy(t.i32(), s)
	default:
		return fmt.Errorf("cpu upload: unsupported %T", src)
	}
	return nil
}

// Download implements Device.
func (*CPU) Download(dst any, t Tensor) error {
	switch d := dst.(type) {
	case []float32:
		if t.DT != F32 && t.DT != BF16 || len(d) != t.N {
			return fmt.Errorf("cpu download: %v[%d] into %d float32", t.DT, t.N, len(d))
		}
		copy(d, t.f32())
	case []int32:
		if t.DT != I32 || len(d) != t.N {
			return fmt.Errorf("cpu download: %v[%d] into %d int32", t.DT, t.N, len(d))
		}
		copy(d, t.i32())
	default:
		return fmt.Errorf("cpu download: unsupported %T", dst)
	}
	return nil
}

// words is a tensor's memory as 4-byte words, whatever its type.
func (t Tensor) words() []float32 {
	if t.N == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(t.h), t.N)
}

// Copy implements Device.
func (*CPU) Copy(dst, src Tensor) {
	if dst.N != src.N || dst.DT != src.DT {
		panic(fmt.Sprintf("cuda: copy %v[%d] into %v[%d]", src.DT, src.N, dst.DT, dst.N))
	}
	copy(dst.words(), src.words())
}

// Zero implements Device.
func (*CPU) Zero(t Tensor) { clear(t.words()) }

// Do implements Device: the CPU has no context to make current.
func (*CPU) Do(fn func() error) error { return fn() }

// Close implements Device.
func (*CPU) Close() error { return nil }

var sgemm = gonum.Implementation{}

// Gemm implements Kernels (gonum's BLAS is row-major, like ours).
func (*CPU) Gemm(tA, tB bool, m, n, k int, alpha float32, a Tensor, lda int, b Tensor, ldb int, beta float32, c Tensor, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	ta, tb := blas.NoTrans, blas.NoTrans
	ar, ac := m, k
	if tA {
		ta, ar, ac = blas.Trans, k, m
	}
	br, bc := k, n
	if tB {
		tb, br, bc = blas.Trans, n, k
	}
	// gonum checks slice lengths against the shapes: pass exactly what
	// the matrices span.
	as := a.f32()[:lda*(ar-1)+ac]
	bs := b.f32()[:ldb*(br-1)+bc]
	cs := c.f32()[:ldc*(m-1)+n]
	if k == 0 {
		for i := 0; i < m; i++ {
			row := cs[i*ldc : i*ldc+n]
			for j := range row {
				row[j] *= beta
			}
		}
		return
	}
	sgemm.Sgemm(ta, tb, m, n, k, alpha, as, lda, bs, ldb, beta, cs, ldc)
}

// Embed implements Kernels.
func (*CPU) Embed(x, table, tok Tensor, n, d int) {
	xs, ts, ids := x.f32(), table.f32(), tok.i32()
	for i := 0; i < n; i++ {
		t := int(ids[i])
		copy(xs[i*d:(i+1)*d], ts[t*d:(t+1)*d])
	}
}

// EmbedBackward implements Kernels.
func (*CPU) EmbedBackward(dtable, dx, tok Tensor, n, d int) {
	dt, g, ids := dtable.f32(), dx.f32(), tok.i32()
	for i := 0; i < n; i++ {
		t := int(ids[i])
		row := dt[t*d : (t+1)*d]
		for j, v := range g[i*d : (i+1)*d] {
			row[j] += v
		}
	}
}

// RMSNorm implements Kernels.
func (*CPU) RMSNorm(y, rstd, x, w Tensor, n, d int, eps float32) {
	ys, rs, xs, ws := y.f32(), rstd.f32(), x.f32(), w.f32()
	parallelFor(n, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			xr := xs[i*d : (i+1)*d]
			var ss float64
			for _, v := range xr {
				ss += float64(v) * float64(v)
			}
			r := float32(1 / math.Sqrt(ss/float64(d)+float64(eps)))
			rs[i] = r
			yr := ys[i*d : (i+1)*d]
			for j, v := range xr {
				yr[j] = v * r * ws[j]
			}
		}
	})
}

// RMSNormBackward implements Kernels:
// dx += r·(dy∘w) − x·r³/d·Σ dy∘w∘x, dw += Σ_rows dy∘x·r.
func (*CPU) RMSNormBackward(dx, dw, dy, x, w, rstd Tensor, n, d int) {
	dxs, dws, dys, xs, ws, rs := dx.f32(), dw.f32(), dy.f32(), x.f32(), w.f32(), rstd.f32()
	parallelFor(n, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			xr, gr, dr := xs[i*d:(i+1)*d], dys[i*d:(i+1)*d], dxs[i*d:(i+1)*d]
			r := rs[i]
			var dot float64
			for j := range xr {
				dot += float64(gr[j]) * float64(ws[j]) * float64(xr[j])
			}
			c := float32(dot) * r * r * r / float32(d)
			for j := range xr {
				dr[j] += r*gr[j]*ws[j] - xr[j]*c
			}
		}
	})
	for i := 0; i < n; i++ {
		xr, gr, r := xs[i*d:(i+1)*d], dys[i*d:(i+1)*d], rs[i]
		for j := range dws[:d] {
			dws[j] += gr[j] * xr[j] * r
		}
	}
}

// AddBias implements Kernels.
func (*CPU) AddBias(y, b Tensor, n, c int) {
	ys, bs := y.f32(), b.f32()
	for i := 0; i < n; i++ {
		row := ys[i*c : (i+1)*c]
		for j := range row {
			row[j] += bs[j]
		}
	}
}

// BiasBackward implements Kernels.
func (*CPU) BiasBackward(db, dy Tensor, n, c int) {
	dbs, dys := db.f32(), dy.f32()
	for i := 0; i < n; i++ {
		for j, v := range dys[i*c : (i+1)*c] {
			dbs[j] += v
		}
	}
}

// RoPE implements Kernels.
func (*CPU) RoPE(x, cos, sin, pos Tensor, n, width, hd int, inverse bool) {
	xs, cs, ss, ps := x.f32(), cos.f32(), sin.f32(), pos.i32()
	half := hd / 2
	sign := float32(1)
	if inverse {
		sign = -1
	}
	for i := 0; i < n; i++ {
		p := int(ps[i])
		c, s := cs[p*half:(p+1)*half], ss[p*half:(p+1)*half]
		row := xs[i*width : (i+1)*width]
		for off := 0; off < width; off += hd {
			a, b := row[off:off+half], row[off+half:off+hd]
			for j := 0; j < half; j++ {
				x1, x2, sj := a[j], b[j], sign*s[j]
				a[j] = x1*c[j] - x2*sj
				b[j] = x2*c[j] + x1*sj
			}
		}
	}
}

func sigmoid(x float32) float32 { return float32(1 / (1 + math.Exp(-float64(x)))) }

// SwiGLU implements Kernels.
func (*CPU) SwiGLU(y, g, u Tensor, n int) {
	ys, gs, us := y.f32(), g.f32(), u.f32()
	for i := 0; i < n; i++ {
		ys[i] = gs[i] * sigmoid(gs[i]) * us[i]
	}
}

// SwiGLUBackward implements Kernels.
func (*CPU) SwiGLUBackward(dg, du, dy, g, u Tensor, n int) {
	dgs, dus, dys, gs, us := dg.f32(), du.f32(), dy.f32(), g.f32(), u.f32()
	for i := 0; i < n; i++ {
		x := gs[i]
		sg := sigmoid(x)
		dgs[i] = dys[i] * us[i] * sg * (1 + x*(1-sg))
		dus[i] = dys[i] * x * sg
	}
}

// AddInto implements Kernels.
func (*CPU) AddInto(x, y Tensor, n int) {
	xs, ys := x.f32(), y.f32()
	for i := 0; i < n; i++ {
		xs[i] += ys[i]
	}
}

// Cast implements Kernels: into bf16 it rounds to nearest even, as the
// GPU's cast does.
func (*CPU) Cast(dst, src Tensor, n int) {
	copy(dst.f32()[:n], src.f32()[:n])
	roundBF16(dst.View(0, n))
}

// roundBF16 rounds a CPU bf16 tensor's words to bf16 (nothing for f32).
func roundBF16(t Tensor) {
	if t.DT != BF16 {
		return
	}
	w := t.f32()
	for i, v := range w {
		w[i] = fromBF16(toBF16(v))
	}
}

// GatherRows implements Kernels.
func (*CPU) GatherRows(dst, src, idx Tensor, m, d int) {
	ds, ss, ix := dst.words(), src.words(), idx.i32()
	for i := 0; i < m; i++ {
		r := int(ix[i])
		copy(ds[i*d:(i+1)*d], ss[r*d:(r+1)*d])
	}
}

// ScatterRows implements Kernels.
func (*CPU) ScatterRows(dst, src, idx Tensor, m, d int) {
	ds, ss, ix := dst.words(), src.words(), idx.i32()
	for i := 0; i < m; i++ {
		r := int(ix[i])
		copy(ds[r*d:(r+1)*d], ss[i*d:(i+1)*d])
	}
}

// rowLSE returns log Σ exp(z·invTemp) and Σ softmax·z·invTemp.
func rowLSE(z []float32, invTemp float32) (lse, ez float64) {
	m := math.Inf(-1)
	for _, v := range z {
		m = max(m, float64(v*invTemp))
	}
	var s, sz float64
	for _, v := range z {
		zz := float64(v * invTemp)
		e := math.Exp(zz - m)
		s += e
		sz += e * zz
	}
	return m + math.Log(s), sz / s
}

// ChosenLogprob implements Kernels.
func (*CPU) ChosenLogprob(out, lse, logits, tgt Tensor, n, v int, invTemp float32) {
	os, ls, zs, ts := out.f32(), lse.f32(), logits.f32(), tgt.i32()
	parallelFor(n, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			t := int(ts[i])
			if t < 0 {
				os[2*i], os[2*i+1], ls[i] = 0, 0, 0
				continue
			}
			z := zs[i*v : (i+1)*v]
			l, ez := rowLSE(z, invTemp)
			os[2*i] = float32(float64(z[t]*invTemp) - l)
			os[2*i+1] = float32(l - ez)
			ls[i] = float32(l)
		}
	})
}

// ChosenLogprobBackward implements Kernels.
func (*CPU) ChosenLogprobBackward(dlogits, logits, tgt, cot, out, lse Tensor, n, v int, invTemp float32) {
	ds, zs, ts, cs, os, ls := dlogits.f32(), logits.f32(), tgt.i32(), cot.f32(), out.f32(), lse.f32()
	parallelFor(n, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			d := ds[i*v : (i+1)*v]
			t := int(ts[i])
			cl, ce := cs[2*i], cs[2*i+1]
			if t < 0 {
				clear(d)
				continue
			}
			z := zs[i*v : (i+1)*v]
			l, H := float64(ls[i]), float64(os[2*i+1])
			for k, zk := range z {
				lp := float64(zk*invTemp) - l
				p := math.Exp(lp)
				d[k] = float32((-float64(cl)*p - float64(ce)*p*(lp+H)) * float64(invTemp))
			}
			d[t] += cl * invTemp
		}
	})
}

// SampleTokens implements Kernels.
func (*CPU) SampleTokens(tok, lp, logits, u Tensor, r, v int, invTemp, topP float32) {
	toks, lps, zs, us := tok.i32(), lp.f32(), logits.f32(), u.f32()
	p := make([]float32, v)
	for i := 0; i < r; i++ {
		z := zs[i*v : (i+1)*v]
		if invTemp == 0 {
			best := 0
			for k, x := range z {
				if x > z[best] {
					best = k
				}
			}
			l, _ := rowLSE(z, 1)
			toks[i], lps[i] = int32(best), float32(float64(z[best])-l)
			continue
		}
		l, _ := rowLSE(z, invTemp)
		for k, x := range z {
			p[k] = float32(math.Exp(float64(x*invTemp) - l))
		}
		theta := topPThreshold(p, topP)
		var mass float64
		for _, pk := range p {
			if pk >= theta {
				mass += float64(pk)
			}
		}
		target := float64(us[i]) * mass
		t, last := -1, 0
		var cum float64
		for k, pk := range p {
			if pk < theta {
				continue
			}
			last = k
			if cum += float64(pk); cum > target {
				t = k
				break
			}
		}
		if t < 0 { // rounding left target at the top: the last kept token
			t = last
		}
		toks[i], lps[i] = int32(t), float32(float64(z[t]*invTemp)-l)
	}
}

// topPThreshold is the probability of the last token the nucleus needs
// (0 when topP is off): the kept set is every p >= it, ties included.
func topPThreshold(p []float32, topP float32) float32 {
	if topP <= 0 || topP >= 1 {
		return 0
	}
	s := slices.Clone(p)
	slices.SortFunc(s, func(a, b float32) int {
		switch {
		case a > b:
			return -1
		case a < b:
			return 1
		}
		return 0
	})
	var cum float64
	for _, pk := range s {
		if cum += float64(pk); cum >= float64(topP) {
			return pk
		}
	}
	return s[len(s)-1]
}

// AdamW implements Kernels.
func (*CPU) AdamW(w, g, m, v Tensor, n int, a AdamWArgs) {
	ws, gs, ms, vs := w.f32(), g.f32(), m.f32(), v.f32()
	for i := 0; i < n; i++ {
		gi := gs[i] * a.GScale
		ms[i] = a.B1*ms[i] + (1-a.B1)*gi
		vs[i] = a.B2*vs[i] + (1-a.B2)*gi*gi
		ws[i] = ws[i]*a.Decay - a.StepSize*ms[i]/(float32(math.Sqrt(float64(vs[i]*a.InvBC2)))+a.Eps)
	}
}

// SumSquares implements Kernels.
func (*CPU) SumSquares(out, x Tensor, n int) {
	os, xs := out.f32(), x.f32()
	clear(os)
	chunk := (n + SumSquaresParts - 1) / SumSquaresParts
	for p := 0; p < SumSquaresParts; p++ {
		var s float64
		for _, v := range xs[min(p*chunk, n):min((p+1)*chunk, n)] {
			s += float64(v) * float64(v)
		}
		os[p] = float32(s)
	}
}

// parallelFor runs fn over [0, n) in one contiguous chunk per core.
func parallelFor(n int, fn func(lo, hi int)) { par.For(n, fn) }
