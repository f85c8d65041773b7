package policy_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/swetui/swetui/policy"
	"github.com/swetui/swetui/policy/policytest"
	"github.com/swetui/swetui/train"
)

// TestSampleTurnKeepsEachTrajectorysCache: two agent trajectories of one
// prompt, their turns interleaved as a group's are, each continue their own
// cache (the other's, which departs from it, is left alone); a turn's reply
// is what Sample draws for the same context, greedy, with the same
// logprobs; an update forgets every cache, as the weights it held are gone.
func TestSampleTurnKeepsEachTrajectorysCache(t *testing.T) {
	p, tok := policytest.Tiny(t, 1, 1e-2)
	ctx := context.Background()
	opts := train.SampleOptions{MaxNewTokens: 5}
	prompt := tok.Encode("fix add")
	trajs := [][]int{slices.Clone(prompt), slices.Clone(prompt)}
	trajs[1] = append(trajs[1], tok.Encode(" other")...) // another trajectory of the task
	obs := tok.Encode("\n0\n")
	held := make([]int, len(trajs)) // what each trajectory's cache holds after its last turn
	for turn := range 3 {
		for i := range trajs {
			if turn > 0 && !slices.Contains(policy.TurnsCached(p), held[i]) {
				t.Errorf("turn %d, trajectory %d: no cache holds its %d tokens so far: %v", turn, i, held[i], policy.TurnsCached(p))
			}
			got, err := p.SampleTurn(ctx, trajs[i], opts)
			if err != nil {
				t.Fatal(err)
			}
			want, err := p.Sample(ctx, trajs[i], 1, opts)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.Tokens, want[0].Tokens) {
				t.Fatalf("turn %d, trajectory %d: %v from the cache, %v from Sample", turn, i, got.Tokens, want[0].Tokens)
			}
			for j := range got.Logprobs {
				if d := math.Abs(got.Logprobs[j] - want[0].Logprobs[j]); d > 1e-4 {
					t.Errorf("turn %d, trajectory %d, token %d: logprob %.6f, Sample's %.6f", turn, i, j, got.Logprobs[j], want[0].Logprobs[j])
				}
			}
			held[i] = len(trajs[i]) + len(got.Tokens) - 1
			trajs[i] = append(append(trajs[i], got.Tokens...), obs...)
		}
	}
	kept := policy.TurnsCached(p)
	if len(kept) != 2 {
		t.Fatalf("%d trajectories cached, want 2: %v", len(kept), kept)
	}
	if !slices.Contains(kept, held[0]) || !slices.Contains(kept, held[1]) {
		t.Errorf("after 3 turns the caches hold %v tokens, want %v", kept, held)
	}
	stepOnce(t, p, tok)
	if n := policy.TurnsCached(p); len(n) != 0 {
		t.Errorf("after an update %d caches are kept: %v", len(n), n)
	}
}

// TestSampleTurnConcurrentTrajectories: trajectories asking for their
// turns from goroutines of their own, as a group's do, are decoded
// together and each gets what Sample draws for its context (greedy, the
// same logprobs); a caller that gave up gets its context's error and the
// others go on.
func TestSampleTurnConcurrentTrajectories(t *testing.T) {
	p, tok := policytest.Tiny(t, 1, 1e-2)
	ctx := context.Background()
	opts := train.SampleOptions{MaxNewTokens: 6}
	obs := tok.Encode("\n0\n")
	const trajs, turns = 6, 3
	var wg sync.WaitGroup
	errs := make([]error, trajs)
	got := make([][][]int, trajs)
	contexts := make([][][]int, trajs)
	for i := range trajs {
		wg.Go(func() {
			traj := tok.Encode(strings.Repeat("fix add ", i+1))
			for range turns {
				s, err := p.SampleTurn(ctx, traj, opts)
				if err != nil {
					errs[i] = err
					return
				}
				contexts[i] = append(contexts[i], slices.Clone(traj))
				got[i] = append(got[i], s.Tokens)
				traj = append(append(traj, s.Tokens...), obs...)
			}
		})
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := p.SampleTurn(cancelled, tok.Encode("fix"), opts); !errors.Is(err, context.Canceled) {
		t.Errorf("a caller that gave up: %v, want its context's error", err)
	}
	wg.Wait()
	for i := range trajs {
		if errs[i] != nil {
			t.Fatalf("trajectory %d: %v", i, errs[i])
		}
		for turn, c := range contexts[i] {
			want, err := p.Sample(ctx, c, 1, opts)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got[i][turn], want[0].Tokens) {
				t.Errorf("trajectory %d turn %d: %v decoded together, %v from Sample", i, turn, got[i][turn], want[0].Tokens)
			}
		}
	}
}
