package train

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/prompt"
	"github.com/swetui/swetui/task"
)

// agentMode reports whether rollouts are agent trajectories.
func (t *Trainer) agentMode() bool { return t.cfg.Rollout.Mode == config.RolloutAgent }

// agentGroup plays G trajectories of inst (Deps.Agent) and makes them a
// group: the prompt shared, each sample the rest of its trajectory as
// sampled and observed, with its mask, and the verdicts of their diffs.
func (t *Trainer) agentGroup(ctx context.Context, inst *task.Instance, cur cursor, phase string) (*group, error) {
	if t.d.Agent == nil {
		return nil, fmt.Errorf("rollout.mode = agent: this run has no agent (no sandbox pool)")
	}
	begin := time.Now()
	text, err := prompt.AgentPromptOf(ctx, t.d.Prompter, t.d.Chat, inst)
	if err != nil {
		return nil, fmt.Errorf("agent prompt %s: %w", inst.InstanceID, err)
	}
	maxNew := t.cfg.Sample.MaxNewTokens
	ids := prompt.Fit(t.d.Tokenizer.Encode(text), t.cfg.Model.Context, maxNew)
	opts := t.sampleOptions()
	var mu sync.Mutex
	version := -1 // the oldest weights any turn sampled from
	sample := func(ctx context.Context, context []int, maxNew int) (Sample, error) {
		o := opts
		o.MaxNewTokens = maxNew
		ss, v, err := t.sampleTurn(ctx, context, o)
		if err != nil {
			return Sample{}, err
		}
		mu.Lock()
		if version < 0 || v < version {
			version = v
		}
		mu.Unlock()
		return ss[0], nil
	}
	g := t.cfg.GRPO.GroupSizeIn(phase)
	rs, err := t.d.Agent.Rollouts(ctx, inst, ids, g, phase, sample)
	if err != nil {
		return nil, fmt.Errorf("agent %s: %w", inst.InstanceID, err)
	}
	gr := &group{inst: inst, cursor: cur, version: max(version, 0), prompt: ids, agent: true, phase: phase}
	for i, r := range rs {
		if r.Agent == nil {
			return nil, fmt.Errorf("agent %s: trajectory %d has no turns recorded", inst.InstanceID, i)
		}
		n := min(r.PromptLen, len(r.Tokens))
		gr.samples = append(gr.samples, Sample{Tokens: r.Tokens[n:], Logprobs: r.Logprobs[n:], Truncated: !r.Finished})
		gr.masks = append(gr.masks, r.Sampled[n:])
		gr.finished = append(gr.finished, r.Finished)
		gr.trajs = append(gr.trajs, r.Agent)
		gr.texts = append(gr.texts, "") // its turns are kept as data (CompletionScored.Agent), not twice
		gr.verdicts = append(gr.verdicts, r.Verdict)
	}
	gr.sampleTime = time.Since(begin)
	return gr, nil
}

// sampleTurn draws one reply of a trajectory as sample draws a group,
// through the policy's turn cache where it has one. Trajectories sample
// their turns at once: a TurnPolicy decodes them together.
func (t *Trainer) sampleTurn(ctx context.Context, context []int, opts SampleOptions) ([]Sample, int, error) {
	tp, ok := t.d.Policy.(TurnPolicy)
	if !ok {
		return t.sample(ctx, context, 1, opts)
	}
	if _, snap := t.d.Policy.(SnapshotSampler); snap && t.cfg.GRPO.Async.Enabled {
		s, v, err := tp.SampleTurnSnapshot(ctx, context, opts)
		return []Sample{s}, v, err
	}
	// Shared: the policy decodes the trajectories' turns together.
	t.model.RLock()
	defer t.model.RUnlock()
	s, err := tp.SampleTurn(ctx, context, opts)
	return []Sample{s}, t.d.Policy.Version(), err
}

// trainable reports whether completion i of gr may train: not an
// infrastructure failure, and in agent mode finished unless
// agent.unfinished says otherwise.
func (t *Trainer) trainable(gr *group, i int) bool {
	if gr.verdicts[i].Infra {
		return false
	}
	return !gr.agent || gr.finished[i] || t.cfg.Agent.Unfinished != config.UnfinishedMask
}

// agentMetrics are the shares of what ended the step's trajectories and
// their mean number of turns.
func agentMetrics(m *event.Metrics, groups []*group) {
	n := 0
	turns := 0
	counts := map[event.End]int{}
	for _, gr := range groups {
		if !gr.agent {
			continue
		}
		for _, tr := range gr.trajs {
			counts[tr.End]++
			turns += len(tr.Turns)
			n++
		}
	}
	if n == 0 {
		return
	}
	share := func(e event.End) float64 { return float64(counts[e]) / float64(n) }
	m.AgentSubmitted, m.AgentTurnLimit, m.AgentContextFull = share(event.EndSubmitted), share(event.EndTurnLimit), share(event.EndContextFull)
	m.AgentTimeouts, m.AgentContainer = share(event.EndTimeoutBudget), share(event.EndContainer)
	m.AgentTurns = float64(turns) / float64(n)
}
