package model

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/swetui/swetui/internal/sgemm"
	"github.com/swetui/swetui/internal/vec"
)

// TestGemmAgainstLoops checks the active BLAS (pure Go or OpenBLAS) on the
// strided, transposed calls our attention kernels make.
func TestGemmAgainstLoops(t *testing.T) {
	t.Logf("BLAS: %s", BLASName())
	if BLASName() == "" || (!strings.Contains(BLASName(), "OpenBLAS") && !strings.Contains(BLASName(), "Go")) {
		t.Fatalf("BLASName() = %q", BLASName())
	}
	r := rand.New(rand.NewPCG(1, 1))
	rnd := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		return x
	}
	for _, tc := range []struct {
		tA, tB  bool
		m, n, k int
	}{
		{false, false, 5, 7, 3}, {false, true, 6, 6, 4}, {true, false, 4, 3, 6}, {true, true, 3, 5, 2},
		// Large enough for the OpenBLAS build to split rows, then columns, across cores.
		{false, true, 130, 97, 100}, {true, false, 140, 90, 101}, {true, true, 40, 300, 100}, {false, false, 33, 310, 120},
	} {
		rowsA, colsA, rowsB, colsB := tc.m, tc.k, tc.k, tc.n
		if tc.tA {
			rowsA, colsA = tc.k, tc.m
		}
		if tc.tB {
			rowsB, colsB = tc.n, tc.k
		}
		lda, ldb, ldc := colsA+3, colsB+5, tc.n+2
		a, b, c := rnd(rowsA*lda), rnd(rowsB*ldb), rnd(tc.m*ldc)
		want := append([]float32(nil), c...)
		for i := 0; i < tc.m; i++ {
			for j := 0; j < tc.n; j++ {
				var s float64
				for p := 0; p < tc.k; p++ {
					var av, bv float32
					if tc.tA {
						av = a[p*lda+i]
					} else {
						av = a[i*lda+p]
					}
					if tc.tB {
						bv = b[j*ldb+p]
					} else {
						bv = b[p*ldb+j]
					}
					s += float64(av) * float64(bv)
				}
				want[i*ldc+j] = float32(0.5*s) + 2*c[i*ldc+j]
			}
		}
		gemm(tc.tA, tc.tB, tc.m, tc.n, tc.k, 0.5, a, lda, b, ldb, 2, c, ldc)
		for i := range c {
			if math.Abs(float64(c[i]-want[i])) > 1e-3 {
				t.Fatalf("%+v: c[%d] = %v, want %v", tc, i, c[i], want[i])
			}
		}
	}
}

// TestFallbackKernels runs the numerics tests again with the assembly
// kernels off (as on a CPU without AVX2/FMA): the gonum matmul and the
// plain-Go exp must agree with the references too.
func TestFallbackKernels(t *testing.T) {
	sgemm.Disable, vec.Disable = true, true
	defer func() { sgemm.Disable, vec.Disable = false, false }()
	t.Run("float64", TestForwardMatchesFloat64Reference)
	t.Run("pytorch", TestForwardMatchesPyTorch)
	t.Run("sampler", TestSamplerMatchesTrainingGraph)
	t.Run("gradients", TestModelGradientFiniteDifference)
	t.Run("ops", TestOpGradientsFiniteDifference)
	t.Run("gemm", TestGemmAgainstLoops)
}
