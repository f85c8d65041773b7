package model

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/internal/sgemm"
)

// Benchmarks of the default model (config.toml's [model]). Each reports
// tokens/s, the useful GFLOP/s (matmuls and causal attention; no padding or
// thrown-away tile rows) and that as a share of the machine's measured fp32
// FMA peak (internal/sgemm's PeakGFLOPS). Compare with testdata/torch_bench.py
// (the same training step in PyTorch) and testdata/torch_decode.py (the
// same KV-cache sampling); `make bench` runs them all side by side.
//
//	go test ./model -run '^$' -bench . -benchtime 5x
//	go test -tags blas ./model -run '^$' -bench . -benchtime 5x
//	/usr/bin/python3 model/testdata/torch_bench.py
//	/usr/bin/python3 model/testdata/torch_decode.py

const benchB, benchT, benchPrompt = 4, 256, 64

// BenchmarkFMAPeak is the yardstick: fp32 FMA throughput on all cores.
func BenchmarkFMAPeak(b *testing.B) {
	var best float64
	for range b.N {
		best = max(best, sgemm.MeasurePeak(runtime.GOMAXPROCS(0), 20*time.Millisecond))
	}
	b.ReportMetric(best, "GFLOP/s")
	b.ReportMetric(sgemm.PeakGFLOPS(), "peak-GFLOP/s")
}

// forwardFlops is the forward pass's useful work for one token at position
// pos (0-based): 2 flops per weight of every matmul, and 4·head_dim per
// query head and key it attends to (scores, then the weighted sum).
func forwardFlops(c Config, pos int) float64 {
	qd, kvd := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	mat := c.DModel*(qd+2*kvd) + qd*c.DModel + 3*c.DModel*c.DFF
	attn := 4 * c.Heads * c.HeadDim * (pos + 1)
	return float64(c.Layers*(2*mat+attn) + 2*c.DModel*c.VocabSize)
}

// seqFlops is the forward work of a sequence of t tokens.
func seqFlops(c Config, t int) float64 {
	var f float64
	for p := 0; p < t; p++ {
		f += forwardFlops(c, p)
	}
	return f
}

func reportFlops(b *testing.B, flopsPerOp float64) {
	g := flopsPerOp * float64(b.N) / b.Elapsed().Seconds() / 1e9
	b.ReportMetric(g, "GFLOP/s")
	b.ReportMetric(100*g/sgemm.PeakGFLOPS(), "%peak")
}

func benchModel(b *testing.B) *Model {
	m, err := New(ConfigFrom(config.Default().Model), 1)
	if err != nil {
		b.Fatal(err)
	}
	return m
}

func benchBatch(m *Model) (Batch, [][]float32) {
	r := rand.New(rand.NewPCG(1, 1))
	bt := testBatch(r, m.Cfg.VocabSize, []int{benchT, benchT, benchT, benchT}, []int{benchPrompt, benchPrompt, benchPrompt, benchPrompt})
	cot := make([][]float32, benchB)
	for i := range cot {
		cot[i] = make([]float32, benchT-benchPrompt)
		for j := range cot[i] {
			cot[i][j] = -1 / float32(benchB*(benchT-benchPrompt))
		}
	}
	return bt, cot
}

// BenchmarkTrainStep: Backward + clip + AdamW on 4×256 tokens.
func BenchmarkTrainStep(b *testing.B) {
	m := benchModel(b)
	o := NewAdamW(config.Default().Optim, m.NumParams())
	bt, cot := benchBatch(m)
	ctx := context.Background()
	if _, err := m.Backward(ctx, bt, cot); err != nil { // compile the bucket outside the timing
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		m.ZeroGrad()
		if _, err := m.Backward(ctx, bt, cot); err != nil {
			b.Fatal(err)
		}
		m.ClipGradNorm(1)
		if err := o.Update(m, 1e-4); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*benchB*benchT)/b.Elapsed().Seconds(), "tokens/s")
	reportFlops(b, 3*benchB*seqFlops(m.Cfg, benchT)) // backward ≈ twice the forward
}

// BenchmarkLogprobs: the forward-only pass (reference / old logprobs).
func BenchmarkLogprobs(b *testing.B) {
	m := benchModel(b)
	bt, _ := benchBatch(m)
	ctx := context.Background()
	if _, err := m.Logprobs(ctx, bt); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if _, err := m.Logprobs(ctx, bt); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*benchB*benchT)/b.Elapsed().Seconds(), "tokens/s")
	reportFlops(b, benchB*seqFlops(m.Cfg, benchT))
}

// BenchmarkSample: G=4 completions of 128 new tokens after a prompt
// (prefill included); tokens/s counts sampled tokens.
func BenchmarkSample(b *testing.B) {
	for _, plen := range []int{256, 768} {
		b.Run(fmt.Sprintf("prompt=%d", plen), func(b *testing.B) {
			m := benchModel(b)
			r := rand.New(rand.NewPCG(2, 2))
			prompt := make([]int, plen)
			for i := range prompt {
				prompt[i] = r.IntN(m.Cfg.VocabSize)
			}
			ctx := context.Background()
			n := 0
			var flops float64
			b.ResetTimer()
			for range b.N {
				cs, err := m.Sample(ctx, prompt, 4, SampleOptions{Temperature: 1, MaxNewTokens: 128, Rand: r})
				if err != nil {
					b.Fatal(err)
				}
				flops += seqFlops(m.Cfg, plen) // prefill
				for _, c := range cs {
					n += len(c.Tokens)
					for t := 0; t < len(c.Tokens)-1; t++ { // the last token is sampled, never fed
						flops += forwardFlops(m.Cfg, plen+t)
					}
				}
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "tokens/s")
			reportFlops(b, flops/float64(b.N))
		})
	}
}
