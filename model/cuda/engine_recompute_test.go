package cuda

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/model"
)

// TestRecomputeIsExact: a backward that recomputes each layer's forward
// gives bit for bit the logprobs, entropies and gradients of one that kept
// every activation (fp32, the CPU kernels), for full fine-tuning and LoRA,
// across micro-batches and head chunks; and its plan holds less.
func TestRecomputeIsExact(t *testing.T) {
	ctx := context.Background()
	def := model.ConfigFrom(config.Default().Model)
	cases := []struct {
		name string
		cfg  model.Config
		lora bool
		opts Options
	}{
		{"default", def, false, Options{}},
		{"qwen2-split", qwen2Small(), false, Options{MicroTokens: 64, HeadRows: 5}},
		{"qwen2-lora", qwen2Small(), true, Options{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			base := testModel(t, tc.cfg, 11)
			var l *model.LoRA
			if tc.lora {
				l = testLoRA(t, base, model.LoRATargets)
			}
			r := rand.New(rand.NewPCG(5, 5))
			b := testBatch(r, tc.cfg.VocabSize, []int{40, 23, 61, 9}, []int{30, 5, 50, 2}, 0.9)
			cot, ent := randCot(r, b, 1), randCot(r, b, 0.3)
			type out struct {
				lp, ent, grads []float32
				plan           int
			}
			run := func(recompute bool) out {
				o := tc.opts
				o.Train, o.Recompute = true, recompute
				if l != nil {
					o.LoRA = l.Clone()
				}
				e, err := NewEngine(testDevice(t), base.Clone(), o)
				if err != nil {
					t.Fatal(err)
				}
				defer e.Close()
				res, err := e.BackwardEntropy(ctx, b, cot, ent)
				if err != nil {
					t.Fatal(err)
				}
				n := base.NumParams()
				if l != nil {
					n = l.NumParams()
				}
				g := make([]float32, n)
				if err := e.Grads(g); err != nil {
					t.Fatal(err)
				}
				plan, err := e.PlanBytes(4, 64, true)
				if err != nil {
					t.Fatal(err)
				}
				return out{flat(res.Logprobs), flat(res.Entropy), g, plan}
			}
			kept, again := run(false), run(true)
			for _, c := range []struct {
				name      string
				got, want []float32
			}{{"logprobs", again.lp, kept.lp}, {"entropy", again.ent, kept.ent}, {"gradients", again.grads, kept.grads}} {
				if !slices.Equal(c.got, c.want) {
					t.Errorf("%s: recomputed differ from kept (relative error %.2e)", c.name, relErr(c.got, c.want))
				}
			}
			if again.plan >= kept.plan {
				t.Errorf("a recomputing plan holds %d bytes, a keeping one %d", again.plan, kept.plan)
			}
		})
	}
}
