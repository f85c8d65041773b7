package train

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/prompt"
	"github.com/swetui/swetui/task"
)

// SFTOptions configures the supervised warm start.
type SFTOptions struct {
	Steps        int
	BatchSize    int
	Seed         int64
	Context      int // model context: prompt + completion tokens
	MaxNewTokens int // gold completions longer than this are skipped: the policy could never finish them
	// PromptWeight > 0 also trains on the prompt tokens, their NLL weighted
	// this much against the completions'.
	PromptWeight float64
	// Heldout examples are scored (completion NLL, no update) every
	// HeldoutEvery steps and after the last: the loss that says whether the
	// warm start generalises or learns its examples by heart.
	Heldout      []SFTExample
	HeldoutEvery int
	// Start is how many steps an earlier, interrupted warm start did (its
	// saved state is already in the policy): the run goes on from step
	// Start+1 on the same data order.
	Start int
}

// LossPoint is a loss measured after Step optimiser steps.
type LossPoint struct {
	Step int
	NLL  float64
}

// sftBatch packs a batch for Backward with the cotangents of its logprobs:
// -1/N for each of the batch's N completion tokens, and, when promptWeight
// is above 0, -promptWeight/M for each of its M prompt tokens after the
// first (the sequence is then all completion but its first token). A model
// trained from scratch learns the code and the copying a diff needs from the
// prompts as much as from the short replies. n is N.
func sftBatch(batch []Sequence, promptWeight float64) (seqs []Sequence, cot [][]float64, n int) {
	m := 0
	for _, s := range batch {
		n += s.lossTokens()
		m += len(s.Prompt) - 1
	}
	for _, s := range batch {
		row := make([]float64, 0, len(s.Prompt)+len(s.Completion))
		completion := s
		if promptWeight > 0 && len(s.Prompt) > 1 {
			for range len(s.Prompt) - 1 {
				row = append(row, -promptWeight/float64(m))
			}
			s = Sequence{Prompt: s.Prompt[:1], Completion: append(slices.Clone(s.Prompt[1:]), s.Completion...)}
		}
		// An agent's observations are no targets: a cotangent of 0.
		for t := range completion.Completion {
			if completion.lossToken(t) {
				row = append(row, -1/float64(n))
			} else {
				row = append(row, 0)
			}
		}
		seqs, cot = append(seqs, Sequence{Prompt: s.Prompt, Completion: s.Completion}), append(cot, row)
	}
	return seqs, cot, n
}

// SFTResult reports a warm start.
type SFTResult struct {
	Losses    []float64 // mean token NLL per step
	Used      int       // examples trained on
	Synthetic int       // of which synthetic fixes
	Skipped   SFTSkips  // gold completions too long to use
	Heldout   []LossPoint
}

// SFTExample is one (prompt, completion) pair, tokenised.
type SFTExample struct {
	InstanceID string // "<id>#synthetic-<k>" for a task's synthetic fixes
	Synthetic  bool
	Seq        Sequence
}

// SFTData says which examples SFTExamples makes.
type SFTData struct {
	Context int // model context: prompt + completion tokens
	MaxNew  int // completion cap (sample.max_new_tokens)
	// Synthetic fixes per task (augment.go), drawn when the prompter can
	// list the files it shows.
	Synthetic int
	Seed      int64
	// ContextLines > 0 trims each gold reply's context to this many lines
	// around a change (task.TrimContext).
	ContextLines int
	// RenameFrac of the synthetic fixes get made-up package names
	// (RenamePackages).
	RenameFrac float64
	// Chat is the prompter's chat format: the synthetic fixes' prompts and
	// every reply's end of turn are written in it (zero: ChatML).
	Chat prompt.ChatFormat
}

// SFTSkips says which gold replies SFTExamples left out, and why: longer
// than SFTData.MaxNew tokens, which the policy could never finish.
type SFTSkips struct {
	Gold    int // gold replies in all
	TooLong int // of which too long
	Longest int // the longest one's tokens
	IDs     []string
}

