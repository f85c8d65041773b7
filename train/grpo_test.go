package train

import (
	"math"
	"testing"

	"fmt"
)

func near(t *testing.T, name string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-6 {
		t.Errorf("%s = %.9f, want %.9f", name, got, want)
	}
}

func TestRewardStats(t *testing.T) {
	tests := []struct {
		name    string
		rewards []float64
		valid   []bool
		mean    float64
		std     float64
		zero    bool
	}{
		// mean 0.5; squared deviations 4 × 0.25 = 1; 1/3 under Bessel; sqrt = 0.577350269.
		{"half right", []float64{1, 0, 0, 1}, nil, 0.5, 0.577350269, false},
		{"all equal", []float64{0.3, 0.3, 0.3}, nil, 0.3, 0, true},
		{"one valid", []float64{1, 0}, []bool{true, false}, 1, 0, true},
		// valid 0.7 and 0.1: mean 0.4, deviations 0.09 + 0.09 = 0.18 / 1 → std 0.424264069.
		{"masked", []float64{0.7, 99, 0.1}, []bool{true, false, true}, 0.4, 0.424264069, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := RewardStats(tt.rewards, tt.valid, 1e-6)
			near(t, "mean", s.Mean, tt.mean)
			near(t, "std", s.Std, tt.std)
			if s.ZeroStd != tt.zero {
				t.Errorf("ZeroStd = %v, want %v", s.ZeroStd, tt.zero)
			}
		})
	}
}

func TestGroupAdvantages(t *testing.T) {
	tests := []struct {
		name     string
		rewards  []float64
		valid    []bool
		scale    string
		batchStd float64
		loo      bool
		want     []float64
		ok       bool
	}{
		// ±0.5 / 0.577350269 = ±0.866025404
		{"group scale", []float64{1, 0, 0, 1}, nil, "group", 0, false, []float64{0.866025404, -0.866025404, -0.866025404, 0.866025404}, true},
		{"no scale", []float64{1, 0, 0, 1}, nil, "none", 0, false, []float64{0.5, -0.5, -0.5, 0.5}, true},
		// batch std 2: ±0.5 / 2 = ±0.25
		{"batch scale", []float64{1, 0}, nil, "batch", 2, false, []float64{0.25, -0.25}, true},
		// leave-one-out baselines: others' means 0, 0.5, 0.5
		{"leave one out", []float64{1, 0, 0}, nil, "none", 0, true, []float64{1, -0.5, -0.5}, true},
		// the infra-failed third completion is out of the mean (0.5) and gets 0
		{"infra masked", []float64{1, 0, 5}, []bool{true, true, false}, "none", 0, false, []float64{0.5, -0.5, 0}, true},
		{"zero std skipped", []float64{0.3, 0.3, 0.3}, nil, "group", 0, false, []float64{0, 0, 0}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := GroupAdvantages(tt.rewards, tt.valid, tt.scale, tt.batchStd, tt.loo, 0)
			if tt.name == "zero std skipped" {
				got, ok = GroupAdvantages(tt.rewards, tt.valid, tt.scale, tt.batchStd, tt.loo, 1e-6)
			}
			if ok != tt.ok {
				t.Fatalf("ok = %v, want %v", ok, tt.ok)
			}
			for i := range tt.want {
				near(t, "adv", got[i], tt.want[i])
			}
		})
	}
}

func TestRatio(t *testing.T) {
	near(t, "exp(ln2 - 0)", Ratio(math.Ln2, 0), 2)
	near(t, "equal", Ratio(-3.2, -3.2), 1)
}

func TestClippedSurrogate(t *testing.T) {
	tests := []struct {
		name       string
		ratio, adv float64
		obj, grad  float64
		clipped    bool
	}{
		{"above range, A>0: clipped to 1.28", 1.5, 1, 1.28, 0, true},
		{"above range, A<0: unclipped is smaller", 1.5, -1, -1.5, -1.5, false},
		{"below range, A>0: unclipped is smaller", 0.5, 1, 0.5, 0.5, false},
		{"below range, A<0: clipped to -0.8", 0.5, -1, -0.8, 0, true},
		{"inside range", 1.1, 2, 2.2, 2.2, false},
		{"at 1", 1, 0.7, 0.7, 0.7, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj, grad, clipped := ClippedSurrogate(tt.ratio, tt.adv, 0.2, 0.28)
			near(t, "obj", obj, tt.obj)
			near(t, "grad", grad, tt.grad)
			if clipped != tt.clipped {
				t.Errorf("clipped = %v, want %v", clipped, tt.clipped)
			}
		})
	}
}

