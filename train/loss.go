package train

// LossConfig is the part of the GRPO config the loss reads.
type LossConfig struct {
	ClipLow, ClipHigh float64
	KLCoef            float64
	KLEstimator       string
	LossAgg           string
	MaxLen            int    // L_max of loss_agg "seq-sum-constant": sample.max_new_tokens
	Ratio             string // "token" (GRPO, PPO) or "sequence" (GSPO)
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
	// Mask, when set, says which tokens are loss tokens (an agent's
	// replies); the others (its observations, the chat template's text)
	// add nothing to the loss and get a cotangent of 0.
	Mask []bool
}

// LossStats are the loss's diagnostics, averaged over loss tokens.
type LossStats struct {
	Loss     float64
	KL       float64
	ClipFrac float64
	ISWeight float64
	Tokens   int
}

// GRPOLoss returns the loss and dL/dlogp for every token: the cotangent the
// model backpropagates. With the token ratio (GRPO)
//
//	L = Σ_i Σ_t w_it · ( -tis_it · min(ρ_it A_i, clip(ρ_it) A_i) + β · KL_it )
//
// with w from TokenWeights; with the sequence ratio (GSPO) the policy term
// is GSPO's, a mean over sequences, and the KL stays per token:
//
//	L = (1/G) Σ_i -tis_i · min(s_i A_i, clip(s_i) A_i) + Σ_i Σ_t w_it · β · KL_it
//
// KL is left out when β is 0 (Ref is then never read).
//
// A sequence with a Mask counts as the sequence of its loss tokens alone.
func GRPOLoss(cfg LossConfig, seqs []SeqInput) (LossStats, [][]float64) {
	full := seqs
	seqs, masked := lossTokens(seqs)
	st, grads := grpoLoss(cfg, seqs)
	if masked {
		grads = spread(grads, full)
	}
	return st, grads
}

// lossTokens is each sequence cut to its loss tokens; masked says whether
// any had a Mask.
func lossTokens(seqs []SeqInput) (out []SeqInput, masked bool) {
	out = make([]SeqInput, len(seqs))
	for i, s := range seqs {
		if s.Mask == nil {
			out[i] = s
			continue
		}
		masked = true
		c := SeqInput{Advantage: s.Advantage}
		for t, on := range s.Mask {
			if !on {
				continue
			}
			c.Logp = append(c.Logp, s.Logp[t])
			c.Old = append(c.Old, s.Old[t])
			if t < len(s.Ref) {
				c.Ref = append(c.Ref, s.Ref[t])
			}
			if t < len(s.Behaviour) {
				c.Behaviour = append(c.Behaviour, s.Behaviour[t])
			}
		}
		out[i] = c
	}
	return out, masked
}

// spread puts the loss tokens' cotangents back at their places in full's
// sequences, 0 elsewhere.
func spread(grads [][]float64, full []SeqInput) [][]float64 {
	out := make([][]float64, len(full))
	for i, s := range full {
		if s.Mask == nil {
			out[i] = grads[i]
			continue
		}
		out[i] = make([]float64, len(s.Logp))
		k := 0
		for t, on := range s.Mask {
			if on {
				out[i][t] = grads[i][k]
				k++
			}
		}
	}
	return out
}

func grpoLoss(cfg LossConfig, seqs []SeqInput) (LossStats, [][]float64) {
	lengths := make([]int, len(seqs))
	nonEmpty := 0
	for i, s := range seqs {
		lengths[i] = len(s.Logp)
		if lengths[i] > 0 {
			nonEmpty++
		}
	}
	weights := TokenWeights(cfg.LossAgg, lengths, cfg.MaxLen)
	grads := make([][]float64, len(seqs))
	var st LossStats
	clippedTokens := 0
	for i, s := range seqs {
		grads[i] = make([]float64, len(s.Logp))
		if len(s.Logp) == 0 {
			continue
		}
		var pol policyTerm
		if cfg.Ratio == "sequence" {
			pol = sequencePolicyTerm(cfg, s, 1/float64(nonEmpty), grads[i])
		} else {
			pol = tokenPolicyTerm(cfg, s, weights[i], grads[i])
		}
		st.Loss += pol.loss
		st.ISWeight += pol.isSum
		clippedTokens += pol.clipped
		if cfg.KLCoef > 0 {
			for t, lp := range s.Logp {
				kl, dKL := KL(cfg.KLEstimator, lp, s.Ref[t])
				st.Loss += weights[i] * cfg.KLCoef * kl
				grads[i][t] += weights[i] * cfg.KLCoef * dKL
				st.KL += kl
			}
		}
		st.Tokens += len(s.Logp)
	}
	if st.Tokens > 0 {
		n := float64(st.Tokens)
		st.KL /= n
		st.ISWeight /= n
		st.ClipFrac = float64(clippedTokens) / n
	}
	return st, grads
}

// policyTerm is one sequence's share of the clipped surrogate: its weighted
// loss, the sum of its tokens' IS weights and how many of its tokens were
// clipped.
type policyTerm struct {
	loss, isSum float64
	clipped     int
}

// tokenPolicyTerm is GRPO's per-token surrogate, weighted by w; it adds its
// gradient to grad.
func tokenPolicyTerm(cfg LossConfig, s SeqInput, w float64, grad []float64) policyTerm {
	var p policyTerm
	for t, lp := range s.Logp {
		obj, dObj, clipped := ClippedSurrogate(Ratio(lp, s.Old[t]), s.Advantage, cfg.ClipLow, cfg.ClipHigh)
		tis := 1.0
		if cfg.ISCorrection == "truncated" {
			tis = TruncatedISWeight(s.Old[t], s.Behaviour[t], cfg.ISCap)
		}
		p.loss += w * -tis * obj
		grad[t] += w * -tis * dObj
		p.isSum += tis
		if clipped {
			p.clipped++
		}
	}
	return p
}

// sequencePolicyTerm is GSPO's surrogate of one sequence, weighted by w (1/G):
// the objective clips the sequence ratio s_i, and since ds_i/dlogp_t =
// s_i/|y_i| every token gets the same share of its gradient. A clipped
// sequence clips all its tokens.
func sequencePolicyTerm(cfg LossConfig, s SeqInput, w float64, grad []float64) policyTerm {
	n := len(s.Logp)
	obj, dObj, clipped := ClippedSurrogate(SequenceRatio(s.Logp, s.Old), s.Advantage, cfg.ClipLow, cfg.ClipHigh)
	tis := 1.0
	if cfg.ISCorrection == "truncated" {
		tis = SequenceTruncatedISWeight(s.Old, s.Behaviour, cfg.ISCap)
	}
	g := w * -tis * dObj / float64(n)
	for t := range grad {
		grad[t] += g
	}
	p := policyTerm{loss: w * -tis * obj, isSum: tis * float64(n)}
	if clipped {
		p.clipped = n
	}
	return p
}
