package app

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/swetui/swetui/agent"
	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/prompt"
	"github.com/swetui/swetui/rollout"
	"github.com/swetui/swetui/sandbox"
	"github.com/swetui/swetui/train"
)

// Player is rollout.mode's peer, picked here once for a run and for an
// eval: replies (rollout.Single) or trajectories, each in its own session
// of agent.executor's opener (rollout.Agent, turns replies at most; pool
// is called in agent mode only, for the executor that runs in the reward
// pool), drawn with opts; graded by scorer (nil: not graded, as eval's,
// which scores its predictions afterwards).
func (ws *Workspace) Player(pool func() (*sandbox.Pool, error), scorer Grader, opts rollout.SampleOptions, turns int) (rollout.Player, error) {
	c := ws.Cfg
	if c.Rollout.Mode == config.RolloutAgent {
		o, err := ws.executor(pool)
		if err != nil {
			return nil, err
		}
		return ws.agentPlayer(o, scorer, opts, turns), nil
	}
	p := &rollout.Single{Prompter: ws.Prompter, Tok: ws.Tok, Chat: ws.Chat, Context: c.Model.Context, Opts: opts}
	if scorer != nil { // not a typed nil in the interface
		p.Scorer = scorer
	}
	return p, nil
}

// executor is agent.executor's opener of a trajectory's sessions, chosen
// here alone: ExecutorSandbox, a confined sandbox of the reward pool
// (sandbox.Pool.OpenSession, on Docker or Kubernetes). Another executor is
// an agent.Opener and a case here.
func (ws *Workspace) executor(pool func() (*sandbox.Pool, error)) (agent.Opener, error) {
	switch e := ws.Cfg.Agent.Executor; e {
	case config.ExecutorSandbox:
		p, err := pool()
		if err != nil {
			return nil, fmt.Errorf("rollout.mode=agent needs a sandbox host for its sessions: %w", err)
		}
		return p, nil
	default:
		return nil, fmt.Errorf("agent.executor = %q: no such executor", e)
	}
}

// agentPlayer is agent mode's peer (Player).
func (ws *Workspace) agentPlayer(opener agent.Opener, scorer Grader, opts rollout.SampleOptions, turns int) *rollout.Agent {
	c := ws.Cfg
	a := &rollout.Agent{Opener: opener, Session: agent.SessionOptionsOf(c), Prompter: ws.Prompter, Tok: ws.Tok, Chat: ws.Chat,
		Opts: opts, Limits: agent.Limits{Turns: turns, CommandTimeout: time.Duration(c.Agent.CommandTimeoutS) * time.Second,
			TimeoutBudget: c.Agent.TimeoutBudget, ObservationChars: c.Agent.ObservationChars, ObservationTokens: c.Agent.ObservationTokens,
			Context: c.Model.Context, MaxNewTokens: c.Sample.MaxNewTokens, MaxDiffBytes: c.Reward.MaxPatchKB << 10}}
	if scorer != nil {
		a.Scorer = scorer
	}
	return a
}

// SampleOptions are config's: a rollout's temperature, top-p and reply
// length.
func SampleOptions(c config.Config) rollout.SampleOptions {
	return rollout.SampleOptions{Temperature: c.Sample.Temperature, TopP: c.Sample.TopP, MaxNewTokens: c.Sample.MaxNewTokens}
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
	var pool *sandbox.Pool
	defer func() { ClosePool(ctx, pool) }()
	opener, err := ws.executor(func() (p *sandbox.Pool, err error) {
		pool, err = sandbox.NewPool(ctx, sandbox.FromConfig(c, "sft-"+sandbox.NewNonce()[:8]))
		return pool, err
	})
	if err != nil {
		return nil, "", fmt.Errorf("agent warm start: the expert's sessions: %w", err)
	}
	expert := ws.agentPlayer(opener, nil, SampleOptions(c), c.Agent.EvalTurns)
	var todo []int // the tasks with a gold patch, in order
	for i, in := range ws.Tasks {
		if in.Patch != "" {
			todo = append(todo, i)
		}
	}
	play := func(ctx context.Context, i int) (agent.Trajectory, error) {
		in := ws.Tasks[i]
		ids, err := expert.Prompt(ctx, in)
		if err != nil {
			return agent.Trajectory{}, err
		}
		tr, err := expert.Trajectory(ctx, in, ids, &agent.Scripted{Tok: ws.Tok, Chat: ws.Chat, Replies: ws.expertReplies(i)})
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
