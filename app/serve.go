package app

import (
	"context"
	"time"

	"github.com/swetui/swetui/agent"
	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/sandbox"
	"github.com/swetui/swetui/serve"
	"github.com/swetui/swetui/task"
)

// ServeSessions opens `swetui serve`'s agent sessions on the pool's hosts,
// as agent mode opens its own (agent.OpenTask): the repository at the base
// commit, the test patch's files absent, the pool's confinement and
// labels.
func ServeSessions(cfg config.Config, pool *sandbox.Pool) serve.SessionOpener {
	opts := agent.SessionOptionsOf(cfg)
	maxOut, maxDiff := cfg.Serve.ExecOutputKB<<10, cfg.Reward.MaxPatchKB<<10
	return func(ctx context.Context, in *task.Instance) (serve.Session, error) {
		s, err := agent.OpenTask(ctx, pool, in, opts)
		if err != nil {
			return nil, err
		}
		return servedSession{s: s, base: in.BaseCommit, maxOut: maxOut, maxDiff: maxDiff}, nil
	}
}

// servedSession is a sandbox session as the server drives it.
type servedSession struct {
	s       sandbox.Session
	base    string
	maxOut  int
	maxDiff int
}

func (s servedSession) Exec(ctx context.Context, command string, timeout time.Duration) (serve.ExecResponse, error) {
	r, err := s.s.Exec(ctx, command, sandbox.ExecOptions{Timeout: timeout, MaxOutput: s.maxOut})
	return serve.ExecResponse{ExitCode: r.ExitCode, Output: r.Output, OutputBytes: r.Bytes, OutputCut: r.Bytes > int64(s.maxOut),
		OutputOmitted: r.Omitted, TimedOut: r.TimedOut, DurationS: r.Duration.Seconds()}, err
}

func (s servedSession) Diff(ctx context.Context) (string, error) {
	return s.s.Diff(ctx, s.base, s.maxDiff)
}

func (s servedSession) Close() error { return s.s.Close() }
