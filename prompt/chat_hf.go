package prompt

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// HFVocab is what LoadChatFormat needs of a model folder's tokenizer
// (model.Tokenizer is one).
type HFVocab interface {
	SpecialVocab
	Specials() []string
	Token(id int) string
	IsSpecial(id int) bool
}

// hfTokenizerConfig is the part of tokenizer_config.json a chat format
// reads. Special tokens are a string or an AddedToken object.
type hfTokenizerConfig struct {
	ChatTemplate json.RawMessage   `json:"chat_template"`
	BOS          json.RawMessage   `json:"bos_token"`
	EOS          json.RawMessage   `json:"eos_token"`
	UNK          json.RawMessage   `json:"unk_token"`
	PAD          json.RawMessage   `json:"pad_token"`
	Additional   []json.RawMessage `json:"additional_special_tokens"`
}

// LoadChatFormat reads the chat format of a Hugging Face model folder: the
// chat_template of tokenizer_config.json (or of chat_template.jinja, which
// newer transformers save instead), rendered as transformers renders it,
// and its end tokens. v is the folder's tokenizer.
//
//   - The end of an assistant turn is what the template writes after a
//     reply: a conversation with a marker for the reply is rendered and the
//     special token that follows the marker taken; eos_token when none does.
//   - Sampling stops at the end of turn, at generation_config.json's
//     eos_token_id (one id or a list) and at eos_token: the ids
//     transformers' generate stops at, and the turn's end for a template
//     that writes another.
//   - A folder without a chat_template keeps ChatML, which needs its
//     tokenizer to hold ImStart and ImEnd as special tokens.
func LoadChatFormat(dir string, v HFVocab) (ChatFormat, error) {
	f := ChatFormat{Source: dir}
	var tc hfTokenizerConfig
	if err := readJSON(filepath.Join(dir, "tokenizer_config.json"), &tc); err != nil {
		return f, fmt.Errorf("chat format of %s: %w", dir, err)
	}
	src, err := chatTemplateOf(dir, tc.ChatTemplate)
	if err != nil {
		return f, fmt.Errorf("chat format of %s: %w", dir, err)
	}
	vars, err := specialVars(tc)
	if err != nil {
		return f, fmt.Errorf("chat format of %s: tokenizer_config.json: %w", dir, err)
	}
	eos, err := generationEOS(dir, v)
	if err != nil {
		return f, fmt.Errorf("chat format of %s: %w", dir, err)
	}
	eosToken, _ := vars["eos_token"].(string)
	if eosToken != "" {
		if _, ok := v.SpecialID(eosToken); !ok {
			return f, fmt.Errorf("chat format of %s: eos_token %q is not a special token of its tokenizer.json", dir, eosToken)
		}
		eos = append(eos, eosToken)
	}
	if src == "" {
		var missing []string
		for _, s := range []string{ImStart, ImEnd} {
			if _, ok := v.SpecialID(s); !ok {
				missing = append(missing, s)
			}
		}
		if len(missing) > 0 {
			return f, fmt.Errorf("chat format of %s: no chat_template in tokenizer_config.json, and its tokenizer.json lacks the special tokens %s that swetui's ChatML default writes",
				dir, strings.Join(missing, " and "))
		}
		f.end = ImEnd
		f.stops = []string{ImEnd}
		if _, ok := v.SpecialID(EndOfText); ok {
			f.stops = append(f.stops, EndOfText)
		}
		f.stops = appendNew(f.stops, eos...)
		return f, nil
	}
	if f.tmpl, err = compileTemplate(src); err != nil {
		return f, fmt.Errorf("chat format of %s: chat_template: %w", dir, err)
	}
	f.vars = vars
	if f.end, err = f.endOfTurn(v, eosToken); err != nil {
		return f, fmt.Errorf("chat format of %s: %w", dir, err)
	}
	f.stops = appendNew([]string{f.end}, eos...)
	return f, nil
}

// Markers stand in for a conversation's contents while the template's
// frame is measured; no template writes them itself.
const (
	systemMarker = "SWETUI-SYSTEM-7f3a"
	userMarker   = "SWETUI-USER-7f3a"
	replyMarker  = "SWETUI-REPLY-7f3a"
)

