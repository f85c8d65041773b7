package model

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestTurnBatchDrawsWhatEachConversationWould: trajectories whose turns
// join a batch of fewer rows than trajectories at different steps, with
// replies of different lengths (a stop token, their own limits), each draw
// the reply its own Conversation.Sample draws from the same random source:
// the same tokens, logprobs within float rounding, the same cache after.
// Each turn's context is the last one's, its reply and an observation, so
// the batch's caches carry from turn to turn as a conversation's do.
func TestTurnBatchDrawsWhatEachConversationWould(t *testing.T) {
	cases := []struct {
		name string
		cfg  func(*Config)
		temp float32
		rows int
	}{
		{"temp0.9-rows3", func(*Config) {}, 0.9, 3},
		{"greedy-bias-mqa-rows2", func(c *Config) { c.AttnBias, c.KVHeads = true, 1 }, 0, 2},
		{"temp1-rows1", func(*Config) {}, 1, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tinyConfig()
			cfg.Context = 512
			tc.cfg(&cfg)
			m := tinyModel(t, cfg, 11)
			ctx := context.Background()
			r := rand.New(rand.NewPCG(5, 5))
			toks := func(n int) []int {
				o := make([]int, n)
				for i := range o {
					o[i] = r.IntN(cfg.VocabSize)
				}
				return o
			}
			const trajs, turns = 5, 3
			b := m.NewTurnBatch(tc.rows)
			type traj struct {
				ctx      []int
				cv, ref  *Conversation
				turn     int
				waiting  bool // its next turn is due
				opts     SampleOptions
				refReply Completion
			}
			ts := make([]*traj, trajs)
			byConv := map[*Conversation]*traj{}
			begin := func(tr *traj, i int) {
				seed := uint64(100*i + tr.turn)
				tr.opts = SampleOptions{Temperature: tc.temp, MaxNewTokens: 4 + 3*i, Stop: []int{7, 19}, Rand: rand.New(rand.NewPCG(seed, 1))}
				ref := tr.opts
				ref.Rand = rand.New(rand.NewPCG(seed, 1))
				var err error
				if tr.refReply, err = tr.ref.Sample(ctx, tr.ctx, ref); err != nil {
					t.Fatal(err)
				}
				if err := b.Add(ctx, tr.cv, tr.ctx, tr.opts); err != nil {
					t.Fatal(err)
				}
				tr.waiting = false
			}
			for i := range ts {
				ts[i] = &traj{ctx: toks(10 + 17*i), cv: b.NewConversation(), ref: m.NewConversation(), waiting: true}
				byConv[ts[i].cv] = ts[i]
			}
			replies := 0
			for step := 0; replies < trajs*turns; step++ {
				if step > 2000 {
					t.Fatal("the batch does not finish its replies")
				}
				// Trajectory i's turns are due from step 2i on, as rows free.
				for i, tr := range ts {
					if tr.waiting && tr.turn < turns && step >= 2*i && b.Free() > 0 {
						begin(tr, i)
					}
				}
				if b.Len() > tc.rows {
					t.Fatalf("%d replies in a batch of %d rows", b.Len(), tc.rows)
				}
				done := b.Step()
				for _, f := range done {
					tr := byConv[f.Conversation]
					got, want := f.Completion, tr.refReply
					if !slices.Equal(got.Tokens, want.Tokens) || got.Truncated != want.Truncated {
						t.Fatalf("trajectory %v turn %d: batch drew %v (truncated %v), its conversation %v (%v)",
							slices.Index(ts, tr), tr.turn, got.Tokens, got.Truncated, want.Tokens, want.Truncated)
					}
					for j := range got.Logprobs {
						if d := math.Abs(float64(got.Logprobs[j] - want.Logprobs[j])); d > 1e-5 {
							t.Errorf("trajectory %d turn %d token %d: logprob %v, its conversation's %v", slices.Index(ts, tr), tr.turn, j, got.Logprobs[j], want.Logprobs[j])
						}
					}
					if tr.cv.Cached() != tr.ref.Cached() || tr.cv.Cached() != len(tr.ctx)+len(got.Tokens)-1 {
						t.Errorf("trajectory %d turn %d: %d cached, its conversation %d, want %d", slices.Index(ts, tr), tr.turn, tr.cv.Cached(), tr.ref.Cached(), len(tr.ctx)+len(got.Tokens)-1)
					}
					tr.ctx = append(append(tr.ctx, got.Tokens...), toks(3+tr.turn*40)...)
					tr.turn++
					tr.waiting = true
					replies++
				}
			}
			if b.Len() != 0 {
				t.Errorf("%d replies left in the batch", b.Len())
			}
		})
	}
}

