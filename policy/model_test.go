package policy_test

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"slices"
	"testing"

	"github.com/swetui/swetui/model"
	"github.com/swetui/swetui/policy"
	"github.com/swetui/swetui/policy/policytest"
	"github.com/swetui/swetui/train"
)

func TestModelPolicyLogprobsAgreeWithSampler(t *testing.T) {
	p, tok := policytest.Tiny(t, 1, 1e-3)
	ctx := context.Background()
	prompt := tok.Encode("fix the bug")
	samples, err := p.Sample(ctx, prompt, 4, train.SampleOptions{Temperature: 1, TopP: 1, MaxNewTokens: 12})
	if err != nil {
		t.Fatal(err)
	}
	seqs := make([]train.Sequence, len(samples))
	for i, s := range samples {
		seqs[i] = train.Sequence{Prompt: prompt, Completion: s.Tokens}
	}
	lp, err := p.Logprobs(ctx, seqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range samples {
		for j := range s.Tokens {
			if d := math.Abs(lp[i][j] - s.Logprobs[j]); d > 1e-4 {
				t.Fatalf("seq %d token %d: graph %.6f sampler %.6f", i, j, lp[i][j], s.Logprobs[j])
			}
		}
	}
}

func stepOnce(t *testing.T, p *policy.Model, tok *model.Tokenizer) {
	t.Helper()
	seqs := []train.Sequence{{Prompt: tok.Encode("fix the"), Completion: tok.Encode(" bug in add")}}
	cot := [][]float64{make([]float64, len(seqs[0].Completion))}
	for i := range cot[0] {
		cot[0][i] = -1
	}
	if _, _, err := p.Backward(context.Background(), seqs, cot); err != nil {
		t.Fatal(err)
	}
	p.Step()
}

func TestSnapshotSamplingFollowsTheSteps(t *testing.T) {
	ctx := context.Background()
	live, tok := policytest.Tiny(t, 4, 1e-2)
	snap, _ := policytest.Tiny(t, 4, 1e-2)
	opts := train.SampleOptions{Temperature: 1, TopP: 1, MaxNewTokens: 10}
	prompt := tok.Encode("fix the bug")
	if _, _, err := snap.SampleSnapshot(ctx, prompt, 2, opts); err == nil {
		t.Fatal("SampleSnapshot before StartSnapshots: want an error")
	}
	snap.StartSnapshots()
	for v := range 3 {
		want, err := live.Sample(ctx, prompt, 3, opts)
		if err != nil {
			t.Fatal(err)
		}
		got, version, err := snap.SampleSnapshot(ctx, prompt, 3, opts)
		if err != nil {
			t.Fatal(err)
		}
		if version != v || !reflect.DeepEqual(got, want) {
			t.Fatalf("update %d: snapshot version %d; samples equal to the live weights' %v", v, version, reflect.DeepEqual(got, want))
		}
		stepOnce(t, live, tok)
		stepOnce(t, snap, tok)
	}
}

// TestSnapshotInUseIsNotOverwritten holds a snapshot (as a slow sampler
// would) across two updates: its weights stay those of its version, and it
// is recycled once released.
func TestSnapshotInUseIsNotOverwritten(t *testing.T) {
	p, tok := policytest.Tiny(t, 5, 1e-2)
	p.StartSnapshots()
	held, v, release, err := policy.Snaps(p).Acquire()
	if err != nil {
		t.Fatal(err)
	}
	before := slices.Clone(held.Weights())
	stepOnce(t, p, tok)
	stepOnce(t, p, tok)
	if !slices.Equal(held.Weights(), before) || v != 0 {
		t.Fatal("a snapshot in use was overwritten by an update")
	}
	newest, nv, releaseNewest, _ := policy.Snaps(p).Acquire()
	if nv != 2 || !slices.Equal(newest.Weights(), p.Model.Weights()) {
		t.Fatalf("newest snapshot is version %d, want 2 with the live weights", nv)
	}
	releaseNewest()
	release()
	stepOnce(t, p, tok) // publishes into a spare
	stepOnce(t, p, tok)
	if n := len(policy.Snaps(p).Drain()); n > 3 {
		t.Fatalf("%d snapshots after four updates, want at most 3", n)
	}
}

// TestSnapshotSamplingRunsDuringUpdates samples from snapshots in one
// goroutine while another trains (run it with -race): versions never go
// back and every sample is well formed.
func TestSnapshotSamplingRunsDuringUpdates(t *testing.T) {
	p, tok := policytest.Tiny(t, 6, 1e-2)
	p.StartSnapshots()
	done := make(chan struct{})
	errs := make(chan error, 1)
	go func() {
		defer close(errs)
		last := 0
		for {
			select {
			case <-done:
				return
			default:
			}
			s, v, err := p.SampleSnapshot(context.Background(), tok.Encode("fix"), 2, train.SampleOptions{Temperature: 1, MaxNewTokens: 8})
			if err == nil && (v < last || len(s) != 2 || len(s[0].Tokens) != len(s[0].Logprobs)) {
				err = fmt.Errorf("version %d after %d, %d samples", v, last, len(s))
			}
			if err != nil {
				errs <- err
				return
			}
			last = v
		}
	}()
	for range 20 {
		stepOnce(t, p, tok)
	}
	close(done)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
}
