package ui

import (
	"fmt"
	"strings"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/ansi"
	"github.com/swetui/swetui/event"
)

// groupPane is one step's completions as a table. It follows the newest
// step until the operator moves: to an older step (h/←), or within the table
// (j/k, pages, g/G), which holds the step shown so that the row read stays
// put, as a scrolled log does. f, or moving past the newest with l, follows
// again, keeping the selected row.
type groupPane struct {
	frame
	st     *state
	follow bool
	step   int // the step shown when not following
	sel    int // the selected row; drawn clamped to the rows there are
	scroll scroller
}

func newGroupPane(st *state) *groupPane { return &groupPane{st: st, follow: true} }

func (p *groupPane) Name() string { return "Group" }

func (p *groupPane) Keys() []key.Binding {
	return []key.Binding{
		withHelp(nav.Up, "previous completion"), withHelp(nav.Down, "next completion"),
		withHelp(nav.PageUp, "page up"), withHelp(nav.PageDown, "page down"),
		withHelp(nav.Top, "first completion"), withHelp(nav.Bottom, "last completion"),
		nav.Left, nav.Right, withHelp(nav.Follow, "follow the newest step"),
	}
}

// index is the shown group's position in the ring, -1 when there is none.
func (p *groupPane) index() int {
	g := p.st.groups
	if g.Len() == 0 {
		return -1
	}
	if p.follow {
		return g.Len() - 1
	}
	for i := g.Len() - 1; i >= 0; i-- {
		if g.At(i).Step <= p.step {
			return i
		}
	}
	return 0 // the shown step was dropped: the oldest kept
}

func (p *groupPane) current() *stepGroup {
	if i := p.index(); i >= 0 {
		return p.st.groups.At(i)
	}
	return nil
}

// Selected is the highlighted completion, nil when there is none.
func (p *groupPane) Selected() *event.CompletionScored {
	g := p.current()
	if g == nil || len(g.Rows) == 0 {
		return nil
	}
	return &g.Rows[max(0, min(p.sel, len(g.Rows)-1))]
}

func (p *groupPane) Update(msg tea.KeyMsg) tea.Cmd {
	g := p.current()
	n := 0
	if g != nil {
		n = len(g.Rows)
	}
	page := max(p.h-3, 1)
	if g != nil && p.follow && isRowMove(msg) {
		p.follow, p.step = false, g.Step
	}
	switch {
	case key.Matches(msg, nav.Up):
		p.sel--
	case key.Matches(msg, nav.Down):
		p.sel++
	case key.Matches(msg, nav.PageUp):
		p.sel -= page
	case key.Matches(msg, nav.PageDown):
		p.sel += page
	case key.Matches(msg, nav.Top):
		p.sel = 0
	case key.Matches(msg, nav.Bottom):
		p.sel = n - 1
	case key.Matches(msg, nav.Left):
		if i := p.index(); i > 0 {
			p.follow, p.step = false, p.st.groups.At(i-1).Step
		}
	case key.Matches(msg, nav.Right):
		if i := p.index(); i >= 0 && i+1 < p.st.groups.Len()-1 {
			p.step = p.st.groups.At(i + 1).Step
		} else {
			p.follow = true
		}
	case key.Matches(msg, nav.Follow):
		p.follow = true
	}
	p.sel = max(0, min(p.sel, n-1))
	return nil
}

// isRowMove is whether a key moves the selection within the table.
func isRowMove(msg tea.KeyMsg) bool {
	for _, b := range []key.Binding{nav.Up, nav.Down, nav.PageUp, nav.PageDown, nav.Top, nav.Bottom} {
		if key.Matches(msg, b) {
			return true
		}
	}
	return false
}

// wide is whether the table has room for every column.
func (p *groupPane) wide() bool { return p.w >= 96 }

