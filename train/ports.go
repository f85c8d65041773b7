package train

import (
	"context"

	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/rollout"
	"github.com/swetui/swetui/task"
)

// The trainer's view of the other packages: small interfaces, so the loop is
// tested with fakes and wired to the real model, reward engine and sandbox in
// package app.

// SampleOptions controls one group's sampling (rollout's).
type SampleOptions = rollout.SampleOptions

// Sample is one sampled completion (rollout's): its tokens, the behaviour
// policy's logprob of each, and whether max_new_tokens cut it.
type Sample = rollout.Sample

// Sequence is a prompt and a completion, packed from position 0; the loss
// covers the completion tokens.
type Sequence struct {
	Prompt     []int
	Completion []int
	// Mask, when set, says which completion tokens are loss tokens (an
	// agent's replies, not its observations); the policy computes every
	// token and the losses weigh only these.
	Mask []bool
}

// lossToken reports whether completion token t of s is a loss token.
func (s Sequence) lossToken(t int) bool { return s.Mask == nil || s.Mask[t] }

// lossTokens counts s's loss tokens.
func (s Sequence) lossTokens() int {
	if s.Mask == nil {
		return len(s.Completion)
	}
	n := 0
	for _, on := range s.Mask {
		if on {
			n++
		}
	}
	return n
}

// Policy is the trainable model.
type Policy interface {
	// Sample draws n completions of prompt.
	Sample(ctx context.Context, prompt []int, n int, opts SampleOptions) ([]Sample, error)
	// Logprobs returns each completion token's logprob under the current
	// weights, forward only.
	Logprobs(ctx context.Context, seqs []Sequence) ([][]float64, error)
	// Backward accumulates the gradient of Σ cotangent·logprob into the
	// weights' gradients and returns the logprobs it computed on the way and
	// the mean token entropy.
	Backward(ctx context.Context, seqs []Sequence, cotangent [][]float64) (logp [][]float64, entropy float64, err error)
	// Step applies and clears the accumulated gradients (AdamW, clipping,
	// schedule) and returns the pre-clip gradient norm and the learning rate.
	Step() (gradNorm, lr float64)
	// Version counts the updates applied so far.
	Version() int
}

// GPUReporter is a Policy on several GPUs: after each step the trainer
// publishes their shares (event.GPUs). It must not wait on a device.
type GPUReporter interface {
	GPUShares() []event.GPUShare
}

// SnapshotSampler is a Policy that can sample from a copy of its weights
// taken at the end of the last Step, so that sampling may run while Backward
// and Step do: the async loop then generates during training instead of
// waiting for it.
type SnapshotSampler interface {
	Policy
	// StartSnapshots takes the first copy; call it while no update runs.
	StartSnapshots()
	// SampleSnapshot draws like Sample, from the newest copy, and returns
	// the version of the weights it sampled from.
	SampleSnapshot(ctx context.Context, prompt []int, n int, opts SampleOptions) ([]Sample, int, error)
}

// TurnPolicy is a Policy that keeps an agent's trajectory's keys and values
// from one turn to the next: SampleTurn draws one reply to context (Sample
// with n = 1) and computes only what context adds to a trajectory it
// sampled before (the last turn's context and reply). Agent mode uses it
// where the policy has it.
type TurnPolicy interface {
	SampleTurn(ctx context.Context, context []int, opts SampleOptions) (Sample, error)
	// SampleTurnSnapshot draws from the newest snapshot, as SampleSnapshot,
	// and says which version drew it.
	SampleTurnSnapshot(ctx context.Context, context []int, opts SampleOptions) (Sample, int, error)
}

// Reference is the frozen reference policy of the KL term.
type Reference interface {
	Logprobs(ctx context.Context, seqs []Sequence) ([][]float64, error)
}

// Scorer turns a group's completions into verdicts in a curriculum phase
// (reward.Scorer).
type Scorer interface {
	Score(ctx context.Context, inst *task.Instance, completions []string, phase string) ([]event.Verdict, error)
}

// Rollouts plays a task's group: single-shot replies or agent
// trajectories (package rollout's peers, Single and Agent, which app picks
// once from rollout.mode). Nil in Deps: Single over Deps' Prompter and
// Scorer.
type Rollouts interface {
	// Play draws the group's g rollouts with the trainer's Sampler and,
	// where grading is part of play (a trajectory), grades them.
	Play(ctx context.Context, inst *task.Instance, g int, phase string, s rollout.Sampler) (*rollout.Group, error)
	// Grade grades what Play left ungraded (replies: apart, so that a
	// step's containers overlap).
	Grade(ctx context.Context, inst *task.Instance, gr *rollout.Group, phase string) error
	// Together says whether a step's groups play at once.
	Together() bool
}