// SFTExamples tokenises each task's prompt and gold completion, and its
// synthetic fixes, keeping the pairs that fit: the completion within MaxNew
// tokens and the whole within the context (the prompt is cut from the front
// when needed). skipped counts the gold completions that do not fit.
func SFTExamples(ctx context.Context, tasks []*task.Instance, p prompt.Prompter, tok prompt.Tokenizer, d SFTData) (out []SFTExample, skipped SFTSkips, err error) {
	add := func(ex SFTExample, promptText, patch string) (bool, error) {
		patch, err := task.TrimContext(patch, d.ContextLines)
		if err != nil {
			return false, fmt.Errorf("sft: gold reply of %s: %w", ex.InstanceID, err)
		}
		c := tok.Encode(d.Chat.GoldCompletion(patch))
		if len(c) > d.MaxNew {
			if !ex.Synthetic {
				skipped.Longest = max(skipped.Longest, len(c))
			}
			return false, nil
		}
		// Cut as prompt.Tokens cuts what GRPO and eval sample from (room for
		// MaxNew), so the policy learns on the prompt it will be given.
		ex.Seq = Sequence{Prompt: prompt.Fit(tok.Encode(promptText), d.Context, d.MaxNew), Completion: c}
		out = append(out, ex)
		return true, nil
	}
	lister, _ := p.(prompt.FileLister)
	if d.Synthetic == 0 {
		lister = nil
	}
	for i, inst := range tasks {
		var text string
		var files []prompt.CodeFile
		if lister != nil { // read the files once, for the prompt and the fixes
			if files, err = lister.Files(ctx, inst); err != nil {
				return nil, skipped, fmt.Errorf("sft: files of %s: %w", inst.InstanceID, err)
			}
			if text, err = d.Chat.RenderPrompt(inst.ProblemStatement, files); err != nil {
				return nil, skipped, fmt.Errorf("sft: prompt %s: %w", inst.InstanceID, err)
			}
		} else if text, err = p.Prompt(ctx, inst); err != nil {
			return nil, skipped, fmt.Errorf("sft: prompt %s: %w", inst.InstanceID, err)
		}
		ok, err := add(SFTExample{InstanceID: inst.InstanceID}, text, inst.Patch)
		if err != nil {
			return nil, skipped, err
		}
		skipped.Gold++
		if !ok {
			skipped.TooLong++
			skipped.IDs = append(skipped.IDs, inst.InstanceID)
		}
		if lister == nil {
			continue
		}
		r := rand.New(rand.NewPCG(uint64(d.Seed), uint64(i)))
		users, patches := SyntheticFixes(r, files, d.Synthetic)
		rr := rand.New(rand.NewPCG(uint64(d.Seed)^renameSalt, uint64(i)))
		for k := range users {
			if d.RenameFrac > 0 && rr.Float64() < d.RenameFrac {
				users[k], patches[k] = RenamePackages(rr, files, users[k], patches[k])
			}
			id := fmt.Sprintf("%s#synthetic-%d", inst.InstanceID, k+1)
			text, err := d.Chat.Render(prompt.System, users[k])
			if err != nil {
				return nil, skipped, fmt.Errorf("sft: prompt %s: %w", id, err)
			}
			if _, err := add(SFTExample{InstanceID: id, Synthetic: true}, text, patches[k]); err != nil {
				return nil, skipped, err
			}
		}
	}
	return out, skipped, nil
}

