package app

import (
	"context"
	"fmt"
	"golang.org/x/sync/errgroup"

	"github.com/swetui/swetui/agent"
	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/model"
	"github.com/swetui/swetui/prompt"
	"github.com/swetui/swetui/reward"
	"github.com/swetui/swetui/sandbox"
	"github.com/swetui/swetui/task"
	"github.com/swetui/swetui/train"
)

// Eval is an opened `swetui eval`: a checkpoint's policy on model.device
// that only samples, over a split's tasks.
type Eval struct {
	Workspace *Workspace
	Policy    *Opened
	Model     *model.Model
}

// OpenEval opens ckpt as model.init_ckpt would be opened (its own tokenizer
// and chat template, read straight onto a device, adapters folded into
// their base) to sample samples replies a task of split: on a device, no
// gradients or moments.
func OpenEval(ctx context.Context, cfg config.Config, ckpt, split string, samples int) (*Eval, error) {
	cfg.Model.InitCkpt, cfg.Model.Tokenizer = ckpt, ""
	if _, ok := HFFolder(ckpt); !ok {
		return nil, fmt.Errorf("%s holds no tokenizer.json (nor its policy/): not a checkpoint swetui or Hugging Face wrote", ckpt)
	}
	ws, err := Open(ctx, cfg, split)
	if err != nil {
		return nil, err
	}
	ws.SampleOnly = samples
	m, err := ws.NewModel()
	if err != nil {
		return nil, err
	}
	host, err := ws.NewPolicy(m, cfg.Optim.LR, 1)
	if err != nil {
		return nil, err
	}
	pol, err := ws.OpenPolicy(ctx, host, nil)
	if err != nil {
		return nil, err
	}
	return &Eval{Workspace: ws, Policy: pol, Model: m}, nil
}

// Predict samples n replies for each task in turn, prompted as GRPO
// prompts, and gives each its extracted diff.
func (e *Eval) Predict(ctx context.Context, opts train.SampleOptions, n int, each func(in *task.Instance, replies []reward.Extraction) error) error {
	ws := e.Workspace
	for _, in := range ws.Tasks {
		ids, err := prompt.Tokens(ctx, ws.Prompter, ws.Tok, in, ws.Cfg.Model.Context, opts.MaxNewTokens)
		if err != nil {
			return err
		}
		replies, err := e.Policy.Sample(ctx, ids, n, opts)
		if err != nil {
			return fmt.Errorf("%s: %w", in.InstanceID, err)
		}
		exs := make([]reward.Extraction, len(replies))
		for i, r := range replies {
			exs[i] = reward.Extract(ws.Chat.CompletionText(ws.Tok, r.Tokens))
		}
		if err := each(in, exs); err != nil {
			return err
		}
	}
	return nil
}

// Close frees the device.
func (e *Eval) Close() { e.Policy.Close() }

// PredictAgent plays n trajectories a task in agent mode (agent.eval_turns
// replies at most), each in its own session of a pool of the run's hosts,
// a task's n at once (as a group plays in training), and gives each task
// its trajectories (the first one's diff is the prediction).
func (e *Eval) PredictAgent(ctx context.Context, runID string, opts train.SampleOptions, n int, each func(in *task.Instance, trs []agent.Trajectory) error) error {
	ws := e.Workspace
	c := ws.Cfg
	pool, err := sandbox.NewPool(ctx, sandbox.FromConfig(c, runID))
	if err != nil {
		return fmt.Errorf("agent mode needs a sandbox host for its sessions: %w", err)
	}
	defer ClosePool(ctx, pool)
	l := ws.agentRollouts(pool, nil).limits
	l.Turns = c.Agent.EvalTurns
	sample := turnSampler(func(ctx context.Context, context []int, maxNew int) (train.Sample, error) {
		o := opts
		o.MaxNewTokens = maxNew
		if tp, ok := e.Policy.Policy.(train.TurnPolicy); ok {
			return tp.SampleTurn(ctx, context, o)
		}
		ss, err := e.Policy.Sample(ctx, context, 1, o)
		if err != nil {
			return train.Sample{}, err
		}
		return ss[0], nil
	})
	for _, in := range ws.Tasks {
		text, err := prompt.AgentPromptOf(ctx, ws.Prompter, ws.Chat, in)
		if err != nil {
			return err
		}
		ids := prompt.Fit(ws.Tok.Encode(text), c.Model.Context, c.Sample.MaxNewTokens)
		trs := make([]agent.Trajectory, n)
		g, gctx := errgroup.WithContext(ctx)
		for i := range trs {
			g.Go(func() error {
				s, err := agent.OpenTask(gctx, pool, in, agent.SessionOptionsOf(c))
				if err != nil {
					return err
				}
				defer s.Close()
				trs[i], err = agent.Episode{Session: s, Sampler: sample, Tok: ws.Tok, Chat: ws.Chat, Limits: l, BaseCommit: in.BaseCommit}.Run(gctx, ids)
				return err
			})
		}
		if err := g.Wait(); err != nil {
			return fmt.Errorf("%s: %w", in.InstanceID, err)
		}
		if err := each(in, trs); err != nil {
			return err
		}
	}
	return nil
}
