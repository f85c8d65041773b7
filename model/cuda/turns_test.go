package cuda

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/swetui/swetui/model"
)

// TestSampleTurnKeepsItsCache: agent trajectories sampled turn by turn on
// the engine (their turns interleaved, as a group's are) each keep a cache
// slot: a turn computes only what its context adds, crossing the rows a
// step takes; greedy turns are what model.Conversation and a fresh Sample
// draw, their logprobs the training forward's over the whole trajectory;
// a write of the weights drops every cache.
func TestSampleTurnKeepsItsCache(t *testing.T) { checkSampleTurn(t, NewCPU()) }

// TestGPUSampleTurnKeepsItsCache is the same on the GPU (fp32).
func TestGPUSampleTurnKeepsItsCache(t *testing.T) { checkSampleTurn(t, openGPU(t)) }

func checkSampleTurn(t *testing.T, dev Device) {
	ctx := context.Background()
	cfg := qwen2Small() // context 128
	cfg.Context = 512
	ref := testModel(t, cfg, 31)
	e, err := NewEngine(dev, ref.Clone(), Options{Train: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	r := rand.New(rand.NewPCG(8, 8))
	obs := func(n int) []int {
		o := make([]int, n)
		for i := range o {
			o[i] = r.IntN(cfg.VocabSize)
		}
		return o
	}
	prompt := obs(20)
	trajs := [][]int{slices.Clone(prompt), append(slices.Clone(prompt), 7)}
	convs := []*model.Conversation{ref.NewConversation(), ref.NewConversation()}
	held := make([]int, 2)
	var lps [2][]float32
	var spans [2][][2]int
	o := model.SampleOptions{MaxNewTokens: 12}
	for turn, add := range []int{0, 3, turnRows + 30} {
		for i := range trajs {
			trajs[i] = append(trajs[i], obs(add)...)
			if turn > 0 && !slices.ContainsFunc(e.turns.held, func(h []int) bool { return len(h) == held[i] }) {
				t.Errorf("turn %d, trajectory %d: no slot holds its %d tokens", turn, i, held[i])
			}
			got, err := e.SampleTurn(ctx, trajs[i], 2, o)
			if err != nil {
				t.Fatal(err)
			}
			fresh, err := e.Sample(ctx, trajs[i], 1, o)
			if err != nil {
				t.Fatal(err)
			}
			conv, err := convs[i].Sample(ctx, trajs[i], o)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.Tokens, fresh[0].Tokens) || !slices.Equal(got.Tokens, conv.Tokens) {
				t.Fatalf("turn %d, trajectory %d: %v from the slot, %v fresh, %v from the CPU conversation", turn, i, got.Tokens, fresh[0].Tokens, conv.Tokens)
			}
			held[i] = len(trajs[i]) + len(got.Tokens) - 1
			spans[i] = append(spans[i], [2]int{len(trajs[i]), len(got.Tokens)})
			lps[i] = append(lps[i], got.Logprobs...)
			trajs[i] = append(trajs[i], got.Tokens...)
		}
	}
	for i := range trajs {
		res, err := e.Logprobs(ctx, model.Batch{Tokens: [][]int{trajs[i]}, PromptLen: []int{1}})
		if err != nil {
			t.Fatal(err)
		}
		var forward []float32
		for _, s := range spans[i] {
			forward = append(forward, res.Logprobs[0][s[0]-1:s[0]-1+s[1]]...)
		}
		if d := relErr(lps[i], forward); d > 1e-4 {
			t.Errorf("trajectory %d: turn logprobs vs the training forward: relative error %.2e", i, d)
		}
	}
	if err := e.Upload(ref); err != nil {
		t.Fatal(err)
	}
	if _, err := e.SampleTurn(ctx, trajs[0][:40], 2, o); err != nil {
		t.Fatal(err)
	}
	kept := 0
	for _, h := range e.turns.held {
		if len(h) > 0 {
			kept++
		}
	}
	if kept != 1 {
		t.Errorf("after a write of the weights and one turn, %d slots hold tokens, want 1", kept)
	}
}
