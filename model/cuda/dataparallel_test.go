package cuda

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/model"
)

// TestDataParallelMatchesOneDevice: the same batches back-propagated on N
// ranks (each batch's sequences split across them) and
// on one device give the same gradient sum, norm and weights after each
// step, within the summation order's rounding, every replica equal to the
// bit;
// sampling and snapshots run on the ranks. Run by
// TestNCCLOnEmulatedDevices on 2 and 3 emulated devices.
func TestDataParallelMatchesOneDevice(t *testing.T) {
	devs, l := ncclRanks(t)
	ctx := context.Background()
	cfg := qwen2Small()
	m := testModel(t, cfg, 31)
	oc := config.Default().Optim
	sched, err := model.NewSchedule(oc, 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		act   DType
		shard bool
	}{{F32, false}, {F32, true}, {BF16, true}} {
		act := tc.act
		t.Run(fmt.Sprintf("%v ZeRO-1 %v", act, tc.shard), func(t *testing.T) {
			one, err := NewPolicy(devs[0], m.Clone(), Options{Act: act}, model.NewAdamW(oc, m.NumParams()), sched, oc.GradClip, []int{0}, 7)
			if err != nil {
				t.Fatal(err)
			}
			defer one.Close()
			comms, err := OpenComms(devs, l)
			if err != nil {
				t.Fatal(err)
			}
			dp, err := NewDataParallelPolicy(comms, m.Clone(), Options{Act: act}, model.NewAdamW(oc, m.NumParams()), sched, oc.GradClip, []int{0}, 7, tc.shard)
			if err != nil {
				t.Fatal(err)
			}
			defer dp.Close()
			// Each rank holds the moments the plan counts for it.
			w := Workload{Cfg: cfg, Act: act, GPUs: len(devs), ShardOptimizer: tc.shard}
			if got, want := int64(8*dp.Ranks[0].Engine.m.N), planItem(t, Plan(w), "AdamW moments"); got != want {
				t.Errorf("rank 0 allocated %d bytes of moments, the plan counts %d", got, want)
			}
			dp.StartSnapshots()
			rng := rand.New(rand.NewSource(5))
			batch := func() (model.Batch, [][]float32) {
				var b model.Batch
				var cot [][]float32
				for i := 0; i < 3; i++ {
					pl, cl := 4+rng.Intn(6), 3+rng.Intn(8)
					toks := make([]int, pl+cl)
					for j := range toks {
						toks[j] = rng.Intn(cfg.VocabSize)
					}
					row := make([]float32, cl)
					for j := range row {
						row[j] = float32(rng.NormFloat64()) / float32(cl)
					}
					b.Tokens, b.PromptLen, cot = append(b.Tokens, toks), append(b.PromptLen, pl), append(cot, row)
				}
				return b, cot
			}
			tol := 1e-5
			for step := 1; step <= 2; step++ {
				for i := 0; i < 2*len(devs)+1; i++ { // uneven: rank 0 gets one more
					b, cot := batch()
					lp1, e1, err := one.Backward(ctx, b, cot)
					if err != nil {
						t.Fatal(err)
					}
					lpN, eN, err := dp.Backward(ctx, b, cot)
					if err != nil {
						t.Fatal(err)
					}
					// The parts' logprobs come back in the batch's order.
					if d := relErr(flat(lpN), flat(lp1)); d > 1e-3 || math.Abs(eN-e1) > 1e-3*e1 {
						t.Fatalf("backward on %d ranks: logprobs off by %.2e, entropy %g vs %g", len(devs), d, eN, e1)
					}
				}
				// The gradients the ranks hold add up to the one device's:
				// what the all-reduce sums. (Step's AdamW then is the same
				// arithmetic on every rank; its first update is a sign,
				// which turns a rounding in a near-zero gradient into a
				// whole step, so the updates themselves are not compared.)
				g1 := make([]float32, m.NumParams())
				if err := one.Engine.Grads(g1); err != nil {
					t.Fatal(err)
				}
				sum := make([]float64, len(g1))
				for _, rp := range dp.Ranks {
					g := make([]float32, len(g1))
					if err := rp.Engine.Grads(g); err != nil {
						t.Fatal(err)
					}
					for i, v := range g {
						sum[i] += float64(v)
					}
				}
				gN := make([]float32, len(sum))
				for i, v := range sum {
					gN[i] = float32(v)
				}
				if d := relErr(gN, g1); d > tol {
					t.Errorf("step %d: the ranks' gradients sum to the one device's within %.2e", step, d)
				} else {
					t.Logf("%s step %d: gradients on %d ranks vs one device: relative error %.2e", t.Name(), step, len(devs), d)
				}
				n1, lr1 := one.Step()
				nN, lrN := dp.Step()
				if lr1 != lrN || relErr([]float32{float32(n1)}, []float32{float32(nN)}) > tol {
					t.Errorf("step %d: norm %g lr %g on one device, %g %g on %d", step, n1, lr1, nN, lrN, len(devs))
				}
				want := m.Clone()
				if err := one.Sync(want); err != nil {
					t.Fatal(err)
				}
				// The run's moments, gathered from every rank's part.
				if err := dp.Sync(m.Clone()); err != nil {
					t.Fatal(err)
				}
				m1, v1 := one.Optim.State()
				mN, vN := dp.Ranks[0].Optim.State()
				if d := max(relErr(mN, m1), relErr(vN, v1)); d > 1e-4 {
					t.Errorf("step %d: the moments synced from %d ranks vs one device: relative error %.2e", step, len(devs), d)
				}
				var rank0 []float32
				for r, rp := range dp.Ranks {
					got := m.Clone()
					if err := rp.Sync(got); err != nil {
						t.Fatal(err)
					}
					if r == 0 {
						rank0 = got.Weights()
						if d := relErr(rank0, want.Weights()); d > tol {
							t.Errorf("step %d: weights on %d ranks vs one device: relative error %.2e", step, len(devs), d)
						} else {
							t.Logf("%s step %d: weights on %d ranks vs one device: relative error %.2e", t.Name(), step, len(devs), d)
						}
					} else if fmt.Sprint(got.Weights()) != fmt.Sprint(rank0) {
						t.Errorf("step %d: rank %d's weights differ from rank 0's", step, r)
					}
				}
				if dp.Version() != step || one.Version() != step {
					t.Errorf("versions %d and %d after step %d", dp.Version(), one.Version(), step)
				}
			}
			// Sampling is spread over the ranks, from the newest snapshot.
			for i := 0; i < len(devs); i++ {
				cs, v, err := dp.SampleSnapshot(ctx, []int{3, 14, 15, 92}, 2, model.SampleOptions{Temperature: 0.9, MaxNewTokens: 4})
				if err != nil || len(cs) != 2 || v != 2 {
					t.Fatalf("snapshot sample: %d completions at version %d: %v", len(cs), v, err)
				}
			}
			// An agent's trajectory: its second turn goes to the rank that
			// holds the keys of its first, which computes only what the
			// turn adds (taken in turn, it would land on another rank and
			// prefill the whole context again).
			reused := func() (n int64) {
				for _, rp := range dp.Ranks {
					n += rp.Engine.turnReused.Load()
				}
				return n
			}
			turn := model.SampleOptions{Temperature: 0.9, MaxNewTokens: 4, Stop: []int{0}}
			first := []int{3, 14, 15, 92, 65}
			c1, err := dp.SampleTurn(ctx, first, turn)
			if err != nil {
				t.Fatal(err)
			}
			before := reused()
			second := append(append(slices.Clone(first), c1.Tokens...), 35, 89)
			if _, err := dp.SampleTurn(ctx, second, turn); err != nil {
				t.Fatal(err)
			}
			if got, want := reused()-before, int64(len(first)+len(c1.Tokens)-1); got != want {
				t.Errorf("the second turn took %d tokens from a turn cache, want %d (its first turn's context and reply)", got, want)
			}
			// Each rank's share: a sampling call each at least (taken in turn),
			// its part of every batch, its collectives, its memory.
			for r, sh := range dp.Shares() {
				if sh.Samples < 1 || sh.Sample <= 0 || sh.Train <= 0 || sh.Collective <= 0 || sh.MemTotal == 0 || sh.MemUsed == 0 ||
					sh.MemUsed > sh.MemTotal || !strings.HasPrefix(sh.Device, fmt.Sprintf("cuda:%d ", r)) {
					t.Errorf("rank %d's share: %+v", r, sh)
				}
			}
		})
	}
}

