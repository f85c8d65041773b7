package sgemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/blas"
)

func naive(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for p := 0; p < k; p++ {
				var av, bv float32
				if tA {
					av = a[p*lda+i]
				} else {
					av = a[i*lda+p]
				}
				if tB {
					bv = b[j*ldb+p]
				} else {
					bv = b[p*ldb+j]
				}
				s += float64(av) * float64(bv)
			}
			v := float64(alpha) * s
			if beta != 0 {
				v += float64(beta) * float64(c[i*ldc+j])
			}
			c[i*ldc+j] = float32(v)
		}
	}
}

type gemmCase struct {
	tA, tB      bool
	m, n, k     int
	alpha, beta float32
	pad         int // extra leading-dimension elements
}

func cases() []gemmCase {
	var cs []gemmCase
	shapes := [][3]int{
		{1, 1, 1}, {6, 16, 1}, {5, 15, 3}, {7, 17, 9}, {13, 33, 31}, {6, 16, 256}, {12, 32, 257},
		{145, 47, 300}, {150, 2050, 20}, {64, 64, 513}, {300, 19, 70}, {2, 400, 129}, {1, 70, 1000},
		{4, 33, 17}, {10, 48, 40}, {4, 2048, 128}, {8, 800, 32},
	}
	for i, s := range shapes {
		for _, t := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
			ab := [][2]float32{{1, 0}, {0.5, 2}, {-1.5, 1}, {2, -0.5}}[i%4]
			cs = append(cs, gemmCase{t[0], t[1], s[0], s[1], s[2], ab[0], ab[1], (i % 3) * 3})
		}
	}
	// alpha = 0 and k = 0 only scale C.
	cs = append(cs, gemmCase{false, false, 7, 9, 5, 0, 3, 1}, gemmCase{false, true, 7, 9, 0, 1, 0.5, 0})
	return cs
}

