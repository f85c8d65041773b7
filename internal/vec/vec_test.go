package vec

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

func eachMode(t *testing.T, f func(t *testing.T)) {
	for _, off := range []bool{false, true} {
		t.Run(fmt.Sprintf("fallback=%v", off), func(t *testing.T) {
			Disable = off
			defer func() { Disable = false }()
			f(t)
		})
	}
}

func relErr(got float32, want float64) float64 {
	if want == 0 {
		return math.Abs(float64(got))
	}
	return math.Abs(float64(got)-want) / math.Abs(want)
}

func TestExpAccuracy(t *testing.T) {
	eachMode(t, func(t *testing.T) {
		var xs []float32
		for x := float32(-86.4); x < 88.3; x += 0.0137 {
			xs = append(xs, x)
		}
		xs = append(xs, 0, -0.0, 1e-8, -1e-8, 88.29, -86.49)
		dst := make([]float32, len(xs))
		ExpSum(dst, xs, 1, 0)
		var worst float64
		for i, x := range xs {
			w := math.Exp(float64(x))
			worst = max(worst, relErr(dst[i], w), relErr(Exp(x), w))
		}
		if worst > 3e-7 {
			t.Fatalf("exp relative error %g, want <= 3e-7 (about 2 ulp)", worst)
		}
		// Below expLo and at -Inf exp is exactly 0 (padding, masked scores).
		under := []float32{-87, -1000, float32(math.Inf(-1)), -90, -100, -200, -300, -400, -500}
		ExpSum(dst[:len(under)], under, 1, 0)
		for i, v := range dst[:len(under)] {
			if v != 0 || Exp(under[i]) != 0 {
				t.Fatalf("exp(%v) = %v, want 0", under[i], v)
			}
		}
	})
}

func TestKernelsAgainstFloat64(t *testing.T) {
	eachMode(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(3, 4))
		for n := 0; n <= 70; n++ {
			x, y, g := make([]float32, n), make([]float32, n), make([]float32, n)
			for i := range x {
				x[i], y[i], g[i] = float32(r.NormFloat64()*3), float32(r.NormFloat64()), float32(r.NormFloat64())
			}
			dst := make([]float32, n)
			check := func(name string, got []float32, want func(i int) float64) {
				t.Helper()
				for i := range got {
					w := want(i)
					if math.Abs(float64(got[i])-w) > 1e-6*(1+math.Abs(w)) {
						t.Fatalf("n=%d %s[%d] = %v, want %v", n, name, i, got[i], w)
					}
				}
			}
			sig := func(v float32) float64 { return 1 / (1 + math.Exp(-float64(v))) }

			wantMax, wantDot, wantSum := math.Inf(-1), 0.0, 0.0
			for i := range x {
				wantMax = math.Max(wantMax, float64(x[i]))
				wantDot += float64(x[i]) * float64(y[i])
				wantSum += math.Exp(float64(x[i])*0.5 - 1)
			}
			if got := Max(x); float64(got) != wantMax {
				t.Fatalf("n=%d Max = %v, want %v", n, got, wantMax)
			}
			if got := Dot(x, y); math.Abs(float64(got)-wantDot) > 1e-5*float64(n+1) {
				t.Fatalf("n=%d Dot = %v, want %v", n, got, wantDot)
			}
			if got := ExpSum(dst, x, 0.5, 1); math.Abs(float64(got)-wantSum) > 1e-6*wantSum+1e-12 {
				t.Fatalf("n=%d ExpSum = %v, want %v", n, got, wantSum)
			}
			check("ExpSum", dst, func(i int) float64 { return math.Exp(float64(x[i])*0.5 - 1) })
			ExpAffine(dst, x, 0.5, 1, 0.25, -2)
			check("ExpAffine", dst, func(i int) float64 {
				return math.Exp(float64(x[i])*0.5-1) * (0.25 - 2*float64(x[i]))
			})
			MulAffine(dst, y, x, 0.25, -2)
			check("MulAffine", dst, func(i int) float64 { return float64(y[i]) * (0.25 - 2*float64(x[i])) })
			SiLUMul(dst, x, y)
			check("SiLUMul", dst, func(i int) float64 { return float64(x[i]) * sig(x[i]) * float64(y[i]) })
			SiLUMulGradA(dst, x, y, g)
			check("SiLUMulGradA", dst, func(i int) float64 {
				s := sig(x[i])
				return float64(g[i]) * float64(y[i]) * s * (1 + float64(x[i])*(1-s))
			})
			SiLUMulGradB(dst, x, g)
			check("SiLUMulGradB", dst, func(i int) float64 { return float64(g[i]) * float64(x[i]) * sig(x[i]) })
			c := append([]float32(nil), y...)
			Scale(c, -1.5)
			check("Scale", c, func(i int) float64 { return -1.5 * float64(y[i]) })
			c = append(c[:0], y...)
			Axpy(c, x, 0.75)
			check("Axpy", c, func(i int) float64 { return float64(y[i]) + 0.75*float64(x[i]) })
		}
	})
}

// BenchmarkExpSum: the softmax pass over one 2048-wide row of logits.
func BenchmarkExpSum(b *testing.B) {
	x, dst := make([]float32, 2048), make([]float32, 2048)
	for i := range x {
		x[i] = float32(i%97) * -0.1
	}
	for _, off := range []bool{false, true} {
		b.Run(fmt.Sprintf("fallback=%v", off), func(b *testing.B) {
			Disable = off
			defer func() { Disable = false }()
			for range b.N {
				ExpSum(dst, x, 1, 0)
			}
			b.ReportMetric(float64(b.N*len(x))/b.Elapsed().Seconds()/1e9, "Gexp/s")
		})
	}
}
