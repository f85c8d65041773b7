//go:build !blas || !cgo

package model

import (
	G "gorgonia.org/gorgonia"

	"github.com/swetui/swetui/internal/sgemm"
)

// blasName describes the matrix-multiply backend, for the console header.
var blasName = "pure Go (gonum)"

// The default build runs gorgonia's matmuls on internal/sgemm too.
func init() {
	G.Use(sgemm.Implementation{})
	if sgemm.Accelerated() {
		blasName = "pure Go (AVX2/FMA assembly)"
	}
}

// BLASName says which BLAS this binary was built with: pure Go by default
// (assembly kernels where the CPU has AVX2 and FMA, else gonum), OpenBLAS
// with `-tags blas` (cgo and Debian's libopenblas-dev).
func BLASName() string { return blasName }
