package model

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/swetui/swetui/config"
)

// Benchmarks of the default model (config.toml's [model]). Compare with
// testdata/torch_bench.py, the same training step in PyTorch:
//
//	go test ./model -run '^$' -bench . -benchtime 5x
//	go test -tags blas ./model -run '^$' -bench . -benchtime 5x
//	/usr/bin/python3 model/testdata/torch_bench.py

const benchB, benchT, benchPrompt = 4, 256, 64

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
			b.ResetTimer()
			for range b.N {
				cs, err := m.Sample(ctx, prompt, 4, SampleOptions{Temperature: 1, MaxNewTokens: 128, Rand: r})
				if err != nil {
					b.Fatal(err)
				}
				for _, c := range cs {
					n += len(c.Tokens)
				}
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}
