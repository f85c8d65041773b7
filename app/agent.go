package app

import (
	"context"
	"fmt"
	"golang.org/x/sync/errgroup"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/swetui/swetui/agent"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/prompt"
	"github.com/swetui/swetui/reward"
	"github.com/swetui/swetui/sandbox"
	"github.com/swetui/swetui/task"
	"github.com/swetui/swetui/train"
)

// agentRollouts is agent mode's train.Agent: each trajectory an
// agent.Episode in its own session of the pool, its diff graded by the
// run's scorer in a fresh sandbox.
type agentRollouts struct {
	ws     *Workspace
	pool   *sandbox.Pool
	scorer *reward.Scorer
	limits agent.Limits
	// bus is told of each turn as it is played (event.TurnPlayed), for
	// the console; nil (eval, the warm start, tests): nothing is.
	bus event.Publisher
}

func (ws *Workspace) agentRollouts(pool *sandbox.Pool, scorer *reward.Scorer) *agentRollouts {
	c := ws.Cfg
	return &agentRollouts{ws: ws, pool: pool, scorer: scorer, limits: agent.Limits{Turns: c.Agent.Turns,
		CommandTimeout: time.Duration(c.Agent.CommandTimeoutS) * time.Second, TimeoutBudget: c.Agent.TimeoutBudget,
		ObservationChars: c.Agent.ObservationChars, ObservationTokens: c.Agent.ObservationTokens, Context: c.Model.Context,
		MaxNewTokens: c.Sample.MaxNewTokens, MaxDiffBytes: c.Reward.MaxPatchKB << 10}}
}

// AgentRollouts is agent mode's train.Agent as OpenRun gives it to the
// trainer: each trajectory in its own session of pool, its diff graded by
// scorer. For a trainer wired otherwise (a test's scripted policy).
func (ws *Workspace) AgentRollouts(pool *sandbox.Pool, scorer *reward.Scorer) train.Agent {
	return ws.agentRollouts(pool, scorer)
}

// turnSampler is the trainer's sampler as the agent's.
type turnSampler train.TurnSampler

func (s turnSampler) SampleTurn(ctx context.Context, context []int, maxNew int) ([]int, []float64, bool, error) {
	r, err := s(ctx, context, maxNew)
	return r.Tokens, r.Logprobs, r.Truncated, err
}

