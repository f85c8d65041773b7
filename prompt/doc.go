// Package prompt owns what the policy reads: a task's prompt (the issue and
// the code at base_commit, chosen by the oracle, BM25 or the instance's own
// text, fitted to a token budget by whole functions and classes), the chat
// format it is written in (swetui's ChatML, or a Hugging Face model's own
// Jinja chat template with its end of turn and stop tokens), and the SFT
// target of a gold patch in that format.
//
// It knows nothing of the trainer: train, the warm start, eval and
// `swetui prompt` all call it, so a prompt is defined in one place.
//
// In files: prompt.go (Repo and Text, the budget and its plan), chunks.go
// (a long file's most relevant functions and classes), bm25.go (the
// ranking), repo.go (reading a commit's files with git), chat.go and
// chat_hf.go (the formats), jinja.go (Jinja2's whitespace rules over
// ardanlabs/jinja).
package prompt

import (
	"context"

	"github.com/swetui/swetui/task"
)

// Prompter renders the prompt text of a task.
type Prompter interface {
	Prompt(ctx context.Context, inst *task.Instance) (string, error)
}

// AgentPrompter is a Prompter that renders agent mode's prompt of a task
// (Repo and Text): the issue and the paths of the files data.prompt chose.
type AgentPrompter interface {
	AgentPrompt(ctx context.Context, inst *task.Instance) (string, error)
}

// AgentPromptOf is agent mode's prompt of inst: p's when it renders one,
// else the issue alone in chat.
func AgentPromptOf(ctx context.Context, p Prompter, chat ChatFormat, inst *task.Instance) (string, error) {
	if ap, ok := p.(AgentPrompter); ok {
		return ap.AgentPrompt(ctx, inst)
	}
	return chat.RenderAgentPrompt(inst.ProblemStatement, inst.WorkdirOrDefault(), nil)
}

// Tokenizer turns text into tokens and back.
type Tokenizer interface {
	Encode(text string) []int
	Decode(tokens []int) string
}

// FileLister is a Prompter that can say which files a prompt shows: its
// Prompt(inst) is Chat.RenderPrompt(inst.ProblemStatement, Files(inst)).
// The warm start reads the files once, for the prompt and its synthetic
// fixes.
type FileLister interface {
	Files(ctx context.Context, inst *task.Instance) ([]CodeFile, error)
}
