package rollout

import (
	"context"
	"fmt"
	"time"

	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/prompt"
	"github.com/swetui/swetui/reward"
	"github.com/swetui/swetui/task"
)

// Scorer grades a group's replies in a curriculum phase (reward.Scorer).
type Scorer interface {
	Score(ctx context.Context, inst *task.Instance, completions []string, phase string) ([]event.Verdict, error)
}

// Single plays G single-shot replies of a task's prompt, each holding a
// diff, and grades them together with Scorer (nil: Play only, as eval
// does, which scores its predictions afterwards).
type Single struct {
	Prompter prompt.Prompter
	Tok      prompt.Tokenizer
	Chat     prompt.ChatFormat
	Scorer   Scorer
	Context  int // model.context: the prompt is fitted to leave Opts.MaxNewTokens
	Opts     SampleOptions
}

var _ Player = (*Single)(nil)

// Play implements Player: the task's prompt, G replies drawn in one
// batched decode, each one's text and extracted diff.
func (p *Single) Play(ctx context.Context, inst *task.Instance, g int, _ string, s Sampler) (*Group, error) {
	begin := time.Now()
	ids, err := prompt.Tokens(ctx, p.Prompter, p.Tok, inst, p.Context, p.Opts.MaxNewTokens)
	if err != nil {
		return nil, err
	}
	samples, version, err := s.Sample(ctx, ids, g, p.Opts)
	if err != nil {
		return nil, fmt.Errorf("sample %s: %w", inst.InstanceID, err)
	}
	gr := &Group{Prompt: ids, Version: version, Rollouts: make([]Rollout, len(samples))}
	for i, smp := range samples {
		text := p.Chat.CompletionText(p.Tok, smp.Tokens)
		gr.Rollouts[i] = Rollout{Sample: smp, Finished: true, Text: text, Diff: reward.Extract(text).Diff}
	}
	gr.SampleTime = time.Since(begin)
	return gr, nil
}

// Grade implements Player: the Scorer grades the replies' texts.
func (p *Single) Grade(ctx context.Context, inst *task.Instance, gr *Group, phase string) error {
	if gr.Graded {
		return nil
	}
	begin := time.Now()
	texts := make([]string, len(gr.Rollouts))
	for i, r := range gr.Rollouts {
		texts[i] = r.Text
	}
	verdicts, err := p.Scorer.Score(ctx, inst, texts, phase)
	if err != nil {
		return fmt.Errorf("score %s: %w", inst.InstanceID, err)
	}
	if len(verdicts) != len(texts) {
		return fmt.Errorf("score %s: %d verdicts for %d completions", inst.InstanceID, len(verdicts), len(texts))
	}
	for i := range gr.Rollouts {
		gr.Rollouts[i].Verdict = verdicts[i]
	}
	gr.Graded, gr.RewardTime = true, time.Since(begin)
	return nil
}

// Together implements Player: a step's groups are drawn one after another,
// each one batched decode, so that a seed draws the same completions.
func (p *Single) Together() bool { return false }
