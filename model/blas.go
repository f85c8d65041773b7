package model

// blasName describes the matrix-multiply backend, for the console header.
var blasName = "pure Go (gonum)"

// BLASName says which BLAS this binary was built with: pure Go by default,
// OpenBLAS with `-tags blas` (cgo and Debian's libopenblas-dev).
func BLASName() string { return blasName }
