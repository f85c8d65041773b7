package ui

import (
	"fmt"
	"strings"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/ansi"
	"github.com/swetui/swetui/event"
)

// diffMode is what the diff pane shows of the selected completion.
type diffMode int

const (
	modeDiff  diffMode = iota // the extracted patch, coloured
	modeRaw                   // the completion as sampled
	modeIssue                 // the task's issue text
)

var modeNames = [...]string{"patch", "raw completion", "issue"}

// diffPane shows the selected completion's patch (or its raw text, or the
// task's issue), scrollable. Lines are split once per selection and mode and
// styled only when drawn, so a long patch costs its visible lines per frame.
type diffPane struct {
	frame
	st     *state
	mode   diffMode
	cur    *event.CompletionScored
	id     diffKey // what lines hold
	lines  []string
	scroll scroller
}

func (p *diffPane) Name() string { return "Diff" }

func (p *diffPane) Keys() []key.Binding {
	return []key.Binding{
		withHelp(nav.Up, "scroll up"), withHelp(nav.Down, "scroll down"),
		nav.PageUp, nav.PageDown, nav.Top, nav.Bottom,
	}
}

// SetCompletion shows c (nil: nothing selected).
func (p *diffPane) SetCompletion(c *event.CompletionScored) {
	p.cur = c
	p.refresh()
}

// toggle switches to mode m, or back to the patch if m is shown.
func (p *diffPane) toggle(m diffMode) {
	if p.mode == m {
		m = modeDiff
	}
	p.mode = m
	p.scroll.top = 0
	p.refresh()
}

func (p *diffPane) SetSize(w, h int) {
	p.frame.SetSize(w, h)
	p.refresh() // wrapped text depends on the width
}

// diffKey identifies what the pane's lines were built from.
type diffKey struct {
	ok                 bool
	step, group, index int
	instance           string
	mode               diffMode
	width              int // wrapped modes only
	diffLen, textLen   int // a rescored or replaced completion rebuilds
	agent              *event.Trajectory
}

func (p *diffPane) key() diffKey {
	c := p.cur
	if c == nil {
		return diffKey{}
	}
	k := diffKey{ok: true, step: c.Step, group: c.Group, index: c.Index, instance: c.Verdict.InstanceID, mode: p.mode,
		diffLen: len(c.Verdict.Patch), textLen: len(c.Completion) + len(c.IssueText), agent: c.Agent}
	if p.mode != modeDiff {
		k.width = p.w
	}
	return k
}

func (p *diffPane) refresh() {
	id := p.key()
	if id == p.id {
		return
	}
	// The same completion in the same mode keeps its scroll position.
	if id.step != p.id.step || id.group != p.id.group || id.index != p.id.index ||
		id.instance != p.id.instance || id.mode != p.id.mode {
		p.scroll.top = 0
	}
	p.id = id
	p.lines = nil
	c := p.cur
	if c == nil {
		return
	}
	switch p.mode {
	case modeDiff:
		if strings.TrimSpace(c.Verdict.Patch) == "" {
			p.lines = []string{"(no diff extracted: c shows the raw completion)"}
			return
		}
		p.lines = strings.Split(strings.TrimRight(c.Verdict.Patch, "\n"), "\n")
	case modeRaw:
		p.lines = wrap(c.Text(), p.w) // an agent's: its turns, drawn from them
	case modeIssue:
		if c.IssueText == "" {
			p.lines = []string{"(the trainer sent no issue text for " + clean(c.Verdict.InstanceID) + ")"}
			return
		}
		p.lines = wrap(c.IssueText, p.w)
	}
}

func wrap(text string, w int) []string {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	for i, l := range lines {
		lines[i] = clean(l)
	}
	if w <= 0 {
		return lines
	}
	return strings.Split(ansi.Wrap(strings.Join(lines, "\n"), w, " "), "\n")
}

func (p *diffPane) Update(msg tea.KeyMsg) tea.Cmd {
	p.scroll.move(msg, len(p.lines), p.h-1)
	return nil
}

func (p *diffPane) Lines() []string {
	if p.h <= 0 {
		return nil
	}
	info := "select a completion in Group"
	if p.cur == nil && p.st.inSFT() {
		out := []string{titleLine(p.Name(), "none until GRPO starts", p.w, p.focused)}
		out = append(out, dimText("The selected completion's patch, raw text (c) and issue (i) appear here once GRPO samples.", p.w)...)
		return block(out, p.w, p.h)
	}
	if c := p.cur; c != nil {
		mode := modeNames[p.mode]
		if c.Agent != nil && p.mode == modeRaw {
			mode = fmt.Sprintf("%s after %s", c.Agent.End, plural(len(c.Agent.Turns), "turn"))
		}
		info = fmt.Sprintf("%s %d.%d · %s · reward %.3f", cut(c.Verdict.InstanceID, 40), c.Group, c.Index, mode, c.Verdict.Reward)
		if n := len(p.lines); n > p.h-1 {
			info += fmt.Sprintf(" · %d-%d/%d", p.scroll.top+1, min(p.scroll.top+p.h-1, n), n)
		}
	}
	out := []string{titleLine(p.Name(), info, p.w, p.focused)}
	p.scroll.clamp(len(p.lines), p.h-1)
	for i := p.scroll.top; i < len(p.lines) && len(out) < p.h; i++ {
		line := ansi.Truncate(clean(p.lines[i]), p.w, "…")
		if p.mode == modeDiff {
			line = colourDiff(line)
		}
		out = append(out, line)
	}
	return block(out, p.w, p.h)
}

// colourDiff styles one unified-diff line by its prefix.
func colourDiff(line string) string {
	switch {
	case strings.HasPrefix(line, "+++ "), strings.HasPrefix(line, "--- "),
		strings.HasPrefix(line, "diff "), strings.HasPrefix(line, "index "),
		strings.HasPrefix(line, "new file"), strings.HasPrefix(line, "deleted file"):
		return styleFileHdr.Render(line)
	case strings.HasPrefix(line, "@@"):
		return styleHunk.Render(line)
	case strings.HasPrefix(line, "+"):
		return styleAdd.Render(line)
	case strings.HasPrefix(line, "-"):
		return styleDel.Render(line)
	}
	return line
}
