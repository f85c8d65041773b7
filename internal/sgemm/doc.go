// Package sgemm is a float32 matrix multiply for row-major matrices: an
// AVX2/FMA micro-kernel in Go assembly (6×16 tile, packed panels, L1/L2
// blocking), with the work split across cores here. Where AVX2 or FMA is
// missing (or Disable is set) it falls back to gonum's pure-Go Sgemm.
//
// Implementation plugs it into gorgonia (gorgonia.Use) as a BLAS; Sgemm and
// SgemmSerial are the direct entry points; PackB pre-packs a matrix that is
// multiplied many times (the sampler's weights). PeakGFLOPS measures the
// machine's fp32 FMA throughput, the yardstick the benchmarks report against.
package sgemm
