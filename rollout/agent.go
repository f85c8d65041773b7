package rollout

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/swetui/swetui/agent"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/prompt"
	"github.com/swetui/swetui/task"
)

// DiffScorer grades diffs in a curriculum phase (reward.Scorer): a
// trajectory's work-tree diff, in a fresh sandbox.
type DiffScorer interface {
	ScoreDiffs(ctx context.Context, inst *task.Instance, diffs []string, phase string) ([]event.Verdict, error)
}

// Agent plays G trajectories of a task at once, each in its own session
// that Opener opens (agent.Episode: the policy runs a command a turn), and
// grades each one's diff with Scorer as it ends (nil: not graded, as eval
// does, which scores its predictions afterwards).
type Agent struct {
	Opener   agent.Opener
	Session  agent.SessionOptions
	Prompter prompt.Prompter
	Tok      prompt.Tokenizer
	Chat     prompt.ChatFormat
	Limits   agent.Limits
	Opts     SampleOptions // a reply's temperature and top-p (Limits bound its length)
	Scorer   DiffScorer
	// Bus is told of each turn as it is played (event.TurnPlayed), for the
	// console; nil: nothing is.
	Bus event.Publisher
}

var _ Player = (*Agent)(nil)

// Prompt is the agent prompt of inst as token ids, fitted to leave a
// reply's room in the context.
func (a *Agent) Prompt(ctx context.Context, inst *task.Instance) ([]int, error) {
	text, err := prompt.AgentPromptOf(ctx, a.Prompter, a.Chat, inst)
	if err != nil {
		return nil, fmt.Errorf("agent prompt %s: %w", inst.InstanceID, err)
	}
	return prompt.Fit(a.Tok.Encode(text), a.Limits.Context, a.Limits.MaxNewTokens), nil
}

// Play implements Player: the g trajectories play at once, each in its own
// session, their turns drawn through s (which serialises or batches them).
func (a *Agent) Play(ctx context.Context, inst *task.Instance, g int, phase string, s Sampler) (*Group, error) {
	begin := time.Now()
	ids, err := a.Prompt(ctx, inst)
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	version := -1 // the oldest weights any turn drew from
	turn := turnSampler(func(ctx context.Context, context []int, maxNew int) (Sample, error) {
		o := a.Opts
		o.MaxNewTokens = maxNew
		smp, v, err := s.SampleTurn(ctx, context, o)
		if err != nil {
			return Sample{}, err
		}
		mu.Lock()
		if version < 0 || v < version {
			version = v
		}
		mu.Unlock()
		return smp, nil
	})
	gr := &Group{Prompt: ids, Rollouts: make([]Rollout, g), Graded: a.Scorer != nil}
	errs := make([]error, g)
	var wg sync.WaitGroup
	for i := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			gr.Rollouts[i], errs[i] = a.play(ctx, inst, ids, phase, turn)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("agent %s: %w", inst.InstanceID, err)
		}
	}
	gr.Version, gr.SampleTime = max(version, 0), time.Since(begin)
	return gr, nil
}

// Grade implements Player: trajectories are graded as they end.
func (a *Agent) Grade(context.Context, *task.Instance, *Group, string) error { return nil }

// Together implements Player: a step's groups play at once, their turns
// decoded together and their commands overlapping.
func (a *Agent) Together() bool { return true }

// play is one trajectory as a Rollout, graded when a.Scorer is set.
func (a *Agent) play(ctx context.Context, inst *task.Instance, ids []int, phase string, s agent.Sampler) (Rollout, error) {
	tr, err := a.Trajectory(ctx, inst, ids, s)
	if err != nil {
		return Rollout{}, err
	}
	n := min(tr.PromptLen, len(tr.Tokens))
	r := Rollout{Sample: Sample{Tokens: tr.Tokens[n:], Logprobs: tr.Logprobs[n:], Truncated: !tr.End.Finished()},
		Mask: tr.Sampled[n:], Finished: tr.End.Finished(), Diff: tr.Diff, Agent: Record(tr)}
	switch {
	case a.Scorer == nil:
	case tr.End == event.EndContainer && tr.Infra:
		r.Verdict = lostSandbox(event.Verdict{InstanceID: inst.InstanceID, Phase: phase}, tr)
	default:
		vs, err := a.Scorer.ScoreDiffs(ctx, inst, []string{tr.Diff}, phase)
		if err != nil {
			return r, err
		}
		r.Verdict = lostSandbox(vs[0], tr)
	}
	return r, nil
}

