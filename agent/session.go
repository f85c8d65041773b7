package agent

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/sandbox"
	"github.com/swetui/swetui/task"
)

// Opener opens sessions: *sandbox.Pool.
type Opener interface {
	OpenSession(ctx context.Context, spec sandbox.Spec) (sandbox.Session, error)
}

// SessionOptions are how OpenTask opens a session.
type SessionOptions struct {
	User       string        // sandbox.user ("" the image's)
	Life       time.Duration // its whole life (agent.session_minutes)
	Background bool          // what a command leaves runs on (agent.background)
	CPUTime    time.Duration // and then the session's CPU time at most (agent.background_cpu_s)
}

// SessionOptionsOf are config's session options.
func SessionOptionsOf(c config.Config) SessionOptions {
	return SessionOptions{User: c.Sandbox.User, Life: time.Duration(c.Agent.SessionMinutes) * time.Minute, Background: c.Agent.Background,
		CPUTime: time.Duration(c.Agent.BackgroundCPUS) * time.Second}
}

// OpenTask opens a session on in's image with its repository at the base
// commit and nothing else in its tree (the test patch's files come only at
// grading, in a fresh sandbox), as o says.
func OpenTask(ctx context.Context, o Opener, in *task.Instance, opts SessionOptions) (sandbox.Session, error) {
	spec := sandbox.Spec{ID: "agent-" + sandbox.NewNonce()[:10], InstanceID: in.InstanceID, Image: in.ImageName(),
		Workdir: in.WorkdirOrDefault(), User: opts.User, Timeout: opts.Life, Background: opts.Background,
		CPUTime: opts.CPUTime}
	s, err := o.OpenSession(ctx, spec)
	if err != nil {
		return nil, err
	}
	// The eval script's checkout: the base commit, the tree clean.
	cmd := fmt.Sprintf("git checkout -q -f %s && git clean -fdxq", strconv.Quote(in.BaseCommit))
	if in.RepoSetup != "" {
		cmd += " && " + in.RepoSetup
	}
	res, err := s.Exec(ctx, cmd, sandbox.ExecOptions{Timeout: 5 * time.Minute})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exit %d: %s", res.ExitCode, res.Output)
	}
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("open session for %s: check out %s: %w", in.InstanceID, in.BaseCommit, err)
	}
	return s, nil
}
