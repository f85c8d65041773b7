package sgemm

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// BenchmarkFMAPeak measures the fp32 FMA throughput on one core and on all
// of them: the ceiling the other benchmarks report their share of.
func BenchmarkFMAPeak(b *testing.B) {
	for _, w := range []int{1, runtime.GOMAXPROCS(0)} {
		b.Run(fmt.Sprintf("cores=%d", w), func(b *testing.B) {
			var best float64
			for range b.N {
				best = max(best, MeasurePeak(w, 20*time.Millisecond))
			}
			b.ReportMetric(best, "GFLOP/s")
		})
	}
}

// BenchmarkSgemm: the default model's products (4×256 tokens: d_model 128,
// d_ff 384, vocabulary 2048), forward and both gradients, against gonum.
func BenchmarkSgemm(b *testing.B) {
	peak := PeakGFLOPS()
	for _, s := range []struct {
		name    string
		tA, tB  bool
		m, n, k int
	}{
		{"qkv", false, false, 1024, 256, 128},
		{"mlp_up", false, false, 1024, 384, 128},
		{"mlp_down", false, false, 1024, 128, 384},
		{"lm_head", false, false, 1024, 2048, 128},
		{"lm_head_dx", false, true, 1024, 128, 2048},
		{"lm_head_dw", true, false, 128, 2048, 1024},
		{"attn_scores", false, true, 128, 256, 32},
		{"decode_G4", false, false, 4, 2048, 128},
		{"square512", false, false, 512, 512, 512},
	} {
		r := rand.New(rand.NewPCG(1, 2))
		a, bb, c := rnd(r, s.m*s.k), rnd(r, s.k*s.n), make([]float32, s.m*s.n)
		lda, ldb := s.k, s.n
		if s.tA {
			lda = s.m
		}
		if s.tB {
			ldb = s.k
		}
		flops := 2 * float64(s.m*s.n*s.k)
		for _, impl := range []string{"asm", "asm1", "gonum"} {
			b.Run(s.name+"/"+impl, func(b *testing.B) {
				ta, tb := blas.NoTrans, blas.NoTrans
				if s.tA {
					ta = blas.Trans
				}
				if s.tB {
					tb = blas.Trans
				}
				for range b.N {
					switch impl {
					case "asm":
						Sgemm(s.tA, s.tB, s.m, s.n, s.k, 1, a, lda, bb, ldb, 0, c, s.n)
					case "asm1":
						SgemmSerial(s.tA, s.tB, s.m, s.n, s.k, 1, a, lda, bb, ldb, 0, c, s.n)
					default:
						gonum.Implementation{}.Sgemm(ta, tb, s.m, s.n, s.k, 1, a, lda, bb, ldb, 0, c, s.n)
					}
				}
				g := flops * float64(b.N) / b.Elapsed().Seconds() / 1e9
				b.ReportMetric(g, "GFLOP/s")
				p := peak
				if impl != "asm" {
					p /= float64(runtime.GOMAXPROCS(0)) // one core's share
				}
				b.ReportMetric(100*g/p, "%peak")
			})
		}
	}
}
