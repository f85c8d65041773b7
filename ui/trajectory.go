package ui

// Agent trajectories (rollout.mode = "agent") as `swetui view` shows them:
// drawn from their turns as rollouts.jsonl keeps them.

import (
	"fmt"
	"strings"
	"time"

	"github.com/swetui/swetui/event"
)

// trajectorySummary is a trajectory in one line: how it ended, what its
// commands did and its tokens.
func trajectorySummary(tr *event.Trajectory) string {
	cmds, failed, timedOut := 0, 0, 0
	var took time.Duration
	replyTok, obsTok := 0, 0
	for _, t := range tr.Turns {
		replyTok, obsTok = replyTok+t.ReplyTokens, obsTok+t.ObsTokens
		if t.Command == "" {
			continue
		}
		cmds++
		took += t.Duration
		if t.ExitCode != 0 {
			failed++
		}
		if t.TimedOut {
			timedOut++
		}
	}
	s := fmt.Sprintf("agent: %s after %s; %s (%d failed, %d timed out) in %s; tokens: replies %d, observations %d",
		tr.End, plural(len(tr.Turns), "turn"), plural(cmds, "command"), failed, timedOut, took.Round(time.Millisecond), replyTok, obsTok)
	if tr.Detail != "" {
		s += " (" + tr.Detail + ")"
	}
	return s
}

// agentLines is the completion screen's body for a trajectory: each turn
// (what its command did, then the observation as the policy saw it), how
// it ended and the graded patch; with modeRaw, each reply in full.
func agentLines(c *event.CompletionScored, mode diffMode, w int) []string {
	tr := c.Agent
	var out []string
	if mode == modeRaw {
		for i, t := range tr.Turns {
			out = append(out, styleTitle.Render(cut(fmt.Sprintf("── reply %d · %s", i+1, plural(t.ReplyTokens, "token")), w)))
			out = append(out, wrap(t.Reply, w)...)
		}
		if len(tr.Turns) == 0 {
			out = append(out, "(no reply: "+clean(string(tr.End))+")")
		}
		return out
	}
	for i, t := range tr.Turns {
		out = append(out, styleTitle.Render(cut(fmt.Sprintf("── turn %d · %s", i+1, t.Head(i == len(tr.Turns)-1 && tr.Finished())), w)))
		if t.Observation != "" {
			out = append(out, wrap(t.Observation, w)...)
		}
	}
	end := fmt.Sprintf("── %s after %s", tr.End, plural(len(tr.Turns), "turn"))
	if tr.Detail != "" {
		end += " (" + tr.Detail + ")"
	}
	out = append(out, styleTitle.Render(cut(end, w)))
	if strings.TrimSpace(c.Verdict.Patch) == "" {
		return append(out, "(no diff: the work tree did not change, or its diff could not be taken)")
	}
	for _, l := range strings.Split(strings.TrimRight(c.Verdict.Patch, "\n"), "\n") {
		out = append(out, colourDiff(clean(l)))
	}
	return out
}
