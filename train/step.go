package train

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/history"
)

// step runs one GRPO step: collect the groups, turn rewards into
// advantages, update the policy, then record and publish what happened.
func (t *Trainer) step(ctx context.Context) error {
	step := t.st.Step + 1
	phase := t.st.Curriculum.Phase
	t.phase.Store(phase)
	t.publish(event.StepStarted{Step: step, Phase: phase, Time: time.Now()})
	begin := time.Now()
	groups, tm, err := t.src.next(ctx, step, phase)
	if err != nil {
		return err
	}
	collected := time.Now()

	m := t.advantages(groups)
	extraSamples(&m, groups, t.cfg.GRPO.PromptsPerStep)
	agentMetrics(&m, groups)
	for _, gr := range groups {
		t.st.Pool.Observe(gr.phase, gr.inst.InstanceID, gr.verdicts)
	}
	seqs, inputs := t.lossInputs(groups)
	t.lastTrainable = len(seqs)
	if len(seqs) > 0 {
		t.model.Lock()
		err := t.update(ctx, seqs, inputs, onPolicy(groups, t.d.Policy.Version()), &m)
		t.model.Unlock()
		if err != nil {
			return err
		}
	}
	trainDone := time.Now()

	t.st.Step = step
	last := groups[len(groups)-1]
	t.st.Epoch, t.st.Pos = last.cursor.Epoch, last.cursor.Pos
	version := t.d.Policy.Version()
	stepTimes(&m, tm, begin, collected, trainDone)
	m.MaxAge = maxAge(groups, version)
	if err := t.recordCompletions(step, groups); err != nil {
		return err
	}
	t.src.stepDone(step)
	t.st.Recent = append(t.st.Recent, m)
	if len(t.st.Recent) > t.cfg.Curriculum.Window {
		t.st.Recent = t.st.Recent[len(t.st.Recent)-t.cfg.Curriculum.Window:]
	}
	if err := t.sinks.Metrics(step, phase, version, m); err != nil {
		return err
	}
	t.publish(event.StepFinished{Step: step, Phase: phase, Version: version, Metrics: m, Duration: trainDone.Sub(begin)})
	if g, ok := t.d.Policy.(GPUReporter); ok {
		if shares := g.GPUShares(); len(shares) > 0 {
			t.publish(event.GPUs{Step: step, Shares: shares})
		}
	}
	if ev := t.st.Curriculum.Observe(step, m); ev != nil {
		t.publish(*ev)
	}
	return nil
}

// extraSamples counts the groups the step drew and the completions drawn
// beyond its first prompts_per_step groups (DAPO's dynamic sampling cost).
func extraSamples(m *event.Metrics, groups []*group, perStep int) {
	m.Groups = len(groups)
	for _, gr := range groups[min(perStep, len(groups)):] {
		m.ExtraSamples += len(gr.samples)
	}
}

// recordCompletions publishes every scored completion of the step and
// appends it to rollouts.jsonl: the same value, verdict and patch included.
func (t *Trainer) recordCompletions(step int, groups []*group) error {
	for gi, gr := range groups {
		prompt, err := t.sinks.Prompt(gr.inst.InstanceID, t.d.Tokenizer.Decode(gr.prompt))
		if err != nil {
			return err
		}
		for i := range gr.samples {
			ev := event.CompletionScored{Step: step, Group: gi, Index: i, Completion: gr.texts[i],
				Verdict: gr.verdicts[i], Advantage: gr.adv[i], Tokens: len(gr.samples[i].Tokens),
				Truncated: gr.samples[i].Truncated, Version: gr.version, IssueText: gr.inst.ProblemStatement,
				TokenLogprobs: event.PackTokens(gr.samples[i].Tokens, gr.samples[i].Logprobs), PromptHash: prompt}
			ev.Agent = gr.trajs[i]
			// What the advantage saw, where the trainer's rule replaced
			// the graded reward (shapedRewards): the console and
			// rollouts.jsonl show what was trained on.
			if t.zeroed(gr, i) && !gr.verdicts[i].Infra {
				ev.Trained = new(float64)
			}
			ev.Masked = !t.trainable(gr, i) && !gr.verdicts[i].Infra
			if log := ev.Verdict.Log; log != "" {
				// Kept on disk; the console and rollouts.jsonl carry its path.
				ev.Verdict.Log = ""
				if rel, err := history.WriteEvalLog(t.cfg.Run.OutDir, step, gi, i, log); err != nil {
					t.logErr = err
				} else {
					ev.LogFile = rel
				}
			}
			t.publish(ev)
			if err := t.sinks.Rollout(ev); err != nil {
				return err
			}
		}
	}
	if t.logErr != nil {
		t.warn(event.Warn, "keeping the evaluations' logs: "+t.logErr.Error())
		t.logErr = nil
	}
	if err := history.PruneEvalLogs(t.cfg.Run.OutDir, history.EvalLogSteps, -1); err != nil {
		t.warn(event.Warn, err.Error())
	}
	return nil
}

