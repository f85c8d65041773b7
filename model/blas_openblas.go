//go:build blas && cgo

package model

// #cgo LDFLAGS: -lopenblas
// void openblas_set_num_threads(int);
import "C"

import (
	"runtime"
	"sync"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/netlib/blas/netlib"
	G "gorgonia.org/gorgonia"
)

// With `-tags blas` both gorgonia's matmuls and our own kernels (attention,
// sampler) go through OpenBLAS. OpenBLAS's own threads spin and fight our
// goroutines on 2 cores (measured: 1.6x slower training), so it runs single
// threaded and large products are split across cores here instead.
func init() {
	C.openblas_set_num_threads(1)
	sblas, sblas1 = splitBLAS{}, netlib.Implementation{}
	G.Use(splitBLAS{})
}

// blasName describes the matrix-multiply backend, for the console header.
var blasName = "OpenBLAS (cgo)"

// BLASName says which BLAS this binary was built with: OpenBLAS here.
func BLASName() string { return blasName }

// splitBLAS is OpenBLAS with Sgemm split by rows (or columns) of C across
// GOMAXPROCS goroutines when the product is large.
type splitBLAS struct{ netlib.Implementation }

func (s splitBLAS) Sgemm(tA, tB blas.Transpose, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	w := runtime.GOMAXPROCS(0)
	if w < 2 || m*n*k < 1<<20 {
		s.Implementation.Sgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	var wg sync.WaitGroup
	if m >= n {
		chunk := (m + w - 1) / w
		for lo := 0; lo < m; lo += chunk {
			hi := min(lo+chunk, m)
			ao := lo * lda // row lo of op(A)
			if tA != blas.NoTrans {
				ao = lo
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.Implementation.Sgemm(tA, tB, hi-lo, n, k, alpha, a[ao:], lda, b, ldb, beta, c[lo*ldc:], ldc)
			}()
		}
	} else {
		chunk := (n + w - 1) / w
		for lo := 0; lo < n; lo += chunk {
			hi := min(lo+chunk, n)
			bo := lo // column lo of op(B)
			if tB != blas.NoTrans {
				bo = lo * ldb
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.Implementation.Sgemm(tA, tB, m, hi-lo, k, alpha, a, lda, b[bo:], ldb, beta, c[lo:], ldc)
			}()
		}
	}
	wg.Wait()
}
