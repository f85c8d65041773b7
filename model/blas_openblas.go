//go:build blas && cgo

package model

// #cgo LDFLAGS: -lopenblas
import "C"

import (
	"gonum.org/v1/netlib/blas/netlib"
	G "gorgonia.org/gorgonia"
)

// With `-tags blas` both gorgonia's matmuls and our own kernels (attention,
// sampler) go through OpenBLAS: ~6x the pure-Go float32 GEMM on this box.
func init() {
	sblas = netlib.Implementation{}
	G.Use(netlib.Implementation{})
	blasName = "OpenBLAS (cgo)"
}
