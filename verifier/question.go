package verifier

import (
	"strings"

	"github.com/swetui/swetui/prompt"
)

// The verifier's fixed question and its two answers.
const (
	System = "You review patches to Python repositories."
	Yes    = "YES"
	No     = "NO"
)

// Question is the prompt the verifier answers: the issue, the candidate
// (a trajectory's summary, then the diff) and the question, in chat.
func Question(chat prompt.ChatFormat, issue string, e Example) (string, error) {
	var b strings.Builder
	b.WriteString("Issue:\n")
	b.WriteString(strings.TrimSpace(issue))
	if e.Summary != "" {
		b.WriteString("\n\nWhat the agent did:\n")
		b.WriteString(e.Summary)
	}
	b.WriteString("\n\nCandidate patch:\n")
	if e.Patch == "" {
		b.WriteString("(empty)\n")
	} else {
		b.WriteString(e.Patch)
	}
	b.WriteString("\nDoes this patch resolve the issue, so that the failing tests pass and no passing test breaks? Answer " + Yes + " or " + No + ".")
	return chat.Render(System, b.String())
}

// Answer is the reply the verifier learns for a label.
func Answer(resolved bool) string {
	if resolved {
		return Yes
	}
	return No
}
