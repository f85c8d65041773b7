package ui

import (
	"fmt"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
)

// eventsPane is the recent events (steps, phase switches, pauses,
// checkpoints, warnings): a strip above the key bar, the whole bounded log
// when zoomed. It shows the newest lines until scrolled back.
type eventsPane struct {
	frame
	st     *state
	follow bool
	top    int // absolute index of the first line when not following
}

func newEventsPane(st *state) *eventsPane { return &eventsPane{st: st, follow: true} }

func (p *eventsPane) Name() string { return "Events" }

func (p *eventsPane) Keys() []key.Binding {
	return []key.Binding{
		withHelp(nav.Up, "older"), withHelp(nav.Down, "newer"), nav.PageUp, nav.PageDown,
		withHelp(nav.Top, "oldest"), withHelp(nav.Bottom, "newest, follow"),
	}
}

func (p *eventsPane) Update(msg tea.KeyMsg) tea.Cmd {
	ev := p.st.events
	first, rows := ev.Total()-ev.Len(), max(p.h-1, 1)
	top := p.top
	if p.follow {
		top = max(ev.Total()-rows, first)
	}
	s := scroller{top: top - first}
	if s.move(msg, ev.Len(), rows) {
		p.top = s.top + first
		p.follow = p.top >= ev.Total()-rows
	}
	return nil
}

func (p *eventsPane) Lines() []string {
	if p.h <= 0 {
		return nil
	}
	ev := p.st.events
	info := fmt.Sprintf("%d events", ev.Total())
	if d := p.st.dropped(); d.Events > 0 {
		info += fmt.Sprintf(" · %d not shown (the console fell behind)", d.Events)
	}
	if !p.follow {
		info += " · scrolled"
	}
	out := []string{titleLine(p.Name(), info, p.w, p.focused)}
	rows := p.h - 1
	first := ev.Total() - ev.Len()
	top := max(ev.Total()-rows, first)
	if !p.follow {
		top = max(first, min(p.top, ev.Total()-rows))
		p.top = top
	}
	for i := top; i < ev.Total() && len(out) < p.h; i++ {
		e := ev.At(i - first)
		line := e.Time.Format("15:04:05") + " " + levelStyle(e.Level).Render(fmt.Sprintf("%-5s", e.Level)) + " " + clean(e.Text)
		out = append(out, line)
	}
	return block(out, p.w, p.h)
}