// TestTurnBatchRefuses: a conversation of another batch, a second reply of
// one in the making, a full batch; Remove frees a row.
func TestTurnBatchRefuses(t *testing.T) {
	cfg := tinyConfig()
	cfg.Context = 64
	m := tinyModel(t, cfg, 3)
	ctx := context.Background()
	b := m.NewTurnBatch(1)
	cv := b.NewConversation()
	o := SampleOptions{MaxNewTokens: 3}
	for _, tc := range []struct {
		name string
		cv   *Conversation
		want string
	}{
		{"another batch's", m.NewTurnBatch(1).NewConversation(), "not the batch's"},
		{"a plain conversation", m.NewConversation(), "not the batch's"},
		{"first", cv, ""},
		{"full", b.NewConversation(), "rows are taken"},
	} {
		err := b.Add(ctx, tc.cv, []int{1, 2, 3}, o)
		if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	if b2 := m.NewTurnBatch(2); b2.Add(ctx, b2.NewConversation(), make([]int, 64), o) == nil {
		t.Error("a context filling the model was taken")
	}
	b.Remove(cv)
	if b.Len() != 0 || b.Free() != 1 {
		t.Errorf("after Remove: %d in the batch, %d free", b.Len(), b.Free())
	}
	if err := b.Add(ctx, cv, []int{1, 2, 3}, o); err != nil {
		t.Errorf("after Remove: %v", err)
	}
}

// BenchmarkTurnBatch: the turns of 8 trajectories at agent mode's context
// (each adding a 300-token observation to a 3000-token trajectory and
// drawing a 100-token reply), decoded together in a TurnBatch and one
// conversation after another: the default model, and one 4x as wide, whose
// weights rather than its attention make a step's cost.
func BenchmarkTurnBatch(b *testing.B) {
	for _, d := range []int{128, 512} {
		b.Run(fmt.Sprintf("d_model=%d", d), func(b *testing.B) {
			benchTurnBatch(b, Config{Layers: 4, DModel: d, Heads: d / 32, KVHeads: 2, DFF: 3 * d, Context: 4096, VocabSize: 2048, RopeTheta: 10000, NormEps: 1e-5})
		})
	}
}

func benchTurnBatch(b *testing.B, cfg Config) {
	m := tinyModel(b, cfg, 1)
	ctx := context.Background()
	const n = 8
	trajs := make([][]int, n)
	for i := range trajs {
		trajs[i] = make([]int, 3400)
		for j := range trajs[i] {
			trajs[i][j] = (j*7 + i) % cfg.VocabSize
		}
	}
	// Greedy with no stop token: every reply is 100 tokens.
	o := SampleOptions{MaxNewTokens: 100}
	tb := m.NewTurnBatch(n)
	convs := make([]*Conversation, n)
	for i := range convs {
		convs[i] = tb.NewConversation()
	}
	warm := func(b *testing.B) {
		b.StopTimer()
		for i, cv := range convs {
			if _, err := cv.Sample(ctx, trajs[i][:3000], SampleOptions{MaxNewTokens: 1}); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
	}
	b.Run("together", func(b *testing.B) {
		for b.Loop() {
			warm(b)
			for i, cv := range convs {
				if err := tb.Add(ctx, cv, trajs[i], o); err != nil {
					b.Fatal(err)
				}
			}
			for tb.Len() > 0 {
				tb.Step()
			}
		}
		b.ReportMetric(b.Elapsed().Seconds()*1e3/float64(b.N*n), "ms/reply")
	})
	b.Run("one-by-one", func(b *testing.B) {
		for b.Loop() {
			warm(b)
			for i, cv := range convs {
				if _, err := cv.Sample(ctx, trajs[i], o); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(b.Elapsed().Seconds()*1e3/float64(b.N*n), "ms/reply")
	})
}