func TestKL(t *testing.T) {
	// logp = -1, ref = -2: x = ref - logp = -1.
	tests := []struct {
		est      string
		kl, grad float64
	}{
		{"k1", 1, 1},
		{"k2", 0.5, 1},
		{"k3", 0.367879441, 0.632120559}, // e⁻¹ - (-1) - 1; 1 - e⁻¹
	}
	for _, tt := range tests {
		t.Run(tt.est, func(t *testing.T) {
			kl, grad := KL(tt.est, -1, -2)
			near(t, "kl", kl, tt.kl)
			near(t, "grad", grad, tt.grad)
		})
	}
	// Every estimator is 0 where the policies agree.
	for _, est := range []string{"k1", "k2", "k3"} {
		kl, _ := KL(est, -0.7, -0.7)
		near(t, est+" at equality", kl, 0)
	}
}

func TestTruncatedISWeight(t *testing.T) {
	near(t, "uncapped", TruncatedISWeight(-1, -1.5, 2), math.Exp(0.5)) // 1.648721271
	near(t, "capped", TruncatedISWeight(-1, -1.5, 1.5), 1.5)
	near(t, "below one", TruncatedISWeight(-2, -1, 2), math.Exp(-1))
}

func TestTokenWeights(t *testing.T) {
	lengths := []int{2, 0, 4}
	tests := []struct {
		agg    string
		maxLen int
		want   []float64
	}{
		{"token-mean", 8, []float64{1.0 / 6, 0, 1.0 / 6}},
		{"seq-mean-token-mean", 8, []float64{1.0 / 4, 0, 1.0 / 8}},
		{"seq-mean-token-sum", 8, []float64{1.0 / 2, 0, 1.0 / 2}},
		// Dr. GRPO: 2 sequences × L_max 8, whatever their lengths.
		{"seq-sum-constant", 8, []float64{1.0 / 16, 0, 1.0 / 16}},
		// an L_max below the longest sequence (4) is raised to it: 1/(2·4)
		{"seq-sum-constant", 3, []float64{1.0 / 8, 0, 1.0 / 8}},
	}
	for _, tt := range tests {
		t.Run(tt.agg, func(t *testing.T) {
			got := TokenWeights(tt.agg, lengths, tt.maxLen)
			for i := range tt.want {
				near(t, "w", got[i], tt.want[i])
			}
		})
	}
}

func TestGRPOLossByHand(t *testing.T) {
	// One sequence, two tokens, token-mean (w = 1/2), k3 with β = 0.1.
	// Token 0: logp = old = ref = -1, A = 2: ρ = 1, obj = 2, dobj = 2; kl = 0, dkl = 0.
	//   l = -2, g = -2.
	// Token 1: logp = -1, old = -1.5 (ρ = e^0.5 = 1.6487 > 1.28: clipped, obj = 2.56, dobj = 0),
	//   ref = -2: kl = e⁻¹ = 0.367879, dkl = 0.632121.
	//   l = -2.56 + 0.0367879 = -2.5232121, g = 0.0632121.
	// L = (-2 - 2.5232121)/2 = -2.26160603; grads = (-1, 0.03160603).
	cfg := LossConfig{ClipLow: 0.2, ClipHigh: 0.28, KLCoef: 0.1, KLEstimator: "k3", LossAgg: "token-mean", ISCorrection: "none"}
	st, grads := GRPOLoss(cfg, []SeqInput{{
		Advantage: 2,
		Logp:      []float64{-1, -1},
		Old:       []float64{-1, -1.5},
		Ref:       []float64{-1, -2},
	}})
	near(t, "loss", st.Loss, -2.26160603)
	near(t, "grad0", grads[0][0], -1)
	near(t, "grad1", grads[0][1], 0.03160603)
	near(t, "clip frac", st.ClipFrac, 0.5)
	near(t, "kl", st.KL, 0.367879441/2)
}

