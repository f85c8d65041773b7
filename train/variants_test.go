package train

import (
	"context"
	"math"
	"sync/atomic"
	"testing"

	"github.com/swetui/swetui/event"
)

// The loss variants of issue #15: Dr. GRPO, GSPO, DAPO's soft overlong
// punishment and no KL, each on numbers worked by hand.

func TestDrGRPOLossByHand(t *testing.T) {
	// Rewards {1, 0} with scale_rewards "none": A = ±0.5. On policy (ρ = 1)
	// each token's loss is -A and its gradient -A. A short wrong completion
	// (1 token, A = -0.5) and a long right one (3 tokens, A = +0.5):
	//   token-mean (w = 1/4):         L = (0.5·1 - 0.5·3)/4 = -0.25;  g = 0.125, -0.125
	//   seq-mean-token-mean (1/2, 1/6): L = 0.5/2 - 1.5/6 = 0;        g = 0.25, -0.083333333
	//   seq-sum-constant, G·L_max = 2·4 = 8: L = (0.5 - 1.5)/8 = -0.125; g = 0.0625, -0.0625
	// Dr. GRPO's per-token gradient is the same size in both sequences:
	// no length bias.
	adv, ok := GroupAdvantages([]float64{0, 1}, nil, "none", 0, false, 1e-6)
	if !ok {
		t.Fatal("group skipped")
	}
	near(t, "adv0", adv[0], -0.5)
	near(t, "adv1", adv[1], 0.5)
	lp := []float64{-1, -2, -0.5}
	seqs := []SeqInput{
		{Advantage: adv[0], Logp: lp[:1], Old: lp[:1]},
		{Advantage: adv[1], Logp: lp, Old: lp},
	}
	tests := []struct {
		agg          string
		loss, g0, g1 float64
	}{
		{"token-mean", -0.25, 0.125, -0.125},
		{"seq-mean-token-mean", 0, 0.25, -0.5 / 6},
		{"seq-sum-constant", -0.125, 0.0625, -0.0625},
	}
	for _, tt := range tests {
		t.Run(tt.agg, func(t *testing.T) {
			st, grads := GRPOLoss(LossConfig{ClipLow: 0.2, ClipHigh: 0.28, LossAgg: tt.agg, MaxLen: 4, Ratio: "token"}, seqs)
			near(t, "loss", st.Loss, tt.loss)
			near(t, "grad short", grads[0][0], tt.g0)
			for j := range grads[1] {
				near(t, "grad long", grads[1][j], tt.g1)
			}
		})
	}
}

func TestSequenceRatio(t *testing.T) {
	tests := []struct {
		name      string
		logp, old []float64
		want      float64
	}{
		{"equal", []float64{-1, -2}, []float64{-1, -2}, 1},
		// diffs +0.1 and -0.1 cancel: the token ratios 1.105 and 0.905 have geometric mean 1
		{"cancelling", []float64{-1, -2}, []float64{-1.1, -1.9}, 1},
		// mean diff 0.3: e^0.3
		{"uniform", []float64{-0.5, -0.5, -0.5}, []float64{-0.8, -0.8, -0.8}, 1.349858808},
		// token ratios 1 and 4: geometric mean 2
		{"geometric mean", []float64{0, math.Log(4)}, []float64{0, 0}, 2},
		{"empty", nil, nil, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			near(t, "s", SequenceRatio(tt.logp, tt.old), tt.want)
		})
	}
}

func TestSequenceTruncatedISWeight(t *testing.T) {
	tests := []struct {
		name           string
		old, behaviour []float64
		cap, want      float64
	}{
		// mean(old - behaviour) = 0.5: e^0.5
		{"uncapped", []float64{-1, -2}, []float64{-1.5, -2.5}, 2, 1.648721271},
		{"capped", []float64{-1, -2}, []float64{-1.5, -2.5}, 1.5, 1.5},
		// diffs -1 and 0: e^-0.5
		{"below one", []float64{-2, -1}, []float64{-1, -1}, 2, 0.606530660},
		// diffs 1 and 0: the token weights would be min(e, 2) = 2 and 1; the sequence's is e^0.5
		{"one token off", []float64{-1, -2}, []float64{-2, -2}, 2, 1.648721271},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			near(t, "w", SequenceTruncatedISWeight(tt.old, tt.behaviour, tt.cap), tt.want)
		})
	}
}