func rnd(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

func runCase(t *testing.T, tc gemmCase, f func(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int)) {
	t.Helper()
	r := rand.New(rand.NewPCG(uint64(tc.m), uint64(tc.n*1000+tc.k)))
	ar, ac, br, bc := tc.m, tc.k, tc.k, tc.n
	if tc.tA {
		ar, ac = tc.k, tc.m
	}
	if tc.tB {
		br, bc = tc.n, tc.k
	}
	lda, ldb, ldc := max(1, ac+tc.pad), max(1, bc+tc.pad+1), tc.n+tc.pad
	a, b := rnd(r, max(1, ar*lda)), rnd(r, max(1, br*ldb))
	c := rnd(r, tc.m*ldc)
	if tc.beta == 0 {
		for i := range c {
			c[i] = float32(math.NaN()) // beta = 0 must not read C
		}
	}
	want := append([]float32(nil), c...)
	naive(tc.tA, tc.tB, tc.m, tc.n, tc.k, tc.alpha, a, lda, b, ldb, tc.beta, want, ldc)
	f(tc.tA, tc.tB, tc.m, tc.n, tc.k, tc.alpha, a, lda, b, ldb, tc.beta, c, ldc)
	tol := 1e-5 * float64(tc.k+1) * float64(1+abs(tc.alpha)+abs(tc.beta))
	for i := 0; i < tc.m; i++ {
		for j := 0; j < ldc; j++ {
			got, w := c[i*ldc+j], want[i*ldc+j]
			if j >= tc.n { // padding between rows stays untouched
				if math.Float32bits(got) != math.Float32bits(w) {
					t.Fatalf("%+v: padding c[%d,%d] changed to %v", tc, i, j, got)
				}
				continue
			}
			if math.IsNaN(float64(got)) || math.Abs(float64(got-w)) > tol*math.Sqrt(float64(tc.k+1)) {
				t.Fatalf("%+v: c[%d,%d] = %v, want %v", tc, i, j, got, w)
			}
		}
	}
}

func abs(x float32) float64 { return math.Abs(float64(x)) }

func TestSgemmAgainstNaive(t *testing.T) {
	if !Accelerated() {
		t.Log("no AVX2/FMA: testing the gonum fallback only")
	}
	for _, tc := range cases() {
		name := fmt.Sprintf("tA=%v,tB=%v,%dx%dx%d,a=%g,b=%g,pad=%d", tc.tA, tc.tB, tc.m, tc.n, tc.k, tc.alpha, tc.beta, tc.pad)
		t.Run(name, func(t *testing.T) {
			runCase(t, tc, Sgemm)
			runCase(t, tc, SgemmSerial)
			runCase(t, tc, func(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
				ta, tb := blas.NoTrans, blas.NoTrans
				if tA {
					ta = blas.Trans
				}
				if tB {
					tb = blas.Trans
				}
				Implementation{}.Sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
			})
		})
	}
}

func TestSgemmFallback(t *testing.T) {
	Disable = true
	defer func() { Disable = false }()
	if Accelerated() {
		t.Fatal("Accelerated() with Disable set")
	}
	for _, tc := range cases() {
		runCase(t, tc, Sgemm)
	}
}

func TestSgemmPanicsOnBadArguments(t *testing.T) {
	for name, f := range map[string]func(){
		"short A": func() {
			Sgemm(false, false, 4, 4, 4, 1, make([]float32, 15), 4, make([]float32, 16), 4, 0, make([]float32, 16), 4)
		},
		"short B": func() {
			Sgemm(false, true, 4, 4, 4, 1, make([]float32, 16), 4, make([]float32, 15), 4, 0, make([]float32, 16), 4)
		},
		"short C": func() {
			Sgemm(false, false, 4, 4, 4, 1, make([]float32, 16), 4, make([]float32, 16), 4, 0, make([]float32, 15), 4)
		},
		"bad lda": func() {
			Sgemm(true, false, 4, 4, 4, 1, make([]float32, 16), 3, make([]float32, 16), 4, 0, make([]float32, 16), 4)
		},
		"negative": func() { Sgemm(false, false, -1, 4, 4, 1, nil, 4, nil, 4, 0, nil, 4) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

// TestPackedEqualsSgemm: products through a pre-packed (fused) B equal
// Sgemm on the concatenated matrix bit for bit, on both paths.
func TestPackedEqualsSgemm(t *testing.T) {
	for _, off := range []bool{false, true} {
		Disable = off
		r := rand.New(rand.NewPCG(7, 8))
		for _, s := range []struct{ m, k int }{{1, 5}, {4, 128}, {8, 384}, {13, 257}, {150, 600}, {700, 64}} {
			widths := []int{128, 64, 37, 16}
			parts := make([][]float32, len(widths))
			n := 0
			for i, w := range widths {
				parts[i] = rnd(r, s.k*w)
				n += w
			}
			full := make([]float32, s.k*n)
			off := 0
			for i, w := range widths {
				for kk := 0; kk < s.k; kk++ {
					copy(full[kk*n+off:], parts[i][kk*w:(kk+1)*w])
				}
				off += w
			}
			a := rnd(r, s.m*(s.k+3))
			want, got := rnd(r, s.m*n), make([]float32, s.m*n)
			copy(got, want)
			p := PackCols(nil, s.k, parts, widths)
			Sgemm(false, false, s.m, n, s.k, 0.5, a, s.k+3, full, n, 1.5, want, n)
			p.Mul(s.m, 0.5, a, s.k+3, 1.5, got, n)
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("fallback=%v m=%d k=%d: c[%d] = %v, Sgemm %v", off, s.m, s.k, i, got[i], want[i])
				}
			}
			p = PackCols(p, s.k, parts, widths) // repacking reuses storage
			p.MulSerial(s.m, 0.5, a, s.k+3, 0, got, n)
			Sgemm(false, false, s.m, n, s.k, 0.5, a, s.k+3, full, n, 0, want, n)
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("fallback=%v m=%d k=%d serial: c[%d] = %v, Sgemm %v", off, s.m, s.k, i, got[i], want[i])
				}
			}
		}
	}
	Disable = false
}
