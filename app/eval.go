package app

import (
	"context"
	"fmt"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/model"
	"github.com/swetui/swetui/rollout"
	"github.com/swetui/swetui/sandbox"
	"github.com/swetui/swetui/task"
	"github.com/swetui/swetui/train"
)

// Eval is an opened `swetui eval`: a checkpoint's policy on model.device
// that only samples, over a split's tasks, through rollout.mode's peer.
type Eval struct {
	Workspace *Workspace
	Policy    *Opened
	Model     *model.Model
	Player    rollout.Player
	pool      *sandbox.Pool // agent mode's sessions
}

// OpenEval opens ckpt as model.init_ckpt would be opened (its own tokenizer
// and chat template, read straight onto a device, adapters folded into
// their base) to sample samples replies a task of split (sample.*'s
// options): on a device, no gradients or moments. In agent mode each
// trajectory plays in its own session of a pool of the run's hosts, as
// runID, agent.eval_turns replies at most.
func OpenEval(ctx context.Context, cfg config.Config, ckpt, split string, samples int, runID string) (*Eval, error) {
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
	e := &Eval{Workspace: ws, Policy: pol, Model: m}
	e.Player, err = ws.Player(func() (*sandbox.Pool, error) {
		pool, err := sandbox.NewPool(ctx, sandbox.FromConfig(cfg, runID))
		e.pool = pool
		return pool, err
	}, nil, SampleOptions(cfg), cfg.Agent.EvalTurns)
	if err != nil {
		pol.Close()
		return nil, err
	}
	return e, nil
}

// Predict plays n rollouts of each task in turn (a task's n trajectories
// at once, as a group plays in training) and gives each task its group;
// each rollout's Diff is its prediction.
func (e *Eval) Predict(ctx context.Context, n int, each func(in *task.Instance, gr *rollout.Group) error) error {
	for _, in := range e.Workspace.Tasks {
		gr, err := e.Player.Play(ctx, in, n, "", evalSampler{e.Policy})
		if err != nil {
			return fmt.Errorf("%s: %w", in.InstanceID, err)
		}
		if err := each(in, gr); err != nil {
			return err
		}
	}
	return nil
}

// Close frees the device and the sessions' pool.
func (e *Eval) Close() {
	if e.pool != nil {
		ClosePool(context.Background(), e.pool)
	}
	e.Policy.Close()
}

// evalSampler is a policy that only samples, as a rollout.Sampler: its
// draws are version 0, a trajectory's replies through its turn cache where
// it has one.
type evalSampler struct{ p *Opened }

func (s evalSampler) Sample(ctx context.Context, prompt []int, n int, opts rollout.SampleOptions) ([]rollout.Sample, int, error) {
	ss, err := s.p.Sample(ctx, prompt, n, opts)
	return ss, 0, err
}

func (s evalSampler) SampleTurn(ctx context.Context, context []int, opts rollout.SampleOptions) (rollout.Sample, int, error) {
	if tp, ok := s.p.Policy.(train.TurnPolicy); ok {
		smp, err := tp.SampleTurn(ctx, context, opts)
		return smp, 0, err
	}
	ss, err := s.p.Sample(ctx, context, 1, opts)
	if err != nil {
		return rollout.Sample{}, 0, err
	}
	return ss[0], 0, nil
}