// planItem is the bytes of the plan's line that starts with prefix.
func planItem(t *testing.T, p MemoryPlan, prefix string) int64 {
	t.Helper()
	for _, it := range p.Items {
		if strings.HasPrefix(it.Name, prefix) {
			return it.Bytes
		}
	}
	t.Fatalf("no %q line in\n%s", prefix, p)
	return 0
}

func TestSplitBatch(t *testing.T) {
	seqs := func(lens ...int) [][]int {
		out := make([][]int, len(lens))
		for i, n := range lens {
			out[i] = make([]int, n)
		}
		return out
	}
	for _, tc := range []struct {
		lens []int
		n    int
		want []int
	}{
		{[]int{10, 10, 10, 10}, 2, []int{0, 2, 4}},
		{[]int{10, 10, 10, 10}, 4, []int{0, 1, 2, 3, 4}},
		{[]int{10, 10, 10, 10, 10, 10}, 3, []int{0, 2, 4, 6}},
		{[]int{100, 1, 1}, 2, []int{0, 1, 3}},          // the long one alone
		{[]int{1, 1, 100}, 3, []int{0, 1, 2, 3}},       // one each, however uneven
		{[]int{30, 10, 10, 10, 20}, 2, []int{0, 2, 5}}, // 40 and 40
		{[]int{5, 5}, 3, []int{0, 1, 2}},               // fewer sequences than ranks
		{[]int{7}, 2, []int{0, 1}},
		{nil, 2, []int{0, 0}},
	} {
		if got := SplitBatch(seqs(tc.lens...), tc.n); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("SplitBatch(%v, %d) = %v, want %v", tc.lens, tc.n, got, tc.want)
		}
	}
}