func TestGSPOLossByHand(t *testing.T) {
	// G = 3 sequences, each weighted 1/3, clip 0.2 / 0.28, no KL.
	// Seq 1: A = 1, diffs +0.1, -0.1: s = 1, obj = 1, d obj/d log s = 1.
	//   L += -1/3 = -0.333333333; each of its 2 tokens: -(1/3)·1/2 = -0.166666667.
	// Seq 2: A = -1, diffs 0.3 ×3: s = e^0.3 = 1.349858808 > 1.28 but A < 0, so
	//   the unclipped -1.349858808 is the smaller: L += 1.349858808/3 = 0.449952936;
	//   each of its 3 tokens: 1.349858808/9 = 0.149984312.
	// Seq 3: A = 2, diff 0.5: s = e^0.5 = 1.6487 > 1.28 with A > 0: clipped,
	//   obj = 2.56, L += -2.56/3 = -0.853333333, gradient 0.
	// L = -0.333333333 + 0.449952936 - 0.853333333 = -0.736713731;
	// clip frac: 1 of 6 tokens.
	cfg := LossConfig{ClipLow: 0.2, ClipHigh: 0.28, LossAgg: "token-mean", Ratio: "sequence", ISCorrection: "none"}
	st, grads := GRPOLoss(cfg, []SeqInput{
		{Advantage: 1, Logp: []float64{-1, -2}, Old: []float64{-1.1, -1.9}},
		{Advantage: -1, Logp: []float64{-0.5, -0.5, -0.5}, Old: []float64{-0.8, -0.8, -0.8}},
		{Advantage: 2, Logp: []float64{-1}, Old: []float64{-1.5}},
	})
	near(t, "loss", st.Loss, -0.736713731)
	want := [][]float64{{-1.0 / 6, -1.0 / 6}, {0.149984312, 0.149984312, 0.149984312}, {0}}
	for i := range want {
		for j := range want[i] {
			near(t, "grad", grads[i][j], want[i][j])
		}
	}
	near(t, "clip frac", st.ClipFrac, 1.0/6)

	// With truncated IS, seq 1's old = logp (ratio 1) and behaviour 0.5 below
	// old on average: weight e^0.5 = 1.648721271 on its whole objective:
	// L = -1.648721271 (G = 1), each token -1.648721271/2 = -0.824360636.
	cfg.ISCorrection, cfg.ISCap = "truncated", 2
	lp := []float64{-1, -2}
	st, grads = GRPOLoss(cfg, []SeqInput{{Advantage: 1, Logp: lp, Old: lp, Behaviour: []float64{-1.5, -2.5}}})
	near(t, "IS loss", st.Loss, -1.648721271)
	near(t, "IS grad", grads[0][1], -0.824360636)
	near(t, "IS weight", st.ISWeight, 1.648721271)
}

// On one-token sequences the sequence ratio is the token ratio, so GSPO is
// GRPO with the sequence mean (and, all lengths being 1, the token mean).
func TestGSPOIsGRPOOnOneTokenSequences(t *testing.T) {
	seqs := []SeqInput{
		{Advantage: 0.7, Logp: []float64{-1}, Old: []float64{-1.1}, Ref: []float64{-0.8}, Behaviour: []float64{-1.3}},
		{Advantage: -1.2, Logp: []float64{-2}, Old: []float64{-1.5}, Ref: []float64{-2.2}, Behaviour: []float64{-1.4}},
		{Advantage: 0.4, Logp: []float64{-0.3}, Old: []float64{-0.7}, Ref: []float64{-0.2}, Behaviour: []float64{-0.6}},
	}
	for _, agg := range []string{"token-mean", "seq-mean-token-mean"} {
		base := LossConfig{ClipLow: 0.2, ClipHigh: 0.28, KLCoef: 0.1, KLEstimator: "k3", LossAgg: agg, ISCorrection: "truncated", ISCap: 2}
		tok, seq := base, base
		tok.Ratio, seq.Ratio = "token", "sequence"
		a, ga := GRPOLoss(tok, seqs)
		b, gb := GRPOLoss(seq, seqs)
		if math.Abs(a.Loss-b.Loss) > 1e-12 || math.Abs(a.ClipFrac-b.ClipFrac) > 1e-12 || math.Abs(a.ISWeight-b.ISWeight) > 1e-12 {
			t.Errorf("%s: GRPO %+v, GSPO %+v", agg, a, b)
		}
		for i := range ga {
			if math.Abs(ga[i][0]-gb[i][0]) > 1e-12 {
				t.Errorf("%s seq %d: GRPO grad %v, GSPO %v", agg, i, ga[i][0], gb[i][0])
			}
		}
	}
}

