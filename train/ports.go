package train

import (
	"context"

	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/task"
)

// The trainer's view of the other packages: small interfaces, so the loop is
// tested with fakes and wired to the real model, reward engine and sandbox in
// package cli.

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

// Sequence is a prompt and a completion, packed from position 0; the loss
// covers the completion tokens.
type Sequence struct {
	Prompt     []int
	Completion []int
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

// Reference is the frozen reference policy of the KL term.
type Reference interface {
	Logprobs(ctx context.Context, seqs []Sequence) ([][]float64, error)
}

// Tokenizer turns text into tokens and back.
type Tokenizer interface {
	Encode(text string) []int
	Decode(tokens []int) string
}

// Scorer turns a group's completions into verdicts in a curriculum phase
// (reward.Scorer).
type Scorer interface {
	Score(ctx context.Context, inst *task.Instance, completions []string, phase string) ([]event.Verdict, error)
}

// Prompter renders the prompt text of a task.
type Prompter interface {
	Prompt(ctx context.Context, inst *task.Instance) (string, error)
}
