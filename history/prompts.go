package history

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"path/filepath"
)

// PromptsFile holds each distinct prompt of a run once (the trainer writes
// it); a rollouts line names its prompt by PromptHash.
const PromptsFile = "prompts.jsonl"

// PromptLine is one line of PromptsFile.
type PromptLine struct {
	Hash       string `json:"hash"`
	InstanceID string `json:"instance_id"`
	Prompt     string `json:"prompt"` // exactly what the policy saw: the decoded prompt tokens
}

// PromptHash names a prompt's text: 16 hex digits of its SHA-256.
func PromptHash(text string) string {
	h := sha256.Sum256([]byte(text))
	return hex.EncodeToString(h[:8])
}

// Prompts reads a run's prompts by hash; a missing file is none.
func Prompts(dir string) (map[string]string, error) {
	out := map[string]string{}
	err := eachLine(filepath.Join(dir, PromptsFile), func(line []byte) {
		var p PromptLine
		if json.Unmarshal(line, &p) == nil && p.Hash != "" {
			out[p.Hash] = p.Prompt
		}
	})
	return out, err
}
