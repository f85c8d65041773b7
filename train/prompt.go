package train

import (
	"context"
	"fmt"
	"os/exec"
	"strings"

	"github.com/swetui/swetui/task"
)

// Chat-template markers (ChatML, as Qwen2 uses); the tokenizer maps each to
// one special token.
const (
	ImStart   = "<|im_start|>"
	ImEnd     = "<|im_end|>"
	EndOfText = "<|endoftext|>"
)

// SystemPrompt tells the policy what to write.
const SystemPrompt = "You fix bugs. Reply with a unified diff in a ```diff block."

// RepoPrompter renders a task's prompt from its issue text and the files the
// gold patch touches, read at base_commit from the task's repository on the
// host ("oracle" retrieval, as SWE-bench's oracle setting). Files are cut to
// MaxContextBytes in total, marked with TruncationMarker, so the prompt fits
// the model's context. This is the one place prompts are defined:
//
//	<|im_start|>system
//	You fix bugs. Reply with a unified diff in a ```diff block.<|im_end|>
//	<|im_start|>user
//	<issue text>
//
//	[path/of/file.py]
//	<file at base_commit><|im_end|>
//	<|im_start|>assistant
//
// and the SFT target (GoldCompletion) is the gold patch in a ```diff fence
// closed by <|im_end|>.
type RepoPrompter struct {
	// RepoDir returns the host path of the instance's git repository.
	RepoDir         func(ctx context.Context, inst *task.Instance) (string, error)
	MaxContextBytes int
}

// Prompt implements Prompter.
func (p RepoPrompter) Prompt(ctx context.Context, inst *task.Instance) (string, error) {
	files, err := p.Files(ctx, inst)
	if err != nil {
		return "", err
	}
	return RenderPrompt(inst.ProblemStatement, files), nil
}

// Files returns the code the prompt shows for inst: the files the gold patch
// touches at base_commit, cut to MaxContextBytes in total.
func (p RepoPrompter) Files(ctx context.Context, inst *task.Instance) ([]CodeFile, error) {
	if p.RepoDir == nil {
		return nil, nil
	}
	dir, err := p.RepoDir(ctx, inst)
	if err != nil {
		return nil, fmt.Errorf("prompt %s: %w", inst.InstanceID, err)
	}
	var files []CodeFile
	budget := p.MaxContextBytes
	for _, c := range task.PatchFiles(inst.Patch) {
		path := c.Old
		if path == "" {
			continue // a file the gold patch creates has no base version
		}
		out, err := exec.CommandContext(ctx, "git", "-C", dir, "show", inst.BaseCommit+":"+path).Output()
		if err != nil {
			continue // not at base_commit: nothing to show
		}
		text := string(out)
		if p.MaxContextBytes > 0 && len(text) > budget {
			text = text[:max(budget, 0)] + TruncationMarker
		}
		budget -= len(text)
		files = append(files, CodeFile{Path: path, Text: text})
		if p.MaxContextBytes > 0 && budget <= 0 {
			break
		}
	}
	return files, nil
}

// TruncationMarker ends a file cut to fit the context, so neither the policy
// nor a person reading rollouts mistakes it for the file's end.
const TruncationMarker = "\n... [truncated to fit the context]"

// CodeFile is one file shown to the policy.
type CodeFile struct {
	Path, Text string
}

// RenderPrompt builds the chat-formatted prompt, ending where the assistant's
// reply begins.
func RenderPrompt(issue string, files []CodeFile) string {
	var b strings.Builder
	b.WriteString(ImStart + "system\n" + SystemPrompt + ImEnd + "\n")
	b.WriteString(ImStart + "user\n")
	b.WriteString(strings.TrimSpace(issue))
	for _, f := range files {
		fmt.Fprintf(&b, "\n\n[%s]\n%s", f.Path, strings.TrimRight(f.Text, "\n"))
	}
	b.WriteString(ImEnd + "\n" + ImStart + "assistant\n")
	return b.String()
}

// GoldCompletion is the reply the SFT warm start teaches for a task: its gold
// patch in the fenced form the reward's extractor reads first.
func GoldCompletion(patch string) string {
	if !strings.HasSuffix(patch, "\n") {
		patch += "\n"
	}
	return "```diff\n" + patch + "```" + ImEnd
}

// FitPrompt keeps the end of prompt (the chat turn the reply follows) when
// it would not leave reserve tokens free in a context of contextLen.
func FitPrompt(prompt []int, contextLen, reserve int) []int {
	if room := contextLen - reserve; len(prompt) > room {
		return prompt[len(prompt)-max(room, 0):]
	}
	return prompt
}

// PromptTokens renders inst's prompt and encodes it to fit a context of
// contextLen with maxNew tokens left for the reply: what GRPO and eval
// sample from.
func PromptTokens(ctx context.Context, p Prompter, tok Tokenizer, inst *task.Instance, contextLen, maxNew int) ([]int, error) {
	text, err := p.Prompt(ctx, inst)
	if err != nil {
		return nil, fmt.Errorf("prompt %s: %w", inst.InstanceID, err)
	}
	return FitPrompt(tok.Encode(text), contextLen, maxNew), nil
}