// advantages fills each group's advantages and returns the step's reward
// metrics. DAPO's soft overlong punishment is added to the rewards the
// advantages see, not to the verdicts: the reward metrics and
// rollouts.jsonl keep what the scorer gave.
func (t *Trainer) advantages(groups []*group) event.Metrics {
	g := t.cfg.GRPO
	m, batch := rewardMetrics(groups, g.StdEps)
	rewards := make([][]float64, len(groups))
	valid := make([][]bool, len(groups))
	var all []float64 // the valid shaped rewards
	shaped := 0.0
	for gi, gr := range groups {
		var r []float64
		rewards[gi], valid[gi], r = t.shapedRewards(gr)
		for i, ok := range valid[gi] {
			if ok {
				all = append(all, rewards[gi][i])
				shaped += r[i]
			}
		}
	}
	if len(all) > 0 {
		m.OverlongReward = shaped / float64(len(all))
	}
	if g.OverlongBuffer > 0 {
		// scale_rewards "batch" divides by the std of the rewards the
		// advantages see, as "group" does.
		batch = RewardStats(all, nil, g.StdEps)
	}
	zero := 0
	for gi, gr := range groups {
		gr.adv, gr.ok = GroupAdvantages(rewards[gi], valid[gi], g.ScaleRewards, batch.Std, g.LeaveOneOut, g.StdEps)
		if !gr.ok {
			zero++
		}
	}
	if len(groups) > 0 {
		m.FracZeroStd = float64(zero) / float64(len(groups))
	}
	return m
}

// shapedRewards returns the rewards a group's advantages are computed
// from: the scorer's plus DAPO's overlong term (L_max is
// sample.max_new_tokens, L_cache grpo.overlong_buffer), which it also
// returns alone; valid is false for infrastructure failures and, in agent
// mode, for unfinished trajectories when agent.unfinished masks them
// (with "zero" they earn 0, with "graded" what their diffs earn).
func (t *Trainer) shapedRewards(gr *group) (rewards []float64, valid []bool, overlong []float64) {
	g := t.cfg.GRPO
	n := len(gr.verdicts)
	rewards, valid, overlong = make([]float64, n), make([]bool, n), make([]float64, n)
	for i, v := range gr.verdicts {
		s := gr.samples[i]
		if gr.mask(i) == nil { // a trajectory's length is its turns', not one reply's
			overlong[i] = g.OverlongPenalty * SoftOverlongPunishment(len(s.Tokens), s.Truncated, t.cfg.Sample.MaxNewTokens, g.OverlongBuffer)
		}
		rewards[i], valid[i] = v.Reward+overlong[i], t.trainable(gr, i)
		if t.zeroed(gr, i) {
			rewards[i] = 0 // so that submitting pays
		}
	}
	return rewards, valid, overlong
}

// zeroed reports whether completion i of gr trains on reward 0 whatever it
// was graded: an unfinished agent trajectory under agent.unfinished = zero.
func (t *Trainer) zeroed(gr *group, i int) bool {
	return gr.unfinished(i) && t.cfg.Agent.Unfinished == config.UnfinishedZero
}