// The analytic cotangent matches finite differences of the loss in logp.
func TestGRPOLossGradientFiniteDifference(t *testing.T) {
	for _, est := range []string{"k1", "k2", "k3"} {
		for _, agg := range []string{"token-mean", "seq-mean-token-mean", "seq-mean-token-sum"} {
			cfg := LossConfig{ClipLow: 0.2, ClipHigh: 0.28, KLCoef: 0.05, KLEstimator: est, LossAgg: agg,
				ISCorrection: "truncated", ISCap: 2}
			seqs := []SeqInput{
				{Advantage: 0.8, Logp: []float64{-1.1, -0.3, -2}, Old: []float64{-1, -0.35, -2.5}, Ref: []float64{-1.3, -0.2, -1.9}, Behaviour: []float64{-1.2, -0.3, -2.4}},
				{Advantage: -1.3, Logp: []float64{-0.5, -4}, Old: []float64{-0.45, -3.9}, Ref: []float64{-0.6, -3}, Behaviour: []float64{-0.4, -3.95}},
			}
			checkLossGradient(t, est+"/"+agg, cfg, seqs)
		}
	}
}

// checkLossGradient compares GRPOLoss's dL/dlogp with central finite
// differences of its loss.
func checkLossGradient(t *testing.T, name string, cfg LossConfig, seqs []SeqInput) {
	t.Helper()
	_, grads := GRPOLoss(cfg, seqs)
	const h = 1e-6
	for i := range seqs {
		for j := range seqs[i].Logp {
			orig := seqs[i].Logp[j]
			seqs[i].Logp[j] = orig + h
			up, _ := GRPOLoss(cfg, seqs)
			seqs[i].Logp[j] = orig - h
			down, _ := GRPOLoss(cfg, seqs)
			seqs[i].Logp[j] = orig
			fd := (up.Loss - down.Loss) / (2 * h)
			if math.Abs(fd-grads[i][j]) > 1e-5 {
				t.Errorf("%s seq %d tok %d: analytic %.8f, finite difference %.8f", name, i, j, grads[i][j], fd)
			}
		}
	}
}

// A masked token (an agent's observation) is no loss token: the hand-worked
// sequence above, with two observation tokens around it, has the same loss
// and the same cotangents on its reply tokens, 0 on the others; and the
// masked loss's cotangent is its finite difference in every logp.
func TestGRPOLossMask(t *testing.T) {
	cfg := LossConfig{ClipLow: 0.2, ClipHigh: 0.28, KLCoef: 0.1, KLEstimator: "k3", LossAgg: "token-mean", ISCorrection: "none"}
	st, grads := GRPOLoss(cfg, []SeqInput{{
		Advantage: 2,
		Logp:      []float64{-0.3, -1, -5, -1},
		Old:       []float64{-9, -1, 0, -1.5},
		Ref:       []float64{-7, -1, -1, -2},
		Mask:      []bool{false, true, false, true},
	}})
	near(t, "loss", st.Loss, -2.26160603)
	for i, want := range []float64{0, -1, 0, 0.03160603} {
		near(t, fmt.Sprintf("grad%d", i), grads[0][i], want)
	}
	near(t, "kl", st.KL, 0.367879441/2)
	if st.Tokens != 2 {
		t.Errorf("%d loss tokens, want the 2 unmasked", st.Tokens)
	}
	for _, agg := range []string{"token-mean", "seq-mean-token-mean", "seq-sum-constant"} {
		for _, ratio := range []string{"token", "sequence"} {
			cfg := LossConfig{ClipLow: 0.2, ClipHigh: 0.28, KLCoef: 0.05, KLEstimator: "k2", LossAgg: agg, Ratio: ratio, MaxLen: 8,
				ISCorrection: "truncated", ISCap: 2}
			seqs := []SeqInput{
				{Advantage: 0.8, Logp: []float64{-1.1, -0.3, -2, -0.7}, Old: []float64{-1, -0.35, -2.5, -0.2}, Ref: []float64{-1.3, -0.2, -1.9, -0.1},
					Behaviour: []float64{-1.2, -0.3, -2.4, 0}, Mask: []bool{true, false, true, true}},
				{Advantage: -1.3, Logp: []float64{-0.5, -4}, Old: []float64{-0.45, -3.9}, Ref: []float64{-0.6, -3}, Behaviour: []float64{-0.4, -3.95}},
			}
			checkLossGradient(t, "masked "+agg+"/"+ratio, cfg, seqs)
		}
	}
}