// Rollouts implements train.Agent: the g trajectories play at once, each in
// its own session (the trainer serialises their sampling).
func (a *agentRollouts) Rollouts(ctx context.Context, inst *task.Instance, prompt []int, g int, phase string, sample train.TurnSampler) ([]train.Rollout, error) {
	out := make([]train.Rollout, g)
	errs := make([]error, g)
	var wg sync.WaitGroup
	for i := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i], errs[i] = a.play(ctx, inst, prompt, phase, sample)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (a *agentRollouts) play(ctx context.Context, inst *task.Instance, prompt []int, phase string, sample train.TurnSampler) (train.Rollout, error) {
	c := a.ws.Cfg
	r := train.Rollout{Tokens: prompt, Sampled: make([]bool, len(prompt)), Logprobs: make([]float64, len(prompt)), PromptLen: len(prompt)}
	s, err := agent.OpenTask(ctx, a.pool, inst, agent.SessionOptionsOf(c))
	if err != nil {
		if ctx.Err() != nil {
			return r, ctx.Err()
		}
		// Not the policy's: masked as an infrastructure failure.
		r.Agent = &event.Trajectory{End: event.EndContainer, Detail: "no session: " + err.Error()}
		r.Verdict = event.Verdict{InstanceID: inst.InstanceID, Phase: phase, Infra: true, InfraCause: err.Error()}
		return r, nil
	}
	defer s.Close()
	ep := agent.Episode{Session: s, Sampler: turnSampler(sample), Tok: a.ws.Tok, Chat: a.ws.Chat, Limits: a.limits,
		BaseCommit: inst.BaseCommit}
	if a.bus != nil {
		ep.OnTurn = publishTurns(a.bus, s.ID(), inst.InstanceID)
	}
	tr, err := ep.Run(ctx, prompt)
	if err != nil {
		return r, err
	}
	r = train.Rollout{Tokens: tr.Tokens, Sampled: tr.Sampled, Logprobs: tr.Logprobs, PromptLen: tr.PromptLen,
		Finished: tr.End.Finished(), Agent: TrajectoryRecord(tr)}
	vs, err := a.scorer.ScoreDiffs(ctx, inst, []string{tr.Diff}, phase)
	if err != nil {
		return r, err
	}
	r.Verdict = lostSandbox(vs[0], tr)
	return r, nil
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

var _ train.Agent = (*agentRollouts)(nil)

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

// TrajectoryRecord is what rollouts.jsonl and `swetui eval`'s
// trajectories.jsonl keep of a trajectory: its end and every turn, without
// the token ids (rollouts.jsonl packs those with their logprobs).
func TrajectoryRecord(tr agent.Trajectory) *event.Trajectory {
	rec := &event.Trajectory{End: tr.End, Detail: tr.Detail, Turns: make([]event.Turn, len(tr.Turns))}
	for i, t := range tr.Turns {
		// A conversion, not a copy field by field: it compiles only while
		// the two types have the same fields, so none is dropped unseen.
		rec.Turns[i] = event.Turn(t)
	}
	return rec
}

// expertReplies is the scripted expert's replies for task i, the same for
// the same run seed.
func (ws *Workspace) expertReplies(i int) []string {
	return agent.ExpertReplies(ws.Tasks[i], rand.New(rand.NewPCG(uint64(ws.Cfg.Run.Seed), uint64(i))))
}

// AgentWarmStartTexts are what agent mode's warm start learns from beside
// the tokenizer's texts: each task's agent prompt and its expert's
// replies (the observations come from the sandbox), for the shipped warm
// start's inputs hash.
func (ws *Workspace) AgentWarmStartTexts(ctx context.Context, tokenizerTexts []string) ([]string, error) {
	texts := slices.Clone(tokenizerTexts)
	for i, in := range ws.Tasks {
		if in.Patch == "" {
			continue
		}
		p, err := prompt.AgentPromptOf(ctx, ws.Prompter, ws.Chat, in)
		if err != nil {
			return nil, err
		}
		texts = append(append(texts, p), ws.expertReplies(i)...)
	}
	return texts, nil
}

// expertSessions is how many of the expert's sessions play at once.
const expertSessions = 4

// agentSFTExamples are agent mode's warm-start examples: a scripted
// expert's trajectory for each training task with a gold patch
// (agent.ExpertReplies), played in a session of the run's hosts through the
// same loop as the policy, so each example is the exact tokens the policy
// is to sample, its observations masked. Trajectories that do not submit
// within model.context are left out, and said.
func (ws *Workspace) agentSFTExamples(ctx context.Context) ([]train.SFTExample, string, error) {
	c := ws.Cfg
	pool, err := sandbox.NewPool(ctx, sandbox.FromConfig(c, "sft-"+sandbox.NewNonce()[:8]))
	if err != nil {
		return nil, "", fmt.Errorf("agent warm start: the expert's sessions need a sandbox host: %w", err)
	}
	defer ClosePool(ctx, pool)
	l := ws.agentRollouts(pool, nil).limits
	l.Turns = c.Agent.EvalTurns
	var todo []int // the tasks with a gold patch, in order
	for i, in := range ws.Tasks {
		if in.Patch != "" {
			todo = append(todo, i)
		}
	}
	play := func(ctx context.Context, i int) (agent.Trajectory, error) {
		in := ws.Tasks[i]
		text, err := prompt.AgentPromptOf(ctx, ws.Prompter, ws.Chat, in)
		if err != nil {
			return agent.Trajectory{}, err
		}
		ids := prompt.Fit(ws.Tok.Encode(text), c.Model.Context, c.Sample.MaxNewTokens)
		s, err := agent.OpenTask(ctx, pool, in, agent.SessionOptionsOf(c))
		if err != nil {
			if ctx.Err() != nil {
				return agent.Trajectory{}, ctx.Err()
			}
			// The sandbox's, not the task's: one task fewer to learn from.
			return agent.Trajectory{End: event.EndContainer, Detail: err.Error()}, nil
		}
		defer s.Close()
		tr, err := agent.Episode{Session: s, Sampler: &agent.Scripted{Tok: ws.Tok, Chat: ws.Chat, Replies: ws.expertReplies(i)},
			Tok: ws.Tok, Chat: ws.Chat, Limits: l, BaseCommit: in.BaseCommit}.Run(ctx, ids)
		if err != nil {
			return tr, fmt.Errorf("agent warm start %s: %w", in.InstanceID, err)
		}
		return tr, nil
	}
	var out []train.SFTExample
	left, lost := 0, 0
	var lostWhy string
	// The sessions wait on the daemon more than on the CPU: a few play at
	// once, a batch at a time, kept in the tasks' order.
	const batch = 8
	for b := 0; b < len(todo); b += batch {
		ids := todo[b:min(b+batch, len(todo))]
		trs := make([]agent.Trajectory, len(ids))
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(expertSessions)
		for j, i := range ids {
			g.Go(func() (err error) {
				trs[j], err = play(gctx, i)
				return err
			})
		}
		if err := g.Wait(); err != nil {
			return nil, "", err
		}
		for j, tr := range trs {
			if tr.End == event.EndContainer {
				lost++
				lostWhy = tr.Detail
				continue
			}
			if tr.End != event.EndSubmitted {
				left++
				continue
			}
			n := tr.PromptLen
			out = append(out, train.SFTExample{InstanceID: ws.Tasks[ids[j]].InstanceID,
				Seq: train.Sequence{Prompt: tr.Tokens[:n], Completion: tr.Tokens[n:], Mask: tr.Sampled[n:]}})
		}
		if len(out) == 0 {
			break // the context is too small for any of them, or no session opens: say so now, not after every task
		}
	}
	if len(out) == 0 && lost > 0 {
		return nil, "", fmt.Errorf("agent warm start: %d of the first expert sessions could not be played: %s", lost, lostWhy)
	}
	if len(out) == 0 {
		return nil, "", fmt.Errorf("agent warm start: none of the first %d expert trajectories submits within model.context = %d tokens: raise agent.context",
			left, c.Model.Context)
	}
	note := fmt.Sprintf("agent warm start: %d expert trajectories played in sessions", len(out))
	if left > 0 {
		note += fmt.Sprintf("; %d left out: they did not submit within model.context = %d tokens", left, c.Model.Context)
	}
	if lost > 0 {
		note += fmt.Sprintf("; %d left out: their session failed (%s)", lost, lostWhy)
	}
	return out, note, nil
}