// GSPO's analytic cotangent (the sequence term's s_i·A_i/|y_i| per token
// plus the per-token KL) matches finite differences of its loss in logp.
func TestGSPOLossGradientFiniteDifference(t *testing.T) {
	for _, est := range []string{"k1", "k2", "k3"} {
		for _, agg := range []string{"token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-sum-constant"} {
			cfg := LossConfig{ClipLow: 0.2, ClipHigh: 0.28, KLCoef: 0.05, KLEstimator: est, LossAgg: agg, MaxLen: 5,
				Ratio: "sequence", ISCorrection: "truncated", ISCap: 2}
			seqs := []SeqInput{
				// s = e^0.15, inside the clip range
				{Advantage: 0.8, Logp: []float64{-1.1, -0.3, -2}, Old: []float64{-1, -0.35, -2.5}, Ref: []float64{-1.3, -0.2, -1.9}, Behaviour: []float64{-1.2, -0.3, -2.4}},
				// s = e^-0.075, inside
				{Advantage: -1.3, Logp: []float64{-0.5, -4}, Old: []float64{-0.45, -3.9}, Ref: []float64{-0.6, -3}, Behaviour: []float64{-0.4, -3.95}},
				// s = e^0.5 with A > 0: clipped, only the KL moves the loss
				{Advantage: 1, Logp: []float64{-1, -1}, Old: []float64{-1.5, -1.5}, Ref: []float64{-0.9, -1.2}, Behaviour: []float64{-1.4, -1.6}},
			}
			checkLossGradient(t, est+"/"+agg, cfg, seqs)
		}
	}
}

func TestSoftOverlongPunishment(t *testing.T) {
	// L_max = 10, L_cache = 4: the ramp covers lengths 7..10, (6 - |y|)/4.
	tests := []struct {
		name      string
		length    int
		truncated bool
		cache     int
		want      float64
	}{
		{"short", 3, false, 4, 0},
		{"at L_max - L_cache", 6, false, 4, 0},
		{"one into the ramp", 7, false, 4, -0.25}, // (6-7)/4
		{"deep in the ramp", 9, false, 4, -0.75},  // (6-9)/4
		{"at L_max, finished", 10, false, 4, -1},  // (6-10)/4
		{"cut at L_max", 10, true, 4, -1},         // never finished: > L_max
		{"cut short by the context", 5, true, 4, -1},
		{"past L_max", 11, false, 4, -1},
		{"off", 10, true, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			near(t, "R_length", SoftOverlongPunishment(tt.length, tt.truncated, 10, tt.cache), tt.want)
		})
	}
}