func (p *groupPane) Lines() []string {
	if p.h <= 0 {
		return nil
	}
	g := p.current()
	info := "waiting for the first completions"
	switch {
	case g != nil:
		tasks := map[int]bool{}
		for _, r := range g.Rows {
			tasks[r.Group] = true
		}
		// Whether the step is held comes first: it must show when narrow.
		info = fmt.Sprintf("step %d · newest · %s · %s", g.Step, plural(len(tasks), "task"), plural(len(g.Rows), "completion"))
		if !p.follow {
			info = fmt.Sprintf("step %d · held · %s · %s · h/l steps, f newest", g.Step, plural(len(tasks), "task"),
				plural(len(g.Rows), "completion"))
		}
		info += resolvedInfo(g.Rows)
	case p.st.inSFT():
		info = "none until GRPO starts"
	}
	lines := []string{titleLine(p.Name(), info, p.w, p.focused)}
	if p.h == 1 {
		return block(lines, p.w, p.h)
	}
	if g == nil && p.st.inSFT() {
		return block(append(lines, waitingForGRPO(p.st, p.w)...), p.w, p.h)
	}
	lines = append(lines, styleDim.Render(p.header()))
	if g == nil {
		return block(lines, p.w, p.h)
	}
	rows := p.h - 2
	sel := max(0, min(p.sel, len(g.Rows)-1))
	// Keep the selection in sight.
	if sel < p.scroll.top {
		p.scroll.top = sel
	} else if sel >= p.scroll.top+rows {
		p.scroll.top = sel - rows + 1
	}
	p.scroll.clamp(len(g.Rows), rows)
	for i := p.scroll.top; i < len(g.Rows) && i < p.scroll.top+rows; i++ {
		line := clean(p.row(&g.Rows[i]))
		if i == sel {
			line = styleSelected.Render(fitLine(">"+line[1:], p.w))
		}
		lines = append(lines, line)
	}
	return block(lines, p.w, p.h)
}

func (p *groupPane) header() string {
	if p.wide() {
		return fmt.Sprintf("  %-24s %3s %7s %6s %-10s %5s %5s %4s %7s %5s  %s",
			"task", "#", "reward", "diff", "applied", "F2P", "P2P", "res", "adv", "tok", "flags")
	}
	return fmt.Sprintf("  %-5s %7s %7s %5s %s", "t.#", "reward", "adv", "tok", flagLetters)
}

// resolvedInfo is the Group title's count of resolved completions in agent
// mode, saying what it counts: the graded verdicts (the step's
// reward/resolved_rate) and, where the trainer's rule changed what an
// unfinished trajectory trained on, the ones trained as resolved.
func resolvedInfo(rows []event.CompletionScored) string {
	agent, ruled := false, false
	graded, trained := 0, 0
	for i := range rows {
		c := &rows[i]
		agent = agent || c.Agent != nil
		ruled = ruled || c.Trained != nil || c.Masked
		if c.Verdict.Resolved {
			graded++
			if c.Trained == nil && !c.Masked {
				trained++
			}
		}
	}
	switch {
	case !agent:
		return ""
	case !ruled:
		return fmt.Sprintf(" · resolved %d/%d graded", graded, len(rows))
	}
	return fmt.Sprintf(" · resolved %d/%d graded, %d trained as such", graded, len(rows), trained)
}

// rewardCell is the reward column (width w): the reward the completion
// trained on, with the graded one beside it where the trainer's rule
// replaced it (an unfinished trajectory under agent.unfinished = zero).
func rewardCell(c *event.CompletionScored, w int) string {
	if c.Trained == nil || *c.Trained == c.Verdict.Reward {
		return fmt.Sprintf("%*.3f", w, c.Verdict.Reward)
	}
	if w < 12 {
		return fmt.Sprintf("%*s", w, fmt.Sprintf("%.0f (%.1f)", *c.Trained, c.Verdict.Reward))
	}
	return fmt.Sprintf("%*s", w, fmt.Sprintf("%.3f (%.3f)", *c.Trained, c.Verdict.Reward))
}