// RunSFT minimises the gold completions' token NLL, and with PromptWeight
// the prompts' too (see sftBatch). Each step is published as an SFTStep
// (and the stage's progress), then h.AfterStep runs; its error ends the warm
// start. Both hooks may be nil.
func RunSFT(ctx context.Context, opts SFTOptions, pol Policy, examples []SFTExample, h WarmupHooks) (SFTResult, error) {
	publish := h.Publish
	res := SFTResult{Used: len(examples)}
	for _, e := range examples {
		if e.Synthetic {
			res.Synthetic++
		}
	}
	if len(examples) == 0 {
		return res, fmt.Errorf("sft: no task's gold patch fits in sample.max_new_tokens=%d tokens", opts.MaxNewTokens)
	}
	epoch, pos := 0, 0
	order := epochOrder(len(examples), opts.Seed, epoch)
	next := func() Sequence {
		if pos == len(order) {
			epoch, pos = epoch+1, 0
			order = epochOrder(len(examples), opts.Seed, epoch)
		}
		pos++
		return examples[order[pos-1]].Seq
	}
	for range opts.Start * opts.BatchSize { // the batches the earlier run trained on
		next()
	}
	start := time.Now()
	for step := opts.Start + 1; step <= opts.Steps; step++ {
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("sft: %w", err)
		}
		batch := make([]Sequence, 0, opts.BatchSize)
		for len(batch) < opts.BatchSize {
			batch = append(batch, next())
		}
		seqs, cot, n := sftBatch(batch, opts.PromptWeight)
		logp, _, err := pol.Backward(ctx, seqs, cot)
		if err != nil {
			return res, fmt.Errorf("sft step %d: %w", step, err)
		}
		gn, lr := pol.Step()
		if !finite(gn) {
			return res, fmt.Errorf("sft step %d: the gradient norm is %v: the warm start stops without saving (lower sft.lr)", step, gn)
		}
		nll := 0.0
		for i, row := range logp {
			for t, lp := range row[len(row)-len(batch[i].Completion):] {
				if batch[i].lossToken(t) {
					nll -= lp
				}
			}
		}
		if l := nll / float64(n); !finite(l) {
			return res, fmt.Errorf("sft step %d: the loss is %v: the warm start stops without saving (lower sft.lr)", step, l)
		}
		res.Losses = append(res.Losses, nll/float64(n))
		detail := fmt.Sprintf("step %d/%d loss %.3f", step, opts.Steps, nll/float64(n))
		if len(opts.Heldout) > 0 && opts.HeldoutEvery > 0 && (step%opts.HeldoutEvery == 0 || step == opts.Steps) {
			h, err := HeldoutNLL(ctx, pol, opts.Heldout, opts.BatchSize)
			if err != nil {
				return res, fmt.Errorf("sft step %d: held-out loss: %w", step, err)
			}
			res.Heldout = append(res.Heldout, LossPoint{Step: step, NLL: h})
		}
		if k := len(res.Heldout); k > 0 {
			detail += fmt.Sprintf(" held-out %.3f", res.Heldout[k-1].NLL)
		}
		ev := event.SFTStep{Step: step, Steps: opts.Steps, Loss: nll / float64(n), LR: lr, Elapsed: time.Since(start), Resumed: opts.Start}
		if publish != nil {
			if k := len(res.Heldout); k > 0 && res.Heldout[k-1].Step == step {
				ev.Heldout, ev.HeldoutOK = res.Heldout[k-1].NLL, true
			}
			publish(ev)
			publish(event.StageChanged{Stage: "sft", Progress: float64(step) / float64(opts.Steps),
				Detail: fmt.Sprintf("%s (%.1fs)", detail, time.Since(start).Seconds())})
		}
		if h.AfterStep != nil {
			if err := h.AfterStep(ctx, ev); err != nil {
				return res, fmt.Errorf("sft step %d: %w", step, err)
			}
		}
	}
	return res, nil
}

// HeldoutNLL is the mean token NLL of the examples' completions under the
// policy, forward only, in batches of batchSize.
func HeldoutNLL(ctx context.Context, pol Policy, examples []SFTExample, batchSize int) (float64, error) {
	nll, n := 0.0, 0
	for lo := 0; lo < len(examples); lo += max(1, batchSize) {
		var seqs []Sequence
		for _, e := range examples[lo:min(len(examples), lo+max(1, batchSize))] {
			seqs = append(seqs, e.Seq)
		}
		logp, err := pol.Logprobs(ctx, seqs)
		if err != nil {
			return 0, err
		}
		for i, row := range logp {
			for t, lp := range row {
				if seqs[i].lossToken(t) {
					nll -= lp
					n++
				}
			}
		}
	}
	return nll / float64(max(1, n)), nil
}