// The trainer adds the overlong term to the rewards its advantages see and
// leaves the verdicts, and the reward metrics, as the scorer gave them.
func TestOverlongShapesAdvantagesNotVerdicts(t *testing.T) {
	// max_new_tokens 10, overlong_buffer 4, overlong_penalty 0.5.
	// Rewards {1, 1, 0, 0} at lengths {3, 8, 10 cut, 2}, and an infra failure:
	//   R_length = {0, (6-8)/4 = -0.5, -1, 0}; × 0.5 = {0, -0.25, -0.5, 0}
	//   shaped {1, 0.75, -0.5, 0}: mean 0.3125, overlong metric -0.75/4 = -0.1875
	//   none:  A = shaped - 0.3125 = {0.6875, 0.4375, -0.8125, -0.3125}
	//   batch: squared deviations 0.47265625 + 0.19140625 + 0.66015625 + 0.09765625
	//          = 1.421875; /3 = 0.473958333; std 0.688446318; A = dev/(std + 1e-6)
	//          = {0.998623978, 0.635487986, -1.180191974, -0.453919990}
	tests := []struct {
		scale string
		want  []float64
	}{
		{"none", []float64{0.6875, 0.4375, -0.8125, -0.3125, 0}},
		{"batch", []float64{0.998623978, 0.635487986, -1.180191974, -0.453919990, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.scale, func(t *testing.T) {
			cfg := testConfig(t, "sample.max_new_tokens=10", "grpo.overlong_buffer=4", "grpo.overlong_penalty=0.5",
				"grpo.scale_rewards="+tt.scale)
			gr := &group{
				samples: []Sample{{Tokens: make([]int, 3)}, {Tokens: make([]int, 8)}, {Tokens: make([]int, 10), Truncated: true},
					{Tokens: make([]int, 2)}, {Tokens: make([]int, 10), Truncated: true}},
				verdicts: []event.Verdict{{Reward: 1}, {Reward: 1}, {Reward: 0}, {Reward: 0}, {Infra: true}},
			}
			tr := &Trainer{cfg: cfg}
			m := tr.advantages([]*group{gr})
			if !gr.ok {
				t.Fatal("group skipped")
			}
			for i, w := range tt.want {
				near(t, "adv", gr.adv[i], w)
			}
			near(t, "overlong metric", m.OverlongReward, -0.1875)
			near(t, "reward mean (the scorer's)", m.RewardMean, 0.5)
			if gr.verdicts[1].Reward != 1 {
				t.Errorf("verdict reward changed to %v", gr.verdicts[1].Reward)
			}
		})
	}
	// Off by default: the advantages are the scorer's rewards' own.
	cfg := testConfig(t, "sample.max_new_tokens=10", "grpo.scale_rewards=none")
	gr := &group{samples: []Sample{{Tokens: make([]int, 10), Truncated: true}, {Tokens: make([]int, 2)}},
		verdicts: []event.Verdict{{Reward: 1}, {Reward: 0}}}
	m := (&Trainer{cfg: cfg}).advantages([]*group{gr})
	near(t, "adv off", gr.adv[0], 0.5)
	near(t, "metric off", m.OverlongReward, 0)
}

func TestNoKLLossByHand(t *testing.T) {
	// One sequence, two tokens, token-mean (w = 1/2), on policy (ρ = 1), A = 2:
	// the surrogate gives each token l = -2, g = -2.
	//   β = 0:          L = -2, g = -1 each, KL 0 (Ref nil: never read)
	//   β = 0.1, k1, ref 1 below logp (x = -1): kl = 1, dkl = 1;
	//                   l = g = -2 + 0.1 = -1.9: L = -1.9, g = -0.95 each, KL 1
	lp := []float64{-1, -1}
	tests := []struct {
		name        string
		beta        float64
		ref         []float64
		loss, g, kl float64
	}{
		{"no KL", 0, nil, -2, -1, 0},
		{"k1", 0.1, []float64{-2, -2}, -1.9, -0.95, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := LossConfig{ClipLow: 0.2, ClipHigh: 0.28, KLCoef: tt.beta, KLEstimator: "k1", LossAgg: "token-mean", Ratio: "token"}
			st, grads := GRPOLoss(cfg, []SeqInput{{Advantage: 2, Logp: lp, Old: lp, Ref: tt.ref}})
			near(t, "loss", st.Loss, tt.loss)
			near(t, "grad0", grads[0][0], tt.g)
			near(t, "grad1", grads[0][1], tt.g)
			near(t, "kl", st.KL, tt.kl)
		})
	}
}

// countingReference counts the trainer's calls for reference logprobs.
type countingReference struct {
	pol   *banditPolicy
	calls atomic.Int64
}

func (r *countingReference) Logprobs(ctx context.Context, seqs []Sequence) ([][]float64, error) {
	r.calls.Add(1)
	return r.pol.Logprobs(ctx, seqs)
}

// With grpo.kl_coef = 0 the trainer never asks the reference for logprobs,
// even when one is wired; with a KL term it does every step.
func TestNoKLNeverCallsTheReference(t *testing.T) {
	for _, tt := range []struct {
		kl        string
		wantCalls bool
	}{{"0", false}, {"0.1", true}} {
		cfg := testConfig(t, "grpo.kl_coef="+tt.kl, "run.max_steps=3")
		pol := newBandit(6, 0.5, 7)
		ref := &countingReference{pol: newBandit(6, 0.5, 7)}
		tr := New(cfg, Deps{Policy: pol, Reference: ref, Tokenizer: digitTokenizer{}, Scorer: rewardOf3,
			Prompter: staticPrompter{}, Tasks: fakeTasks(5)})
		evs := drain(tr)
		if err := tr.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		<-evs
		if n := ref.calls.Load(); (n > 0) != tt.wantCalls {
			t.Errorf("kl_coef=%s: %d reference calls", tt.kl, n)
		}
		if pol.Updates == 0 {
			t.Errorf("kl_coef=%s: no update ran", tt.kl)
		}
	}
}
