package ui

import (
	"fmt"
	"strings"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/swetui/swetui/event"
)

// groupPane is one step's completions as a table. It follows the newest
// step until the operator moves to an older one (h/←), and comes back with
// f or by moving past the newest.
type groupPane struct {
	frame
	st     *state
	follow bool
	step   int // the step shown when not following
	sel    int
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

// wide is whether the table has room for every column.
func (p *groupPane) wide() bool { return p.w >= 96 }

func (p *groupPane) Lines() []string {
	if p.h <= 0 {
		return nil
	}
	g := p.current()
	info := "waiting for the first completions"
	if g != nil {
		tasks := map[int]bool{}
		for _, r := range g.Rows {
			tasks[r.Group] = true
		}
		where := "newest"
		if !p.follow {
			where = "h/l: steps, f: newest"
		}
		info = fmt.Sprintf("step %d · %d tasks · %d completions · %s", g.Step, len(tasks), len(g.Rows), where)
	}
	lines := []string{titleLine(p.Name(), info, p.w, p.focused)}
	if p.h == 1 {
		return block(lines, p.w, p.h)
	}
	lines = append(lines, styleDim.Render(p.header()))
	if g == nil {
		return block(lines, p.w, p.h)
	}
	rows := p.h - 2
	p.sel = max(0, min(p.sel, len(g.Rows)-1))
	// Keep the selection in sight.
	if p.sel < p.scroll.top {
		p.scroll.top = p.sel
	} else if p.sel >= p.scroll.top+rows {
		p.scroll.top = p.sel - rows + 1
	}
	p.scroll.clamp(len(g.Rows), rows)
	for i := p.scroll.top; i < len(g.Rows) && i < p.scroll.top+rows; i++ {
		line := p.row(&g.Rows[i])
		if i == p.sel {
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
	return fmt.Sprintf("  %-5s %7s %7s %5s %s", "t.#", "reward", "adv", "tok", "VARTIH")
}

func (p *groupPane) row(c *event.CompletionScored) string {
	b := c.Verdict
	if !p.wide() {
		return fmt.Sprintf("  %-5s %7.3f %+7.3f %5d %s", fmt.Sprintf("%d.%d", c.Group, c.Index),
			b.Reward, c.Advantage, c.Tokens, flags(c))
	}
	applied := "-"
	if b.Applied {
		applied = orDash(b.ApplyMethod, "yes")
	}
	var extra []string
	if c.Truncated {
		extra = append(extra, "truncated")
	}
	if b.Infra {
		extra = append(extra, "INFRA")
	}
	if len(b.Hacks) > 0 {
		extra = append(extra, "hack:"+strings.Join(b.Hacks, ","))
	}
	if b.Problem() != "" && !b.Infra {
		extra = append(extra, "err")
	}
	return fmt.Sprintf("  %-24s %3d %7.3f %6s %-10s %5s %5s %4s %+7.3f %5d  %s",
		cut(c.Verdict.InstanceID, 24), c.Index, b.Reward, orDash(b.Form, "-"), cut(applied, 10),
		frac(b.F2PPassed, b.F2PTotal), frac(b.P2PPassed, b.P2PTotal), yes(b.Resolved),
		c.Advantage, c.Tokens, strings.Join(extra, " "))
}

// flags is the narrow table's one-letter-per-fact column: Valid diff,
// Applied, Resolved, Truncated, Infra failure, Hack; '.' when not.
func flags(c *event.CompletionScored) string {
	f := []byte("......")
	for i, on := range []bool{c.Verdict.SyntaxOK, c.Verdict.Applied, c.Verdict.Resolved, c.Truncated,
		c.Verdict.Infra, len(c.Verdict.Hacks) > 0} {
		if on {
			f[i] = "VARTIH"[i]
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

func orDash(s, dflt string) string {
	if s == "" {
		return dflt
	}
	return s
}

// cut shortens s to n cells, marking the cut.
func cut(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