// lossInputs packs the trainable completions: groups with reward variance,
// without infra failures, and (with mask_truncated) not cut off.
func (t *Trainer) lossInputs(groups []*group) ([]Sequence, []SeqInput) {
	var seqs []Sequence
	var inputs []SeqInput
	for _, gr := range groups {
		if !gr.ok {
			continue
		}
		for i, s := range gr.samples {
			if !t.trainable(gr, i) || len(s.Tokens) == 0 || (gr.mask(i) == nil && t.cfg.GRPO.MaskTruncated && s.Truncated) {
				continue
			}
			seqs = append(seqs, Sequence{Prompt: gr.prompt, Completion: s.Tokens})
			in := SeqInput{Advantage: gr.adv[i], Behaviour: s.Logprobs, Mask: gr.mask(i)}
			inputs = append(inputs, in)
		}
	}
	return seqs, inputs
}

// onPolicy reports whether every group was sampled by the current weights.
func onPolicy(groups []*group, version int) bool {
	for _, gr := range groups {
		if gr.version != version {
			return false
		}
	}
	return true
}

func (t *Trainer) update(ctx context.Context, seqs []Sequence, inputs []SeqInput, onPolicy bool, m *event.Metrics) error {
	g := t.cfg.GRPO
	// Completions sampled by the current weights already carry their
	// logprobs (the sampler and the graph agree to ~1e-6): the forward pass
	// is needed only for stale ones. This is GRPO's single-update case,
	// where the ratio starts at 1 (TRL detaches the same logprobs).
	var logp [][]float64
	var err error
	if onPolicy {
		logp = make([][]float64, len(inputs))
		for i := range inputs {
			logp[i] = inputs[i].Behaviour
		}
	} else if logp, err = t.d.Policy.Logprobs(ctx, seqs); err != nil {
		return fmt.Errorf("policy logprobs: %w", err)
	}
	var ref [][]float64
	if g.KLCoef > 0 && t.d.Reference != nil {
		if ref, err = t.d.Reference.Logprobs(ctx, seqs); err != nil {
			return fmt.Errorf("reference logprobs: %w", err)
		}
	}
	for i := range inputs {
		inputs[i].Logp = logp[i]
		// Without IS correction the ratio is taken against the behaviour
		// policy (the sampler); with it, against the current weights and the
		// truncated weight carries the behaviour mismatch.
		inputs[i].Old = inputs[i].Behaviour
		if g.ISCorrection == "truncated" {
			inputs[i].Old = logp[i]
		}
		inputs[i].Ref = logp[i]
		if ref != nil {
			inputs[i].Ref = ref[i]
		}
	}
	lc := LossConfig{ClipLow: g.ClipLow, ClipHigh: g.ClipHigh, KLCoef: g.KLCoef, KLEstimator: g.KLEstimator,
		LossAgg: g.LossAgg, MaxLen: t.cfg.Sample.MaxNewTokens, Ratio: g.Ratio, ISCorrection: g.ISCorrection, ISCap: g.ISCap}
	if ref == nil {
		lc.KLCoef = 0
	}
	st, cot := GRPOLoss(lc, inputs)
	step := t.st.Step + 1
	if !finite(st.Loss) {
		return t.nonFinite(step, "loss", st.Loss)
	}
	_, entropy, err := t.d.Policy.Backward(ctx, seqs, cot)
	if err != nil {
		return fmt.Errorf("policy backward: %w", err)
	}
	m.GradNorm, m.LR = t.d.Policy.Step()
	if !finite(m.GradNorm) {
		// The update has carried the gradient into the weights: they must
		// not reach a checkpoint, so the run stops here, unsaved.
		return t.nonFinite(step, "gradient norm", m.GradNorm)
	}
	m.Loss, m.KL, m.ClipFrac, m.Entropy, m.Tokens = st.Loss, st.KL, st.ClipFrac, entropy, st.Tokens
	return nil
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// nonFinite is the error that stops a run whose step went NaN or Inf:
// nothing of that step is saved, so the newest checkpoint is the last good
// one.
func (t *Trainer) nonFinite(step int, what string, v float64) error {
	return fmt.Errorf("step %d: the %s is %v: the run stops without saving it; the last good weights are the newest checkpoint under %s "+
		"(lower optim.lr or raise optim.grad_clip before resuming)", step, what, v, t.cfg.Run.OutDir)
}
