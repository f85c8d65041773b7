//go:build !amd64

package vec

const hasAVX = false

func maxAVX(x *float32, n int) float32                                  { panic("vec: no assembly") }
func dotAVX(x, y *float32, n int) float32                               { panic("vec: no assembly") }
func scaleAVX(x *float32, n int, a float32)                             { panic("vec: no assembly") }
func expSumAVX(dst, src *float32, n int, scale, shift float32) float32  { panic("vec: no assembly") }
func expAffineAVX(dst, src *float32, n int, scale, shift, a, b float32) { panic("vec: no assembly") }
func mulAffineAVX(dst, p, d *float32, n int, a, b float32)              { panic("vec: no assembly") }
func siluMulAVX(dst, a, b *float32, n int)                              { panic("vec: no assembly") }
func siluGradAAVX(dst, a, b, gr *float32, n int)                        { panic("vec: no assembly") }
func siluGradBAVX(dst, a, gr *float32, n int)                           { panic("vec: no assembly") }

func axpyAVX(y, x *float32, n int, a float32) { panic("vec: no assembly") }
