package vec

import "golang.org/x/sys/cpu"

var hasAVX = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// The assembly kernels take n, a positive multiple of 8.

//go:noescape
func maxAVX(x *float32, n int) float32

//go:noescape
func dotAVX(x, y *float32, n int) float32

//go:noescape
func scaleAVX(x *float32, n int, a float32)

//go:noescape
func expSumAVX(dst, src *float32, n int, scale, shift float32) float32

//go:noescape
func expAffineAVX(dst, src *float32, n int, scale, shift, a, b float32)

//go:noescape
func mulAffineAVX(dst, p, d *float32, n int, a, b float32)

//go:noescape
func siluMulAVX(dst, a, b *float32, n int)

//go:noescape
func siluGradAAVX(dst, a, b, gr *float32, n int)

//go:noescape
func siluGradBAVX(dst, a, gr *float32, n int)

//go:noescape
func axpyAVX(y, x *float32, n int, a float32)
