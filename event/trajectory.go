package event

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Trajectory is an agent-mode completion turn by turn (rollout.mode =
// "agent"): what rollouts.jsonl keeps of it beside its tokens and verdict,
// and `swetui eval`'s trajectories.jsonl of each task. It is package
// agent's Trajectory without the token ids, converted where the rollout is
// made (package app), so that this package imports nothing.
type Trajectory struct {
	// End is what ended it (TrajectoryEnds).
	End End `json:"end"`
	// Detail says more of the end (the sandbox's error).
	Detail string `json:"detail,omitempty"`
	Turns  []Turn `json:"turns"`
}

// Turn is one reply and what its command did: agent.Turn's fields, so that
// app converts one into the other (a conversion that stops compiling when
// they differ).
type Turn struct {
	Reply       string        `json:"reply"`             // the reply's text
	Command     string        `json:"command,omitempty"` // "" for a submit or a reply without a command
	ExitCode    int           `json:"exit_code"`
	TimedOut    bool          `json:"timed_out,omitempty"`
	Duration    time.Duration `json:"duration_ns"`
	OutputBytes int64         `json:"output_bytes"` // every byte the command wrote, kept or not
	// Observation is what went back to the policy, as text: the exit code,
	// then the output's head and tail as the agent loop cut them.
	Observation string `json:"observation"`
	ReplyTokens int    `json:"reply_tokens"`
	ObsTokens   int    `json:"obs_tokens"`
}

// Finished reports whether the agent ended the trajectory itself.
func (t *Trajectory) Finished() bool { return t.End.Finished() }

// Text is the trajectory for reading and searching (the console's `c`,
// `swetui view`, its text= filter): a line a turn with its exit code,
// time, output size and command, the observation as the policy saw it,
// then how it ended.
func (t *Trajectory) Text() string {
	var b strings.Builder
	for i, turn := range t.Turns {
		fmt.Fprintf(&b, "── turn %d · %s\n", i+1, turn.Head(i == len(t.Turns)-1 && t.Finished()))
		if turn.Observation != "" {
			b.WriteString(strings.TrimRight(turn.Observation, "\n") + "\n")
		}
	}
	fmt.Fprintf(&b, "── %s after %d turn", t.End, len(t.Turns))
	if len(t.Turns) != 1 {
		b.WriteString("s")
	}
	if t.Detail != "" {
		fmt.Fprintf(&b, " (%s)", t.Detail)
	}
	b.WriteString("\n")
	return b.String()
}

// Head is a turn in one line: what its command did and the command's first
// line, or the reply's start when it ran nothing. submit says it is the
// submitting reply.
func (t Turn) Head(submit bool) string {
	switch {
	case t.Command != "":
		exit := fmt.Sprintf("exit %d", t.ExitCode)
		if t.TimedOut {
			exit += " (timed out)"
		}
		return fmt.Sprintf("%s · %s · %s · $ %s", exit, t.Duration.Round(time.Millisecond), bytesWord(t.OutputBytes), firstLine(t.Command))
	case submit:
		return "submit"
	}
	return "no command in the reply: " + replyHead(t.Reply)
}

// Text is c's completion for reading and searching: its text, or an agent
// trajectory's turns and then the graded diff.
func (c *CompletionScored) Text() string {
	if c.Agent == nil {
		return c.Completion
	}
	text := c.Agent.Text()
	if p := c.Verdict.Patch; strings.TrimSpace(p) != "" {
		text += "```diff\n" + strings.TrimRight(p, "\n") + "\n```\n"
	}
	return text
}

func bytesWord(n int64) string {
	if n == 1 {
		return "1 byte"
	}
	return fmt.Sprintf("%d bytes", n)
}

func firstLine(s string) string {
	line, rest, _ := strings.Cut(s, "\n")
	if rest != "" {
		line += " ..."
	}
	return line
}

// replyHead is a reply's start on one line.
func replyHead(reply string) string {
	r := strings.Join(strings.Fields(reply), " ")
	if len(r) > 120 {
		r = strings.ToValidUTF8(r[:120], "") + " ..."
	}
	return strconv.Quote(r)
}
