package train

import (
	"math"
)

// This file holds GRPO's math as pure functions named as in the papers
// (DeepSeekMath's GRPO, DAPO's asymmetric clip and soft overlong
// punishment, Dr. GRPO's constant normaliser, GSPO's sequence-level ratio,
// Schulman's k1/k2/k3 KL estimators). The loop turns a batch into per-token gradients of the loss
// with respect to the policy's logprobs; the model backpropagates those.

// GroupStats summarises one group's rewards over its valid completions.
type GroupStats struct {
	Mean, Std float64
	Valid     int
	ZeroStd   bool // std below eps: the group teaches nothing and is skipped
}

// RewardStats returns the mean and the sample standard deviation (Bessel's
// correction, as torch.std and TRL use) of the rewards where valid is true.
// valid may be nil (all valid). ZeroStd is set when fewer than two completions
// are valid or the std is below eps.
func RewardStats(rewards []float64, valid []bool, eps float64) GroupStats {
	var s GroupStats
	sum := 0.0
	for i, r := range rewards {
		if valid == nil || valid[i] {
			sum += r
			s.Valid++
		}
	}
	if s.Valid == 0 {
		s.ZeroStd = true
		return s
	}
	s.Mean = sum / float64(s.Valid)
	if s.Valid < 2 {
		s.ZeroStd = true
		return s
	}
	ss := 0.0
	for i, r := range rewards {
		if valid == nil || valid[i] {
			ss += (r - s.Mean) * (r - s.Mean)
		}
	}
	s.Std = math.Sqrt(ss / float64(s.Valid-1))
	s.ZeroStd = s.Std < eps
	return s
}

// GroupAdvantages turns one group's rewards into advantages
// A_i = (r_i - baseline_i) / (scale + eps). The baseline is the group mean or,
// with leaveOneOut, the mean of the other valid completions (RLOO). scale is
// the group's std ("group"), batchStd ("batch") or 1 ("none"). Invalid
// completions (infrastructure failures) get advantage 0 and do not enter the
// statistics. A zero-std group gets all-zero advantages and ok=false: the
// caller drops it from the loss entirely.
func GroupAdvantages(rewards []float64, valid []bool, scaleRewards string, batchStd float64, leaveOneOut bool, eps float64) (adv []float64, ok bool) {
	adv = make([]float64, len(rewards))
	st := RewardStats(rewards, valid, eps)
	if st.ZeroStd {
		return adv, false
	}
	scale := 1.0
	switch scaleRewards {
	case "group":
		scale = st.Std + eps
	case "batch":
		scale = batchStd + eps
	}
	n := float64(st.Valid)
	for i, r := range rewards {
		if valid != nil && !valid[i] {
			continue
		}
		baseline := st.Mean
		if leaveOneOut {
			baseline = (st.Mean*n - r) / (n - 1)
		}
		adv[i] = (r - baseline) / scale
	}
	return adv, true
}

// Ratio is the importance ratio π_θ/π_old = exp(logp - oldLogp).
func Ratio(logp, oldLogp float64) float64 { return math.Exp(logp - oldLogp) }

// ClippedSurrogate is PPO's per-token objective with DAPO's asymmetric clip,
// min(ρA, clip(ρ, 1-clipLow, 1+clipHigh)A), and its derivative with respect
// to logp (dρ/dlogp = ρ). The derivative is zero where the clipped branch is
// the smaller one and ρ lies outside the clip range.
func ClippedSurrogate(ratio, adv, clipLow, clipHigh float64) (obj, dObjDLogp float64, clipped bool) {
	unclipped := ratio * adv
	c := math.Min(math.Max(ratio, 1-clipLow), 1+clipHigh)
	clippedObj := c * adv
	if unclipped <= clippedObj {
		return unclipped, ratio * adv, false
	}
	if c == ratio {
		return clippedObj, ratio * adv, false
	}
	return clippedObj, 0, true
}

// KL estimates KL(π_θ ‖ π_ref) per token from logp = log π_θ and refLogp =
// log π_ref, with Schulman's estimators (x = refLogp - logp):
//
//	k1 = -x,  k2 = x²/2,  k3 = eˣ - x - 1
//
// and returns the estimate's derivative with respect to logp.
func KL(estimator string, logp, refLogp float64) (kl, dKLDLogp float64) {
	x := refLogp - logp
	switch estimator {
	case "k1":
		return -x, 1
	case "k2":
		return x * x / 2, -x
	default: // k3
		e := math.Exp(x)
		return e - x - 1, 1 - e
	}
}

