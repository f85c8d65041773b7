//go:build !amd64

package sgemm

const hasKernel = false

func kernel6x16(kc int, a *float32, rsa, csa int, b *float32, rsb int, c *float32, ldc int, alpha, beta float32) {
	panic("sgemm: no assembly kernel on this architecture")
}

func kernel4x16(kc int, a *float32, rsa, csa int, b *float32, rsb int, c *float32, ldc int, alpha, beta float32) {
	panic("sgemm: no assembly kernel on this architecture")
}

func fmaLoop(n int) {
	x := [12]float32{}
	for i := 0; i < n; i++ {
		for j := range x {
			x[j] = x[j]*0.5 + 1
		}
	}
	sink = x[0]
}

var sink float32
