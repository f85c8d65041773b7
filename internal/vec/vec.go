package vec

import "math"

// Disable forces the plain-Go kernels (tests of the fallback; set it before
// use, not while computing).
var Disable bool

func fast() bool { return hasAVX && !Disable }

// Cephes expf: exp(x) = 2^n · p(r), n = round(x·log2 e), r = x − n·ln 2.
const (
	expHi   = 88.3
	expLo   = -86.5 // below it exp is 0 (true value < 2.6e-38)
	log2e   = 1.44269504088896341
	ln2Hi   = 0.693359375
	ln2Lo   = -2.12194440e-4
	expP0   = 1.9875691500e-4
	expP1   = 1.3981999507e-3
	expP2   = 8.3334519073e-3
	expP3   = 4.1665795894e-2
	expP4   = 1.6666665459e-1
	expP5   = 5.0000001201e-1
	padding = 8
)

// Exp is the scalar form of the vector exp (same algorithm, for tails and
// the fallback).
func Exp(x float32) float32 {
	if x < expLo || x != x {
		if x != x {
			return x
		}
		return 0
	}
	x = min(x, expHi)
	fx := float32(math.RoundToEven(float64(x * log2e)))
	r := fma(-fx, ln2Hi, x)
	r = fma(-fx, ln2Lo, r)
	p := fma(expP0, r, expP1)
	p = fma(p, r, expP2)
	p = fma(p, r, expP3)
	p = fma(p, r, expP4)
	p = fma(p, r, expP5)
	y := fma(p, r*r, r) + 1
	return math.Float32frombits(math.Float32bits(y) + uint32(int32(fx))<<23)
}

// fma is a·b+c rounded once, as VFMADD does (a·b is exact in float64).
func fma(a, b, c float32) float32 { return float32(math.FMA(float64(a), float64(b), float64(c))) }

func sigmoid(x float32) float32 { return 1 / (1 + Exp(-x)) }

// Max returns the largest element of x (−Inf for an empty x).
func Max(x []float32) float32 {
	m := float32(math.Inf(-1))
	n8 := len(x) &^ (padding - 1)
	if fast() && n8 > 0 {
		m = maxAVX(&x[0], n8)
	} else {
		n8 = 0
	}
	for _, v := range x[n8:] {
		m = max(m, v)
	}
	return m
}

// Dot returns Σ x·y over len(x) elements (y at least as long).
func Dot(x, y []float32) float32 {
	y = y[:len(x)]
	var s float32
	n8 := len(x) &^ (padding - 1)
	if fast() && n8 > 0 {
		s = dotAVX(&x[0], &y[0], n8)
	} else {
		n8 = 0
	}
	for i := n8; i < len(x); i++ {
		s += x[i] * y[i]
	}
	return s
}

// Axpy adds a·x to y (len(y) elements).
func Axpy(y, x []float32, a float32) {
	x = x[:len(y)]
	n8 := len(y) &^ (padding - 1)
	if fast() && n8 > 0 {
		axpyAVX(&y[0], &x[0], n8, a)
	} else {
		n8 = 0
	}
	for i := n8; i < len(y); i++ {
		y[i] += a * x[i]
	}
}

// Scale multiplies x by a in place.
func Scale(x []float32, a float32) {
	n8 := len(x) &^ (padding - 1)
	if fast() && n8 > 0 {
		scaleAVX(&x[0], n8, a)
	} else {
		n8 = 0
	}
	for i := n8; i < len(x); i++ {
		x[i] *= a
	}
}

// ExpSum sets dst = exp(src·scale − shift) and returns Σ dst.
func ExpSum(dst, src []float32, scale, shift float32) float32 {
	dst = dst[:len(src)]
	var s float32
	n8 := len(src) &^ (padding - 1)
	if fast() && n8 > 0 {
		s = expSumAVX(&dst[0], &src[0], n8, scale, shift)
	} else {
		n8 = 0
	}
	for i := n8; i < len(src); i++ {
		e := Exp(src[i]*scale - shift)
		dst[i] = e
		s += e
	}
	return s
}

// ExpAffine sets dst = exp(src·scale − shift)·(a + b·src): the logprob
// gradient, from the row's log-sum-exp, in one pass.
func ExpAffine(dst, src []float32, scale, shift, a, b float32) {
	dst = dst[:len(src)]
	n8 := len(src) &^ (padding - 1)
	if fast() && n8 > 0 {
		expAffineAVX(&dst[0], &src[0], n8, scale, shift, a, b)
	} else {
		n8 = 0
	}
	for i := n8; i < len(src); i++ {
		z := src[i]
		dst[i] = Exp(z*scale-shift) * (a + b*z)
	}
}

// MulAffine sets dst = p·(a + b·d) (dst may be d).
func MulAffine(dst, p, d []float32, a, b float32) {
	p, d = p[:len(dst)], d[:len(dst)]
	n8 := len(dst) &^ (padding - 1)
	if fast() && n8 > 0 {
		mulAffineAVX(&dst[0], &p[0], &d[0], n8, a, b)
	} else {
		n8 = 0
	}
	for i := n8; i < len(dst); i++ {
		dst[i] = p[i] * (a + b*d[i])
	}
}

// SiLUMul sets dst = silu(a)·b = a·σ(a)·b (SwiGLU).
func SiLUMul(dst, a, b []float32) {
	a, b = a[:len(dst)], b[:len(dst)]
	n8 := len(dst) &^ (padding - 1)
	if fast() && n8 > 0 {
		siluMulAVX(&dst[0], &a[0], &b[0], n8)
	} else {
		n8 = 0
	}
	for i := n8; i < len(dst); i++ {
		x := a[i]
		dst[i] = x * sigmoid(x) * b[i]
	}
}

// SiLUMulGradA sets dst = g·b·σ(a)·(1 + a·(1 − σ(a))), the gradient of
// silu(a)·b with respect to a.
func SiLUMulGradA(dst, a, b, g []float32) {
	a, b, g = a[:len(dst)], b[:len(dst)], g[:len(dst)]
	n8 := len(dst) &^ (padding - 1)
	if fast() && n8 > 0 {
		siluGradAAVX(&dst[0], &a[0], &b[0], &g[0], n8)
	} else {
		n8 = 0
	}
	for i := n8; i < len(dst); i++ {
		x := a[i]
		s := sigmoid(x)
		dst[i] = g[i] * b[i] * s * (1 + x*(1-s))
	}
}

// SiLUMulGradB sets dst = g·silu(a), the gradient of silu(a)·b with
// respect to b.
func SiLUMulGradB(dst, a, g []float32) {
	a, g = a[:len(dst)], g[:len(dst)]
	n8 := len(dst) &^ (padding - 1)
	if fast() && n8 > 0 {
		siluGradBAVX(&dst[0], &a[0], &g[0], n8)
	} else {
		n8 = 0
	}
	for i := n8; i < len(dst); i++ {
		x := a[i]
		dst[i] = g[i] * x * sigmoid(x)
	}
}
