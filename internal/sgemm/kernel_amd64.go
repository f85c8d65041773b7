package sgemm

import "golang.org/x/sys/cpu"

// hasKernel: the assembly kernels need AVX2 and FMA (and the OS saving the
// YMM state, which x/sys/cpu folds into HasAVX2).
var hasKernel = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// kernel6x16 computes the 6×16 tile C = alpha·A·B + beta·C, kc deep.
// Element (i, p) of A is at a[i·rsa + p·csa], so one kernel reads packed
// panels (1, 6), row-major A (lda, 1) and transposed A (1, lda); row p of B
// is the 16 floats at b[p·rsb]. c is row-major with row stride ldc. All
// strides are in elements; beta == 0 does not read C.
//
//go:noescape
func kernel6x16(kc int, a *float32, rsa, csa int, b *float32, rsb int, c *float32, ldc int, alpha, beta float32)

// kernel4x16 is kernel6x16 for 4 rows: the decoder's G=4 sequences, and
// ragged last tiles of at most 4 rows.
//
//go:noescape
func kernel4x16(kc int, a *float32, rsa, csa int, b *float32, rsb int, c *float32, ldc int, alpha, beta float32)

// fmaLoop runs n iterations of 12 independent 8-wide FMAs (n·192 flops).
//
//go:noescape
func fmaLoop(n int)