// Trajectory plays one trajectory of inst from ids in a session of its
// own, turns drawn by s, and closes the session. A session that does not
// open is the sandbox's failure, never the policy's, by one rule wherever
// a trajectory is played: it ends event.EndContainer with Infra set
// (masked in training, left out of the warm start, an empty diff in eval).
// The error is the caller's (a cancelled ctx, the sampler failing).
func (a *Agent) Trajectory(ctx context.Context, inst *task.Instance, ids []int, s agent.Sampler) (agent.Trajectory, error) {
	sess, err := agent.OpenTask(ctx, a.Opener, inst, a.Session)
	if err != nil {
		if ctx.Err() != nil {
			return agent.Trajectory{}, ctx.Err()
		}
		return agent.Trajectory{PromptLen: len(ids), Tokens: ids, Sampled: make([]bool, len(ids)), Logprobs: make([]float64, len(ids)),
			End: event.EndContainer, Infra: true, Detail: "no session: " + err.Error()}, nil
	}
	defer sess.Close()
	ep := agent.Episode{Session: sess, Sampler: s, Tok: a.Tok, Chat: a.Chat, Limits: a.Limits, BaseCommit: inst.BaseCommit}
	if a.Bus != nil {
		ep.OnTurn = publishTurns(a.Bus, sess.ID(), inst.InstanceID)
	}
	return ep.Run(ctx, ids)
}

// lostSandbox is the verdict of tr's diff, v, as training takes it: a
// sandbox lost for no doing of the agent's is an infrastructure failure
// (masked); one its own processes destroyed is its failure, the trajectory
// unfinished, scored as agent.unfinished says.
func lostSandbox(v event.Verdict, tr agent.Trajectory) event.Verdict {
	if tr.End == event.EndContainer && tr.Infra {
		v.Infra, v.InfraCause = true, "agent session: "+tr.Detail
	}
	return v
}

// turnSampler is a Sampler's turn as the agent's.
type turnSampler func(ctx context.Context, context []int, maxNew int) (Sample, error)

func (s turnSampler) SampleTurn(ctx context.Context, context []int, maxNew int) ([]int, []float64, bool, error) {
	r, err := s(ctx, context, maxNew)
	return r.Tokens, r.Logprobs, r.Truncated, err
}

// publishTurns is an Episode's OnTurn that says each turn of the
// trajectory in session, and its end, on bus: cut small (Bounded), and
// without waiting (TurnPlayed is high-rate: a console that is behind loses
// it, the agent never waits on the console).
func publishTurns(bus event.Publisher, session, instanceID string) func(agent.Progress) {
	return func(p agent.Progress) {
		if p.End != "" {
			bus.Publish(event.TurnPlayed{Session: session, InstanceID: instanceID, Turn: p.N, End: p.End, Detail: p.Detail,
				DiffBytes: p.DiffBytes}.Bounded())
			return
		}
		// The loop's own reading of the reply says whether it submitted.
		submitted := p.Turn.Command == "" && agent.ParseReply(p.Turn.Reply).Submit
		bus.Publish(event.PlayedTurn(session, instanceID, p.N, event.Turn(p.Turn), submitted))
	}
}

// Record is what rollouts.jsonl and `swetui eval`'s trajectories.jsonl
// keep of a trajectory: its end and every turn, without the token ids
// (rollouts.jsonl packs those with their logprobs).
func Record(tr agent.Trajectory) *event.Trajectory {
	rec := &event.Trajectory{End: tr.End, Detail: tr.Detail, Turns: make([]event.Turn, len(tr.Turns))}
	for i, t := range tr.Turns {
		// A conversion, not a copy field by field: it compiles only while
		// the two types have the same fields, so none is dropped unseen.
		rec.Turns[i] = event.Turn(t)
	}
	return rec
}
