package app

import (
	"context"
	"fmt"
	"time"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/reward"
	"github.com/swetui/swetui/sandbox"
	"github.com/swetui/swetui/task"
)

// Rewards opens the reward engine: the Docker pool when a daemon answers
// (dockerErr says why not otherwise) and the scorer with the tasks'
// repositories registered for host-side apply checks.
func (ws *Workspace) Rewards(ctx context.Context, runID string, events event.Publisher) (sc *reward.Scorer, pool *sandbox.Pool, dockerErr error) {
	opts := sandbox.FromConfig(ws.Cfg, runID)
	opts.Events = events
	pool, dockerErr = sandbox.NewPool(ctx, opts)
	var ev reward.Evaluator
	if dockerErr == nil {
		ev = &reward.PoolEvaluator{Pool: pool}
	}
	sc = reward.NewScorer(ws.Cfg.Reward, ev)
	if sc.Applier != nil {
		for id, path := range ws.Repos {
			sc.Applier.RegisterInstance(id, path)
		}
		if dockerErr == nil {
			sc.Applier.Fill = ImageFill(ws.Cfg, runID, func(repo string) *task.Instance {
				for _, in := range ws.Tasks {
					if in.Repo == repo {
						return in
					}
				}
				return nil
			})
		}
	}
	return sc, pool, dockerErr
}

// ImageFill fills the apply-check cache of a repository that has no local
// clone once, by copying its working tree out of a task's image (the first
// Docker host's copy).
func ImageFill(cfg config.Config, runID string, instanceOf func(repo string) *task.Instance) func(ctx context.Context, repo, dst string) error {
	return func(ctx context.Context, repo, dst string) error {
		in := instanceOf(repo)
		if in == nil {
			return fmt.Errorf("no task of %s names an image to copy it from", repo)
		}
		d, err := sandbox.Connect(ctx, sandbox.ParseHosts(cfg.Sandbox.Hosts).FirstDocker())
		if err != nil {
			return err
		}
		defer d.Close()
		return sandbox.CopyOut(ctx, d, runID, in.ImageName(), in.WorkdirOrDefault(), dst)
	}
}

// ClosePool tears the pool down with its own deadline: the run's context
// is usually cancelled by then.
func ClosePool(ctx context.Context, pool *sandbox.Pool) {
	if pool == nil {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	_ = pool.Close(cctx)
}
