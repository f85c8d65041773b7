package rollout

import (
	"context"
	"time"

	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/task"
)

// SampleOptions controls one group's sampling.
type SampleOptions struct {
	Temperature  float64
	TopP         float64
	MaxNewTokens int
}

// Sample is one sampled completion: its tokens, the behaviour policy's
// logprob of each, and whether max_new_tokens cut it.
type Sample struct {
	Tokens    []int
	Logprobs  []float64
	Truncated bool
}

// Sampler draws with a policy's weights and says which version drew each
// draw: the trainer's (under its lock, or its newest snapshot in async
// mode) or a policy that only samples (eval, version 0).
type Sampler interface {
	// Sample draws n completions of prompt.
	Sample(ctx context.Context, prompt []int, n int, opts SampleOptions) ([]Sample, int, error)
	// SampleTurn draws one reply of a trajectory (n = 1), through the
	// policy's turn cache where it has one.
	SampleTurn(ctx context.Context, context []int, opts SampleOptions) (Sample, int, error)
}

// Rollout is one played rollout: a reply, or a trajectory.
type Rollout struct {
	// Sample is what follows the prompt: a reply's tokens, or a
	// trajectory's replies and observations as played; Truncated says
	// max_new_tokens cut the reply, or the trajectory did not submit.
	Sample
	// Mask says which of Tokens the policy drew (a trajectory's replies,
	// not its observations); nil: all of them.
	Mask []bool
	// Finished is false for a trajectory that did not submit (a reply is
	// always finished): agent.unfinished says what it trains on.
	Finished bool
	// Text is a reply's text as the scorer grades it; "" for a trajectory,
	// whose turns Agent keeps as data.
	Text string
	// Diff is the patch it proposes: the one extracted from a reply, or
	// the work tree's change a trajectory leaves.
	Diff string
	// Agent is a trajectory turn by turn (its end, each command and what
	// came back); nil for a reply.
	Agent *event.Trajectory
	// Verdict grades Diff in the group's phase, once graded.
	Verdict event.Verdict
}

// Group is one task's G rollouts as a Player played them.
type Group struct {
	Prompt   []int
	Rollouts []Rollout
	// Version is the oldest weight version any of its draws came from.
	Version int
	// Graded says the verdicts are in (a trajectory is graded as it ends;
	// replies by Player.Grade).
	Graded                 bool
	SampleTime, RewardTime time.Duration
}

// Player plays a task's group: Single or Agent (the trainer's Rollouts
// port). Play draws and, where the rollout's grading is part of its play,
// grades; Grade grades what Play left ungraded, apart, so that a step's
// replies are sampled in order (a seed draws the same completions) and
// their containers overlap.
type Player interface {
	Play(ctx context.Context, inst *task.Instance, g int, phase string, s Sampler) (*Group, error)
	Grade(ctx context.Context, inst *task.Instance, gr *Group, phase string) error
	// Together says whether a step's groups play at once (trajectories:
	// their turns decode together and their commands overlap) or one
	// after another.
	Together() bool
}