// endOfTurn renders a conversation whose reply is a marker and returns the
// special token the template writes after it (trailing newlines aside),
// else eosToken. It also checks that the template writes the user's turn
// and renders without error.
func (f ChatFormat) endOfTurn(v HFVocab, eosToken string) (string, error) {
	prompt, err := f.Render(systemMarker, userMarker)
	if err != nil {
		return "", err
	}
	if !strings.Contains(prompt, userMarker) {
		return "", fmt.Errorf("chat_template does not write the user's message: %q", prompt)
	}
	conv, err := f.render([]map[string]any{{"role": "system", "content": systemMarker}, {"role": "user", "content": userMarker},
		{"role": "assistant", "content": replyMarker}}, false)
	if err != nil {
		return "", fmt.Errorf("chat_template with a reply: %w", err)
	}
	i := strings.LastIndex(conv, replyMarker)
	if i < 0 {
		return "", fmt.Errorf("chat_template does not write the assistant's reply: %q", conv)
	}
	after := strings.TrimRight(conv[i+len(replyMarker):], "\n")
	if _, ok := v.SpecialID(after); ok {
		return after, nil
	}
	// A template that writes more after the turn (a generation prompt
	// whatever add_generation_prompt says): its first special token.
	end := ""
	for _, s := range v.Specials() {
		if len(s) > len(end) && strings.HasPrefix(after, s) {
			end = s
		}
	}
	if end != "" {
		return end, nil
	}
	if eosToken == "" {
		return "", fmt.Errorf("chat_template ends a reply with %q, not a special token, and tokenizer_config.json names no eos_token", after)
	}
	return eosToken, nil
}

// chatTemplateOf is the folder's chat template: chat_template.jinja, else
// tokenizer_config.json's chat_template (a string, or a list of named
// templates of which "default" is the chat one); "" when there is none.
func chatTemplateOf(dir string, raw json.RawMessage) (string, error) {
	if b, err := os.ReadFile(filepath.Join(dir, "chat_template.jinja")); err == nil {
		return string(b), nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var named []struct{ Name, Template string }
	if err := json.Unmarshal(raw, &named); err != nil {
		return "", fmt.Errorf("tokenizer_config.json: chat_template is neither a string nor a list of {name, template}")
	}
	var names []string
	for _, t := range named {
		if t.Name == "default" {
			return t.Template, nil
		}
		names = append(names, t.Name)
	}
	return "", fmt.Errorf("tokenizer_config.json: no chat_template named default among %s", strings.Join(names, ", "))
}

// specialVars are the special tokens transformers passes a chat template:
// those tokenizer_config.json sets.
func specialVars(tc hfTokenizerConfig) (map[string]any, error) {
	vars := map[string]any{}
	for name, raw := range map[string]json.RawMessage{"bos_token": tc.BOS, "eos_token": tc.EOS, "unk_token": tc.UNK, "pad_token": tc.PAD} {
		s, err := tokenText(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if s != "" {
			vars[name] = s
		}
	}
	var extra []any
	for _, raw := range tc.Additional {
		s, err := tokenText(raw)
		if err != nil {
			return nil, fmt.Errorf("additional_special_tokens: %w", err)
		}
		extra = append(extra, s)
	}
	if len(extra) > 0 {
		vars["additional_special_tokens"] = extra
	}
	return vars, nil
}

// tokenText reads a special token: a string, an AddedToken object
// ({"content": ...}) or null.
func tokenText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil || obj.Content == nil {
		return "", fmt.Errorf("%s is neither a string nor an object with a content", raw)
	}
	return *obj.Content, nil
}

// generationEOS are the texts of generation_config.json's eos_token_id
// (an id or a list of ids); none without the file.
func generationEOS(dir string, v HFVocab) ([]string, error) {
	var gc struct {
		EOS json.RawMessage `json:"eos_token_id"`
	}
	path := filepath.Join(dir, "generation_config.json")
	if err := readJSON(path, &gc); err != nil || len(gc.EOS) == 0 || string(gc.EOS) == "null" {
		return nil, err
	}
	var ids []int
	var one int
	if err := json.Unmarshal(gc.EOS, &one); err == nil {
		ids = []int{one}
	} else if err := json.Unmarshal(gc.EOS, &ids); err != nil {
		return nil, fmt.Errorf("generation_config.json: eos_token_id %s is neither an id nor a list of ids", gc.EOS)
	}
	var texts []string
	for _, id := range ids {
		if !v.IsSpecial(id) {
			return nil, fmt.Errorf("generation_config.json: eos_token_id %d is not a special token of its tokenizer.json", id)
		}
		texts = append(texts, v.Token(id))
	}
	return texts, nil
}

// readJSON decodes path into dst; a missing file leaves dst as it is.
func readJSON(path string, dst any) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, dst); err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	return nil
}

// appendNew appends the texts not yet in list.
func appendNew(list []string, texts ...string) []string {
	for _, s := range texts {
		if !slices.Contains(list, s) {
			list = append(list, s)
		}
	}
	return list
}