// TruncatedISWeight is the truncated importance-sampling weight
// min(π_old/μ, cap) correcting for completions sampled by a behaviour policy μ
// (stale weights, or a sampler's numerics) rather than π_old.
func TruncatedISWeight(oldLogp, behaviourLogp, cap float64) float64 {
	return math.Min(math.Exp(oldLogp-behaviourLogp), cap)
}

// TokenWeights returns, for each sequence's tokens, the weight of that token's
// loss in the aggregate loss, so that loss = Σ w_it·l_it:
//
//	token-mean:           w = 1 / (total tokens in the batch)
//	seq-mean-token-mean:  w = 1 / (sequences · tokens of this sequence)
//	seq-mean-token-sum:   w = 1 / sequences
//	seq-sum-constant:     w = 1 / (sequences · maxLen)   (Dr. GRPO)
//
// lengths are the numbers of loss tokens per sequence; sequences with none
// are ignored. maxLen is Dr. GRPO's constant L_max (max_new_tokens): it does
// not depend on how long the completions came out, so that the loss has no
// length bias. A maxLen below the longest sequence is raised to it, which
// keeps every sequence's weights summing to at most 1/sequences.
func TokenWeights(agg string, lengths []int, maxLen int) []float64 {
	w := make([]float64, len(lengths))
	seqs, total, longest := 0, 0, 0
	for _, n := range lengths {
		if n > 0 {
			seqs++
			total += n
			longest = max(longest, n)
		}
	}
	if seqs == 0 {
		return w
	}
	maxLen = max(maxLen, longest)
	for i, n := range lengths {
		if n == 0 {
			continue
		}
		switch agg {
		case "seq-mean-token-mean":
			w[i] = 1 / float64(seqs*n)
		case "seq-mean-token-sum":
			w[i] = 1 / float64(seqs)
		case "seq-sum-constant":
			w[i] = 1 / float64(seqs*maxLen)
		default: // token-mean
			w[i] = 1 / float64(total)
		}
	}
	return w
}

// SequenceRatio is GSPO's sequence-level importance ratio, the geometric
// mean of the token ratios:
//
//	s_i = (π_θ(y_i)/π_old(y_i))^(1/|y_i|) = exp((1/|y_i|) Σ_t (logp_t - old_t))
//
// Its derivative with respect to each logp_t is s_i/|y_i|. An empty
// sequence has ratio 1.
func SequenceRatio(logp, oldLogp []float64) float64 {
	return math.Exp(meanDiff(logp, oldLogp))
}

// SequenceTruncatedISWeight is the truncated IS weight of a whole sequence
// under GSPO: min(exp(mean_t(old_t - behaviour_t)), cap), the sequence-level
// counterpart of TruncatedISWeight, on the same length normalisation as
// SequenceRatio.
func SequenceTruncatedISWeight(oldLogp, behaviourLogp []float64, cap float64) float64 {
	return math.Min(math.Exp(meanDiff(oldLogp, behaviourLogp)), cap)
}

// meanDiff is (1/n) Σ_t (a_t - b_t), 0 for n = 0.
func meanDiff(a, b []float64) float64 {
	if len(a) == 0 {
		return 0
	}
	d := 0.0
	for t := range a {
		d += a[t] - b[t]
	}
	return d / float64(len(a))
}

// SoftOverlongPunishment is DAPO's length-aware reward term R_length (Yu et
// al. 2025, eq. 13), with L_max = lMax and the punishment interval
// L_cache = lCache:
//
//	R_length(y) = 0                                  if |y| ≤ L_max - L_cache
//	              ((L_max - L_cache) - |y|) / L_cache  if L_max - L_cache < |y| ≤ L_max
//	              -1                                 if |y| > L_max
//
// A completion the sampler cut off (truncated) never finished, so it counts
// as longer than L_max. lCache ≤ 0 turns the term off.
func SoftOverlongPunishment(length int, truncated bool, lMax, lCache int) float64 {
	switch {
	case lCache <= 0:
		return 0
	case truncated || length > lMax:
		return -1
	case length <= lMax-lCache:
		return 0
	default:
		return float64(lMax-lCache-length) / float64(lCache)
	}
}