func (p *groupPane) row(c *event.CompletionScored) string {
	b := c.Verdict
	if !p.wide() {
		return fmt.Sprintf("  %-5s %s %+7.3f %5d %s", fmt.Sprintf("%d.%d", c.Group, c.Index),
			rewardCell(c, 7), c.Advantage, c.Tokens, flags(c))
	}
	applied := "-"
	if b.Applied {
		applied = orDash(b.ApplyMethod, "yes")
	}
	var extra []string
	if c.Truncated && c.Agent == nil { // an agent's is unfinished: its end says why
		extra = append(extra, "truncated")
	}
	if b.Infra {
		extra = append(extra, "INFRA")
	}
	if b.Noop {
		extra = append(extra, "no-op")
	}
	if len(b.Hacks) > 0 {
		extra = append(extra, "hack:"+strings.Join(b.Hacks, ","))
	}
	if len(b.HacksUndone) > 0 {
		extra = append(extra, "reset:"+strings.Join(b.HacksUndone, ","))
	}
	if b.Problem() != "" && !b.Infra {
		extra = append(extra, "err")
	}
	if a := c.Agent; a != nil {
		extra = append(extra, string(a.End)+" "+plural(len(a.Turns), "turn"))
	}
	if c.Trained != nil && *c.Trained != b.Reward {
		extra = append(extra, fmt.Sprintf("trained on %.3f, graded %.3f", *c.Trained, b.Reward))
	}
	if c.Masked {
		extra = append(extra, "masked: not trained on")
	}
	if s := b.VerifierScore; s != nil {
		// First and short: the pane's width cuts the flags' end.
		score := fmt.Sprintf("v=%.2f", *s)
		if b.Gate != "" {
			score += " " + b.Gate
		}
		if b.VerifierDisagrees() {
			score = "DISAGREES " + score
		}
		extra = append([]string{score}, extra...)
	}
	return fmt.Sprintf("  %-24s %3d %s %6s %-10s %5s %5s %4s %+7.3f %5d  %s",
		cut(c.Verdict.InstanceID, 24), c.Index, rewardCell(c, 7), orDash(b.Form, "-"), cut(applied, 10),
		frac(b.F2PPassed, b.F2PTotal), frac(b.P2PPassed, b.P2PTotal), yes(b.Resolved),
		c.Advantage, c.Tokens, strings.Join(extra, " "))
}

// waitingForGRPO is what the Group pane says during the warm start, wrapped
// to w: why there is nothing yet, and when there will be.
func waitingForGRPO(st *state, w int) []string {
	text := "The warm start trains the policy on the tasks' gold patches; it samples nothing. " +
		"The completions of each GRPO step, with their rewards and patches, appear here when GRPO starts"
	if eta, ok := st.sftETA(); ok {
		text += fmt.Sprintf(", in about %s (warm start %d/%d)", clock(eta), st.sft.Step, st.sft.Steps)
	}
	text += ". Phase and auto-curriculum keys take effect then."
	return dimText(text, w)
}

// dimText is text wrapped to w, indented, dim, after a blank line.
func dimText(text string, w int) []string {
	var out []string
	for _, l := range wrap(text, max(w-4, 1)) {
		out = append(out, styleDim.Render("  "+l))
	}
	return append([]string{""}, out...)
}

// plural is "1 task", "2 tasks".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// flagLetters name the narrow table's facts: Valid diff, Applied,
// Resolved, Truncated, Infra failure, Hack, verifier Disagrees.
const flagLetters = "VARTIHD"

// flags is the narrow table's one-letter-per-fact column (flagLetters);
// '.' where a fact does not hold.
func flags(c *event.CompletionScored) string {
	f := []byte(".......")
	for i, on := range []bool{c.Verdict.SyntaxOK, c.Verdict.Applied, c.Verdict.Resolved, c.Truncated,
		c.Verdict.Infra, len(c.Verdict.Hacks) > 0, c.Verdict.VerifierDisagrees()} {
		if on {
			f[i] = flagLetters[i]
		}
	}
	return string(f)
}

func frac(a, b int) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%d/%d", a, b)
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return "-"
}

// orDash is s cleaned for drawing, or dflt when s is empty.
func orDash(s, dflt string) string {
	if s == "" {
		return dflt
	}
	return clean(s)
}

// cut cleans s for drawing and shortens it to n cells, marking the cut.
func cut(s string, n int) string {
	s = clean(s)
	if ansi.StringWidth(s) <= n {
		return s
	}
	return ansi.Truncate(s, n, "…")
}
