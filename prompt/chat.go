package prompt

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ardanlabs/jinja"

	"github.com/swetui/swetui/internal/chatml"
)

// ChatML's markers (package chatml); swetui's tokenizers keep each as one
// special token.
const (
	ImStart   = chatml.ImStart
	ImEnd     = chatml.ImEnd
	EndOfText = chatml.EndOfText
)

// ChatFormat is how a model's chat turns are written: the prompt of a
// system and a user turn, up to where the assistant's reply begins; the
// text that ends an assistant turn, which the warm start's targets end
// with; and the tokens sampling stops at, which a completion is trimmed of.
//
// The zero value is ChatML as swetui has always written it (ImStart,
// ImEnd; stops at ImEnd and EndOfText): the format of the tokenizers swetui
// trains and of the shipped warm start, whose prompts stay byte for byte
// as they were. LoadChatFormat reads a Hugging Face model folder's own
// chat template instead.
type ChatFormat struct {
	// Source names where the format comes from: "" for swetui's ChatML,
	// else the model folder.
	Source string
	tmpl   *jinja.Template // nil: ChatML
	vars   map[string]any  // the special tokens the template sees
	end    string          // "" for ChatML: ImEnd
	stops  []string        // nil for ChatML: ImEnd, EndOfText
}

// chatmlStops are the ChatML format's stop texts, the end of turn first.
var chatmlStops = []string{ImEnd, EndOfText}

// Name says which format this is, for `swetui prompt` and the logs.
func (f ChatFormat) Name() string {
	switch {
	case f.tmpl != nil:
		return "the chat_template of " + f.Source
	case f.Source != "":
		return "ChatML (" + f.Source + " has no chat_template)"
	}
	return "ChatML (swetui's default)"
}

// Templated reports whether prompts are rendered by a model's template.
func (f ChatFormat) Templated() bool { return f.tmpl != nil }

// Render writes a conversation of one system and one user turn, ending
// with the generation prompt: where the assistant's reply begins.
func (f ChatFormat) Render(system, user string) (string, error) {
	if f.tmpl == nil {
		return ImStart + "system\n" + system + ImEnd + "\n" + ImStart + "user\n" + user + ImEnd + "\n" + ImStart + "assistant\n", nil
	}
	out, err := f.render([]map[string]any{{"role": "system", "content": system}, {"role": "user", "content": user}}, true)
	if err != nil {
		return "", fmt.Errorf("chat template of %s: %w", f.Source, err)
	}
	return out, nil
}

// render runs the template as transformers' apply_chat_template does:
// messages, add_generation_prompt, tools and documents as None, and the
// tokenizer's special tokens. The jinja package applies trim_blocks and
// lstrip_blocks, as transformers' environment does.
func (f ChatFormat) render(messages []map[string]any, addGenerationPrompt bool) (string, error) {
	data := make(map[string]any, len(f.vars)+4)
	for k, v := range f.vars {
		data[k] = v
	}
	msgs := make([]any, len(messages))
	for i, m := range messages {
		msgs[i] = m
	}
	data["messages"] = msgs
	data["add_generation_prompt"] = addGenerationPrompt
	data["tools"] = nil
	data["documents"] = nil
	return f.tmpl.Render(data)
}

// RenderPrompt renders a task's prompt: SystemPrompt, then the issue and
// the files as the user's turn (UserTurn).
func (f ChatFormat) RenderPrompt(issue string, files []CodeFile) (string, error) {
	return f.Render(System, UserTurn(issue, files))
}

// EndOfTurn is the text that ends an assistant turn: what the template
// writes after the reply (ImEnd for ChatML).
func (f ChatFormat) EndOfTurn() string {
	if f.end == "" {
		return ImEnd
	}
	return f.end
}

// StopTexts are the special tokens sampling stops at, the end of turn
// first; a completion is trimmed of the one it ends with.
func (f ChatFormat) StopTexts() []string {
	if f.stops == nil {
		return append([]string(nil), chatmlStops...)
	}
	return append([]string(nil), f.stops...)
}

// GoldCompletion is the reply the SFT warm start teaches for a task: its
// gold patch in the fenced form the reward's extractor reads first, and
// the end of the turn.
func (f ChatFormat) GoldCompletion(patch string) string {
	if !strings.HasSuffix(patch, "\n") {
		patch += "\n"
	}
	return "```diff\n" + patch + "```" + f.EndOfTurn()
}

// CompletionText decodes a completion without the stop token the sampler
// stopped on: the reply is what the policy wrote before it.
func (f ChatFormat) CompletionText(tok Tokenizer, tokens []int) string {
	text := tok.Decode(tokens)
	for _, end := range f.StopTexts() {
		if strings.HasSuffix(text, end) {
			return strings.TrimSuffix(text, end)
		}
	}
	return text
}

// SpecialVocab looks special tokens up (model.Tokenizer is one).
type SpecialVocab interface {
	SpecialID(text string) (int, bool)
}

// StopTokens are the ids of the stop texts that are special tokens of v,
// the end of turn first, each once. LoadChatFormat made sure a model
// folder's all are; swetui's ChatML keeps those a tokenizer has.
func (f ChatFormat) StopTokens(v SpecialVocab) []int {
	var ids []int
	for _, s := range f.StopTexts() {
		if id, ok := v.SpecialID(s); ok && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return ids
}

// UserTurn is the user's message of a task's prompt: the issue, then each
// file as [path] and its text.
func UserTurn(issue string, files []CodeFile) string {
	var b strings.Builder
	b.WriteString(strings.TrimSpace(issue))
	for _, f := range files {
		fmt.Fprintf(&b, "\n\n[%s]\n%s", f.Path, strings.TrimRight(f.Text, "\n"))
	}
	return b.String()
}
