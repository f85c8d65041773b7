package model

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestConversationKeepsItsCache: an agent's trajectory sampled turn by turn
// through one Conversation (each turn's context the last one's, its
// completion and an observation) prefills only what each turn adds, and
// every turn's behaviour logprobs equal what the training graph computes
// for the whole trajectory; greedy turns are the tokens a fresh Sample of
// the same context draws. A context that departs from the cache inside it
// is computed from there. Long observations cross the chunk size.
func TestConversationKeepsItsCache(t *testing.T) {
	cases := []struct {
		name string
		cfg  func(*Config)
		opts SampleOptions
	}{
		{"temp0.9", func(*Config) {}, SampleOptions{Temperature: 0.9, MaxNewTokens: 12}},
		{"greedy-bias-mqa", func(c *Config) { c.AttnBias, c.KVHeads = true, 1 }, SampleOptions{MaxNewTokens: 10}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tinyConfig()
			cfg.Context = 512
			tc.cfg(&cfg)
			m := tinyModel(t, cfg, 7)
			ctx := context.Background()
			r := rand.New(rand.NewPCG(3, 3))
			obs := func(n int) []int {
				o := make([]int, n)
				for i := range o {
					o[i] = r.IntN(cfg.VocabSize)
				}
				return o
			}
			cv := m.NewConversation()
			traj := obs(9) // the prompt
			var sampled [][2]int
			var lps []float32
			for turn, add := range []int{0, 5, convChunk + 40, 1} {
				traj = append(traj, obs(add)...)
				before := cv.Cached()
				o := tc.opts
				o.Rand = rand.New(rand.NewPCG(uint64(turn), 1))
				c, err := cv.Sample(ctx, traj, o)
				if err != nil {
					t.Fatal(err)
				}
				if turn > 0 && before != len(traj)-add-1 {
					t.Errorf("turn %d: %d tokens cached before it, want %d (all but the last reply token)", turn, before, len(traj)-add-1)
				}
				if got := cv.Cached(); got != len(traj)+len(c.Tokens)-1 {
					t.Errorf("turn %d: %d cached after, want %d", turn, got, len(traj)+len(c.Tokens)-1)
				}
				if tc.opts.Temperature == 0 {
					fresh, err := m.Sample(ctx, traj, 1, o)
					if err != nil {
						t.Fatal(err)
					}
					if !slices.Equal(fresh[0].Tokens, c.Tokens) {
						t.Errorf("turn %d: greedy %v from the cache, %v fresh", turn, c.Tokens, fresh[0].Tokens)
					}
				}
				sampled = append(sampled, [2]int{len(traj), len(c.Tokens)})
				lps = append(lps, c.Logprobs...)
				traj = append(traj, c.Tokens...)
			}
			// The training graph over the whole trajectory.
			res, err := m.Logprobs(ctx, Batch{Tokens: [][]int{traj}, PromptLen: []int{1}, Temperature: tc.opts.Temperature})
			if err != nil {
				t.Fatal(err)
			}
			var graph []float32
			for _, s := range sampled {
				graph = append(graph, res.Logprobs[0][s[0]-1:s[0]-1+s[1]]...)
			}
			var worst float64
			for i := range lps {
				worst = math.Max(worst, math.Abs(float64(lps[i]-graph[i])))
			}
			t.Logf("%d sampled tokens over 4 turns: max |Δ logprob| against the graph %.2g", len(lps), worst)
			if worst > 1e-4 {
				t.Errorf("conversation and graph logprobs differ by %g", worst)
			}
			// Depart from the cache in the middle: computed from there.
			alt := slices.Clone(traj[:len(traj)-3])
			alt[20] = (alt[20] + 1) % cfg.VocabSize
			o := tc.opts
			o.Temperature, o.Rand = 0, nil
			got, err := cv.Sample(ctx, alt, o)
			if err != nil {
				t.Fatal(err)
			}
			want, err := m.Sample(ctx, alt, 1, o)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.Tokens, want[0].Tokens) || math.Abs(float64(got.Logprobs[0]-want[0].Logprobs[0])) > 1e-4 {
				t.Errorf("after departing at 20: %v %v, fresh %v %v", got.Tokens, got.Logprobs[:1], want[0].Tokens, want[0].Logprobs[:1])
			}
		})
	}
}

func BenchmarkConversationTurn(b *testing.B) {
	// The default model at agent mode's context: a turn adding a 300-token
	// observation to a 3000-token trajectory and a 100-token reply, from the
	// cache and prefilled afresh.
	cfg := Config{Layers: 4, DModel: 128, Heads: 4, KVHeads: 2, DFF: 384, Context: 4096, VocabSize: 2048, RopeTheta: 10000, NormEps: 1e-5}
	m := tinyModel(b, cfg, 1)
	ctx := context.Background()
	traj := make([]int, 3400)
	for i := range traj {
		traj[i] = (i * 7) % cfg.VocabSize
	}
	o := SampleOptions{Temperature: 1, MaxNewTokens: 100}
	b.Run("cached", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			cv := m.NewConversation()
			if _, err := cv.Sample(ctx, traj[:3000], SampleOptions{MaxNewTokens: 1}); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			if _, err := cv.Sample(ctx, traj, o); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("fresh", func(b *testing.B) {
		for b.Loop() {
			if _, err := m.Sample(ctx, traj, 1, o); err != nil {
				b.Fatal(err)
			}
		}
	})
}
