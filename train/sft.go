package train

import (
	"context"
	"fmt"
	"time"

	"github.com/swetui/swetui/task"
)

// SFTOptions configures the supervised warm start.
type SFTOptions struct {
	Steps        int
	BatchSize    int
	Seed         int64
	Context      int // model context: prompt + completion tokens
	MaxNewTokens int // gold completions longer than this are skipped: the policy could never finish them
}

// SFTResult reports a warm start.
type SFTResult struct {
	Losses  []float64 // mean token NLL per step
	Used    int       // tasks whose gold completion fits
	Skipped int
}

// SFTExample is one (prompt, gold completion) pair, tokenised.
type SFTExample struct {
	InstanceID string
	Seq        Sequence
}

// SFTExamples tokenises each task's prompt and gold completion, keeping the
// pairs that fit: the completion within maxNew tokens and the whole within
// the context (the prompt is cut from the front when needed).
func SFTExamples(ctx context.Context, tasks []*task.Instance, p Prompter, tok Tokenizer, contextLen, maxNew int) ([]SFTExample, int, error) {
	var out []SFTExample
	skipped := 0
	for _, inst := range tasks {
		text, err := p.Prompt(ctx, inst)
		if err != nil {
			return nil, 0, fmt.Errorf("sft: prompt %s: %w", inst.InstanceID, err)
		}
		completion := tok.Encode(GoldCompletion(inst.Patch))
		if len(completion) > maxNew {
			skipped++
			continue
		}
		prompt := tok.Encode(text)
		if room := contextLen - len(completion); len(prompt) > room {
			prompt = prompt[len(prompt)-room:]
		}
		out = append(out, SFTExample{InstanceID: inst.InstanceID, Seq: Sequence{Prompt: prompt, Completion: completion}})
	}
	return out, skipped, nil
}

// RunSFT minimises the gold completions' token NLL: the cotangent of every
// completion token's logprob is -1/N for the batch's N tokens. Progress goes
// to publish as StageChanged("sft") events.
func RunSFT(ctx context.Context, opts SFTOptions, pol Policy, examples []SFTExample, publish func(Event)) (SFTResult, error) {
	res := SFTResult{Used: len(examples)}
	if len(examples) == 0 {
		return res, fmt.Errorf("sft: no task's gold patch fits in sample.max_new_tokens=%d tokens", opts.MaxNewTokens)
	}
	epoch, pos := 0, 0
	order := epochOrder(len(examples), opts.Seed, epoch)
	start := time.Now()
	for step := 1; step <= opts.Steps; step++ {
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("sft: %w", err)
		}
		batch := make([]Sequence, 0, opts.BatchSize)
		for len(batch) < opts.BatchSize {
			if pos == len(order) {
				epoch, pos = epoch+1, 0
				order = epochOrder(len(examples), opts.Seed, epoch)
			}
			batch = append(batch, examples[order[pos]].Seq)
			pos++
		}
		n := 0
		for _, s := range batch {
			n += len(s.Completion)
		}
		cot := make([][]float64, len(batch))
		for i, s := range batch {
			cot[i] = make([]float64, len(s.Completion))
			for j := range cot[i] {
				cot[i][j] = -1 / float64(n)
			}
		}
		logp, _, err := pol.Backward(ctx, batch, cot)
		if err != nil {
			return res, fmt.Errorf("sft step %d: %w", step, err)
		}
		pol.Step()
		nll := 0.0
		for _, row := range logp {
			for _, lp := range row {
				nll -= lp
			}
		}
		res.Losses = append(res.Losses, nll/float64(n))
		if publish != nil {
			publish(StageChanged{Stage: "sft", Progress: float64(step) / float64(opts.Steps),
				Detail: fmt.Sprintf("step %d/%d loss %.3f (%.1fs)", step, opts.Steps, nll/float64(n), time.Since(start).Seconds())})
		}
	}
	return res, nil
}
