package train

import (
	"context"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/rollout"
)

// sampler is the trainer's weights as its Rollouts draw from them: under
// the model lock, or from the newest snapshot in async mode.
type sampler struct{ t *Trainer }

var _ rollout.Sampler = sampler{}

func (s sampler) Sample(ctx context.Context, prompt []int, n int, opts SampleOptions) ([]Sample, int, error) {
	return s.t.sample(ctx, prompt, n, opts)
}

func (s sampler) SampleTurn(ctx context.Context, context []int, opts SampleOptions) (Sample, int, error) {
	return s.t.sampleTurn(ctx, context, opts)
}

// sample draws a group's completions and says which weight version drew
// them. The async loop samples from a snapshot, concurrently with training;
// otherwise sampling waits for the update in flight.
func (t *Trainer) sample(ctx context.Context, prompt []int, g int, opts SampleOptions) ([]Sample, int, error) {
	if ss, ok := t.d.Policy.(SnapshotSampler); ok && t.cfg.GRPO.Async.Enabled {
		return ss.SampleSnapshot(ctx, prompt, g, opts)
	}
	t.model.Lock()
	defer t.model.Unlock()
	samples, err := t.d.Policy.Sample(ctx, prompt, g, opts)
	return samples, t.d.Policy.Version(), err
}

// sampleTurn draws one reply of a trajectory as sample draws a group,
// through the policy's turn cache where it has one. Trajectories sample
// their turns at once: a TurnPolicy decodes them together.
func (t *Trainer) sampleTurn(ctx context.Context, context []int, opts SampleOptions) (Sample, int, error) {
	tp, ok := t.d.Policy.(TurnPolicy)
	if !ok {
		ss, v, err := t.sample(ctx, context, 1, opts)
		if err != nil {
			return Sample{}, v, err
		}
		return ss[0], v, nil
	}
	if _, snap := t.d.Policy.(SnapshotSampler); snap && t.cfg.GRPO.Async.Enabled {
		return tp.SampleTurnSnapshot(ctx, context, opts)
	}
	// Shared: the policy decodes the trajectories' turns together.
	t.model.RLock()
	defer t.model.RUnlock()
	s, err := tp.SampleTurn(ctx, context, opts)
	return s, t.d.Policy.Version(), err
}

// trainable reports whether completion i of gr may train: not an
// infrastructure failure, and finished (a trajectory that submitted)
// unless agent.unfinished says otherwise.
func (t *Trainer) trainable(gr *group, i int) bool {
	if gr.verdicts[i].Infra {
		return false
	}
	return !gr.unfinished(i) || t.cfg.Agent.Unfinished != config.UnfinishedMask
}

// agentMetrics are the shares of what ended the step's trajectories and
// their mean number of turns.
func agentMetrics(m *event.Metrics, groups []*group) {
	n := 0
	turns := 0
	counts := map[event.End]int{}
	for _, gr := range groups {
		for _, tr := range gr.trajs {
			if tr == nil {
				continue // a reply
			}
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
