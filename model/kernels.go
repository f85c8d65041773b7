package model

import (
	"math"

	"gonum.org/v1/gonum/blas"

	"github.com/swetui/swetui/internal/par"
	"github.com/swetui/swetui/internal/sgemm"
	"github.com/swetui/swetui/internal/vec"
)

// Plain-Go float32 kernels shared by the gorgonia ops (training) and the
// sampler (decoding), so that both compute the same numbers.

// sblas and sblas1 are the float32 BLAS of our own kernels and the sampler:
// sblas splits a product across cores, sblas1 runs it on the calling
// goroutine (for callers that already run one product per core). The
// default is internal/sgemm (AVX2/FMA assembly, gonum without it); the
// `blas` build tag swaps in OpenBLAS (see blas_openblas.go).
var sblas, sblas1 blas.Float32 = sgemm.Implementation{}, sgemmSerial{}

type sgemmSerial struct{ sgemm.Implementation }

func (sgemmSerial) Sgemm(tA, tB blas.Transpose, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	sgemm.SgemmSerial(tA != blas.NoTrans, tB != blas.NoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

func trans(t bool) blas.Transpose {
	if t {
		return blas.Trans
	}
	return blas.NoTrans
}

// gemm computes C = alpha·op(A)·op(B) + beta·C on row-major matrices,
// split across cores when large.
func gemm(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	sblas.Sgemm(trans(tA), trans(tB), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// gemm1 is gemm on the calling goroutine, for use inside parallelFor.
func gemm1(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	sblas1.Sgemm(trans(tA), trans(tB), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// parallelFor runs fn over [0, n) in one contiguous chunk per core.
func parallelFor(n int, fn func(lo, hi int)) { par.For(n, fn) }

// parallelChunks runs an elementwise fn over [0,n) in one chunk per core
// (multiples of 8 floats, the vector kernels' width) when n is large enough
// to pay for the split.
func parallelChunks(n int, fn func(lo, hi int)) { par.Chunks(n, 8, 1<<14, fn) }

// rmsInv returns 1/sqrt(mean(x²)+eps) for one row.
func rmsInv(x []float32, eps float64) float32 {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	return float32(1 / math.Sqrt(ss/float64(len(x))+eps))
}

// rmsNormRows: y[n,:] = x[n,:]·r_n·w for rows of width len(w).
func rmsNormRows(y, x, w []float32, eps float64) {
	d := len(w)
	par := parallelFor
	if len(x) < 1<<13 { // a decoding step's few rows: not worth two goroutines
		par = func(n int, fn func(lo, hi int)) { fn(0, n) }
	}
	par(len(x)/d, func(lo, hi int) {
		for n := lo; n < hi; n++ {
			xr, yr := x[n*d:(n+1)*d], y[n*d:(n+1)*d]
			r := rmsInv(xr, eps)
			for j := range xr {
				yr[j] = xr[j] * r * w[j]
			}
		}
	})
}

// ropeTable holds cos/sin of position·θ_i for i < headDim/2 (HF's
// rotate_half layout: element i pairs with i+headDim/2).
type ropeTable struct {
	half     int
	cos, sin []float32 // [context, half]
}

func newRopeTable(headDim, context int, theta float64) *ropeTable {
	half := headDim / 2
	t := &ropeTable{half: half, cos: make([]float32, context*half), sin: make([]float32, context*half)}
	for p := 0; p < context; p++ {
		for i := 0; i < half; i++ {
			inv := math.Pow(theta, -float64(2*i)/float64(headDim))
			a := float64(p) * inv
			t.cos[p*half+i] = float32(math.Cos(a))
			t.sin[p*half+i] = float32(math.Sin(a))
		}
	}
	return t
}

// rotate applies RoPE at position pos to every head of one row in place
// (sign=-1 applies the inverse rotation, which is the gradient).
func (t *ropeTable) rotate(row []float32, pos int, sign float32) {
	h := t.half
	c, s := t.cos[pos*h:(pos+1)*h], t.sin[pos*h:(pos+1)*h]
	for off := 0; off < len(row); off += 2 * h {
		a, b := row[off:off+h], row[off+h:off+2*h]
		for i := 0; i < h; i++ {
			x1, x2 := a[i], b[i]
			si := sign * s[i]
			a[i] = x1*c[i] - x2*si
			b[i] = x2*c[i] + x1*si
		}
	}
}

// softmaxRow turns z into probabilities in place (max-subtracted) and returns
// log-sum-exp of the input.
func softmaxRow(z []float32) float64 {
	m := vec.Max(z)
	s := vec.ExpSum(z, z, 1, m)
	vec.Scale(z, 1/s)
	return float64(m) + math.Log(float64(s))
}

// rowLogprob returns log softmax(z/τ)[t] and the entropy of softmax(z/τ),
// and the log-sum-exp of z/τ; scratch (len(z)) is overwritten.
func rowLogprob(z []float32, t int, invTemp float32, scratch []float32) (lp, ent, lse float64) {
	m := vec.Max(z) * invTemp
	s := vec.ExpSum(scratch, z, invTemp, m)
	lse = float64(m) + math.Log(float64(s))
	ez := float64(invTemp) * float64(vec.Dot(scratch, z)) / float64(s) // E_p[z/τ]
	return float64(z[t]*invTemp) - lse, lse - ez, lse
}
