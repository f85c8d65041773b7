package ui

// The agent trajectories in flight (rollout.mode = "agent"), from their
// TurnPlayed events, as the Containers pane shows them beneath its workers.

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/swetui/swetui/event"
)

// keptLive bounds the trajectories followed at once: a step's groups of G
// each rarely hold more than the pane can show.
const keptLive = 16

// liveTrajectory is one trajectory's newest turn, or its end.
type liveTrajectory struct {
	event.TurnPlayed
	touched int // liveSet's clock at its newest event
	step    int // liveSet's steps at its newest event
}

// liveSet is the trajectories in flight by session, in the order first
// seen. An ended one keeps its row, saying how it ended, until the next
// step starts (stepStarted): its diff is graded meanwhile, and the step's
// rows read together until then. One still playing keeps its row while it
// plays (an async group; a serve session, whose server starts a step at
// every other session's submit); one that played nothing in a whole step
// goes, so a trajectory whose end the console missed (a console that is
// behind loses turns) does not stay.
type liveSet struct {
	rows  []liveTrajectory
	clock int
	steps int
}

// played applies a turn or an end.
func (l *liveSet) played(t event.TurnPlayed) {
	t = t.Bounded() // whoever publishes, the console holds little of a turn
	l.clock++
	for i := range l.rows {
		if l.rows[i].Session == t.Session {
			l.rows[i] = liveTrajectory{t, l.clock, l.steps}
			return
		}
	}
	if len(l.rows) >= keptLive {
		v := l.victim()
		l.rows = slices.Delete(l.rows, v, v+1)
	}
	l.rows = append(l.rows, liveTrajectory{t, l.clock, l.steps})
}

// victim is the row that gives way to a new trajectory: the ended one seen
// least recently, else the one that played least recently.
func (l *liveSet) victim() int {
	v := 0
	for i, r := range l.rows {
		w := l.rows[v]
		if (r.End != "") != (w.End != "") {
			if r.End != "" {
				v = i
			}
			continue
		}
		if r.touched < w.touched {
			v = i
		}
	}
	return v
}

// stepStarted drops the ended rows and those that played nothing in the
// step that ends.
func (l *liveSet) stepStarted() {
	l.rows = slices.DeleteFunc(l.rows, func(r liveTrajectory) bool { return r.End != "" || r.step < l.steps })
	l.steps++
}

func (l *liveSet) clear() {
	clear(l.rows)
	l.rows = l.rows[:0]
}

func (l *liveSet) len() int { return len(l.rows) }

// shown is the rows in the order drawn: those still playing in the order
// first seen (a row stays put while it plays), then the ended ones, the
// newest end first.
func (l *liveSet) shown() (rows []liveTrajectory, playing int) {
	var ended []liveTrajectory
	for _, r := range l.rows {
		if r.End == "" {
			rows = append(rows, r)
		} else {
			ended = append(ended, r)
		}
	}
	slices.SortFunc(ended, func(a, b liveTrajectory) int { return b.touched - a.touched })
	return append(rows, ended...), len(rows)
}

// liveLines are the pane's trajectories in flight in n lines: a title
// with their count, then a row each, as many as fit.
func (p *containersPane) liveLines(n int) []string {
	if n <= 0 {
		return nil
	}
	rows, playing := p.st.live.shown()
	info := fmt.Sprintf("%d playing", playing)
	if ended := len(rows) - playing; ended > 0 {
		info += fmt.Sprintf(" · %d ended", ended)
	}
	out := []string{styleTitle.Render(fitLine(clean("·· agent trajectories · "+info+" "), p.w))}
	for _, r := range rows[:min(len(rows), n-1)] {
		line := clean(p.liveRow(r.TurnPlayed))
		if r.End != "" {
			line = styleDim.Render(fitLine(line, p.w))
		}
		out = append(out, line)
	}
	return out
}

// liveRow is one trajectory: its task and turn, what the turn's command
// did and its output's head (a reply without a command: the reply's head),
// or how the trajectory ended. Narrow, the turn
// and exit code alone lead the command (the pane's other rows name the
// tasks); the session's id is left out (a group's trajectories keep their
// order).
func (p *containersPane) liveRow(t event.TurnPlayed) string {
	exit, took := "", ""
	var rest string
	switch {
	case t.End != "":
		rest = "end: " + string(t.End)
		if t.DiffBytes > 0 {
			rest += " · diff " + plural(t.DiffBytes, "byte")
		} else {
			rest += " · no diff"
		}
		if t.Detail != "" {
			rest += " · " + t.Detail
		}
	case t.Submitted:
		rest = "submit"
	case t.Command != "":
		exit, took = fmt.Sprintf("exit %d", t.ExitCode), short(t.Duration)
		if t.TimedOut {
			exit = "timed out"
		}
		rest = "$ " + t.Command
		if out := outputHead(t.Output); out != "" {
			rest += " · " + out
		}
	default: // what the policy wrote instead, or else what it was told
		rest = "no command · " + cmp.Or(outputHead(t.Reply), outputHead(t.Output))
	}
	turn := fmt.Sprintf("t%d", t.Turn)
	if p.w >= 60 {
		return fmt.Sprintf("  %-20s %-4s %-9s %6s  %s", cut(orDash(t.InstanceID, "-"), 20), turn, exit, took, rest)
	}
	exit = strings.TrimPrefix(exit, "exit ")
	if t.TimedOut {
		exit = "t/o"
	}
	return fmt.Sprintf("  %-3s %3s %s", turn, exit, rest)
}

// outputHead is an output's head on one line: its lines trimmed, blank
// ones left out, joined by ↵.
func outputHead(s string) string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "↵")
}
