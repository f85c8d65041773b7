package train

// LossConfig is the part of the GRPO config the loss reads.
type LossConfig struct {
	ClipLow, ClipHigh float64
	KLCoef            float64
	KLEstimator       string
	LossAgg           string
	ISCorrection      string // "none" or "truncated"
	ISCap             float64
}

// SeqInput is one completion's contribution to the loss: its advantage and,
// per completion token, the logprobs under the current policy (Logp), the
// policy that the ratio is taken against (Old), the frozen reference (Ref)
// and the behaviour policy that sampled it (Behaviour; used only by the
// truncated IS correction). Slices have one entry per loss token.
type SeqInput struct {
	Advantage float64
	Logp      []float64
	Old       []float64
	Ref       []float64
	Behaviour []float64
}

// LossStats are the loss's diagnostics, averaged over loss tokens.
type LossStats struct {
	Loss     float64
	KL       float64
	ClipFrac float64
	ISWeight float64
	Tokens   int
}

// GRPOLoss returns the loss
//
//	L = Σ_i Σ_t w_it · ( -tis_it · min(ρA, clip(ρ)A) + β · KL_it )
//
// with w from TokenWeights, and dL/dlogp for every token: the cotangent the
// model backpropagates. KL is left out when β is 0.
func GRPOLoss(cfg LossConfig, seqs []SeqInput) (LossStats, [][]float64) {
	lengths := make([]int, len(seqs))
	for i, s := range seqs {
		lengths[i] = len(s.Logp)
	}
	weights := TokenWeights(cfg.LossAgg, lengths)
	grads := make([][]float64, len(seqs))
	var st LossStats
	clippedTokens := 0
	for i, s := range seqs {
		grads[i] = make([]float64, len(s.Logp))
		for t, lp := range s.Logp {
			ratio := Ratio(lp, s.Old[t])
			obj, dObj, clipped := ClippedSurrogate(ratio, s.Advantage, cfg.ClipLow, cfg.ClipHigh)
			tis := 1.0
			if cfg.ISCorrection == "truncated" {
				tis = TruncatedISWeight(s.Old[t], s.Behaviour[t], cfg.ISCap)
			}
			l := -tis * obj
			g := -tis * dObj
			if cfg.KLCoef > 0 {
				kl, dKL := KL(cfg.KLEstimator, lp, s.Ref[t])
				l += cfg.KLCoef * kl
				g += cfg.KLCoef * dKL
				st.KL += kl
			}
			st.Loss += weights[i] * l
			grads[i][t] = weights[i] * g
			st.ISWeight += tis
			if clipped {
				clippedTokens++
			}
			st.Tokens++
		}
	}
	if st.Tokens > 0 {
		n := float64(st.Tokens)
		st.KL /= n
		st.ISWeight /= n
		st.ClipFrac = float64(clippedTokens) / n
	}
	return st, grads
}
