package prompt

import (
	"context"
	"fmt"
	"strings"

	"github.com/swetui/swetui/task"
)

// AgentSystem tells the policy how agent mode works: a command a turn, its
// output back as the next turn, a word to end with.
const AgentSystem = "You fix bugs by working in the repository, one shell command a turn. " +
	"Reply with exactly one ```bash block holding the command; its exit code and output come back as the next message. " +
	"When the fix is made, reply " + SubmitWord + " alone."

// SubmitWord ends a trajectory: its diff is graded.
const SubmitWord = "SUBMIT"

// AgentUserTurn is the first user turn of agent mode: the issue, where the
// repository is, and the files data.prompt chose for the task (their paths
// only: the agent reads what it needs), if any.
func AgentUserTurn(issue, workdir string, files []string) string {
	turn := fmt.Sprintf("%s\n\nThe repository is checked out at %s, your working directory.", strings.TrimRight(issue, "\n"), workdir)
	if len(files) > 0 {
		turn += "\nFiles to look at: " + strings.Join(files, ", ")
	}
	return turn
}

// RenderAgentPrompt is agent mode's prompt: AgentSystem, then the issue
// and the files to look at.
func (f ChatFormat) RenderAgentPrompt(issue, workdir string, files []string) (string, error) {
	return f.Render(AgentSystem, AgentUserTurn(issue, workdir, files))
}

// AgentPrompt is agent mode's prompt of inst: the issue, and the paths of
// the files this setting would show (the gold patch's with oracle, the
// best ranked with bm25), not their text.
func (p Repo) AgentPrompt(ctx context.Context, inst *task.Instance) (string, error) {
	plan, err := p.Plan(ctx, inst)
	if err != nil {
		return "", err
	}
	var files []string
	for _, f := range plan.Files {
		files = append(files, f.Path)
	}
	files = append(files, plan.NotShown...)
	return p.Chat.RenderAgentPrompt(inst.ProblemStatement, inst.WorkdirOrDefault(), files)
}

// AgentPrompt is agent mode's prompt of inst: its own text field as the
// issue, no files; without one, Fallback's.
func (p Text) AgentPrompt(ctx context.Context, inst *task.Instance) (string, error) {
	if inst.Text != "" {
		return p.Fallback.Chat.RenderAgentPrompt(inst.Text, inst.WorkdirOrDefault(), nil)
	}
	return p.Fallback.AgentPrompt(ctx, inst)
}

// ObservationTurn is the text between a sampled reply (whose tokens end
// with the end of turn, as sampling stops there) and the next one: the
// rest of the reply's turn, the observation as the next message, and the
// generation prompt. In ChatML the observation is a user turn; a model's
// own template writes it in its tool role, or as a user turn when it has
// none. Its tokens go into the trajectory as they are, never decoded and
// encoded again with the reply.
func (f ChatFormat) ObservationTurn(observation string) (string, error) {
	seg, _, err := f.observationTurn(observation)
	return seg, err
}

// observationTurn is ObservationTurn and the role it wrote the observation in.
func (f ChatFormat) observationTurn(observation string) (seg, role string, err error) {
	if f.tmpl == nil {
		return "\n" + ImStart + "user\n" + observation + ImEnd + "\n" + ImStart + "assistant\n", "user", nil
	}
	// The template's own text around a reply: render a stand-in
	// conversation with and without the observation and keep what the
	// observation adds after the reply's end of turn.
	const reply = "\x00reply\x00"
	base := []map[string]any{{"role": "system", "content": AgentSystem}, {"role": "user", "content": "task"},
		{"role": "assistant", "content": reply}}
	before, err := f.render(base, false)
	if err != nil {
		return "", "", fmt.Errorf("chat template of %s: %w", f.Source, err)
	}
	end := strings.LastIndex(before, reply+f.EndOfTurn())
	if end < 0 {
		return "", "", fmt.Errorf("chat template of %s: a reply does not end with its end of turn %q", f.Source, f.EndOfTurn())
	}
	end += len(reply + f.EndOfTurn())
	for _, role := range []string{"tool", "user"} {
		after, err := f.render(append(base, map[string]any{"role": role, "content": observation}), true)
		if err != nil || !strings.HasPrefix(after, before[:end]) || !strings.Contains(after[end:], observation) {
			continue // this template has no such role, or drops it
		}
		return after[end:], role, nil
	}
	return "", "", fmt.Errorf("chat template of %s: it writes no observation turn (tool or user role) after a reply", f.Source)
}
