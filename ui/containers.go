package ui

import (
	"fmt"
	"time"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/ansi"
	"github.com/swetui/swetui/event"
)

// containersPane is the reward pool's worker table, the agent
// trajectories in flight when there are any (live.go), over the log of the
// selected worker's evaluation. The log follows new lines until the operator
// scrolls up; G, end or f follow again. Scroll positions are absolute line
// numbers, so a held position stays put while new lines arrive (until the
// bounded buffer drops it).
type containersPane struct {
	frame
	st     *state
	sel    int // selected worker
	follow bool
	top    int // absolute index of the first shown line when not following
}

func newContainersPane(st *state) *containersPane { return &containersPane{st: st, follow: true} }

func (p *containersPane) Name() string { return "Containers" }

func (p *containersPane) Keys() []key.Binding {
	return []key.Binding{
		withHelp(nav.Up, "log up"), withHelp(nav.Down, "log down"),
		withHelp(nav.PageUp, "log page up"), withHelp(nav.PageDown, "log page down"),
		withHelp(nav.Top, "log start"), withHelp(nav.Bottom, "log end, follow"),
		withHelp(nav.Left, "previous worker"), withHelp(nav.Right, "next worker"),
		withHelp(nav.Follow, "follow the log on/off"),
	}
}

// log is the evaluation whose log is shown: the selected worker's current
// or last one, else the most recently written.
func (p *containersPane) log() *evalLog {
	ws := p.st.pool.Workers
	if len(ws) > 0 {
		if l := p.st.logs.get(ws[max(0, min(p.sel, len(ws)-1))].EvalID); l != nil {
			return l
		}
		if ws[max(0, min(p.sel, len(ws)-1))].EvalID != "" {
			return nil
		}
	}
	return p.st.logs.get(p.st.logs.latest)
}

// maxHostRows bounds the host lines; more hosts fold into a summary line.
const maxHostRows = 3

// layout splits the height between the host lines, the worker table, the
// agent trajectories in flight (none but in agent mode) and the log.
func (p *containersPane) layout() (hostRows, tableRows, liveRows, logRows int) {
	body := max(p.h-2, 0) // title, log title
	if p.showHosts() {
		hostRows = min(len(p.st.pool.Hosts), maxHostRows)
		if body < 12 {
			hostRows = 1 // one summary line leaves the log its room
		}
	}
	body = max(body-hostRows, 0)
	tableRows = min(len(p.st.pool.Workers)+1, max(body/3, 2))
	if n := p.st.live.len(); n > 0 {
		liveRows = min(n+1, max(body/3, 2))
	}
	return hostRows, tableRows, liveRows, max(body-tableRows-liveRows, 0)
}

// showHosts: a single healthy host says nothing the header does not.
func (p *containersPane) showHosts() bool {
	hosts := p.st.pool.Hosts
	return len(hosts) > 1 || (len(hosts) == 1 && (!hosts[0].Up || hosts[0].Err != ""))
}

// hostLines are the Docker hosts' health: each up or DOWN with its last
// error, or one summary line when there is no room.
func (p *containersPane) hostLines(rows int) []string {
	hosts := p.st.pool.Hosts
	if rows <= 0 || len(hosts) == 0 {
		return nil
	}
	if rows < len(hosts) {
		up := 0
		var firstDown string
		for _, h := range hosts {
			if h.Up {
				up++
			} else if firstDown == "" {
				firstDown = h.Endpoint
			}
		}
		line := fmt.Sprintf("  hosts %d/%d up", up, len(hosts))
		if firstDown != "" {
			line += " · down: " + clean(firstDown)
		}
		if rows == 1 {
			return []string{styleDim.Render(ansi.Truncate(line, p.w, "…"))}
		}
		return append(p.hostRows(hosts[:rows-1]), styleDim.Render(ansi.Truncate(line, p.w, "…")))
	}
	return p.hostRows(hosts)
}

func (p *containersPane) hostRows(hosts []event.HostState) []string {
	now := p.st.now()
	var out []string
	for _, h := range hosts {
		var line string
		if h.Up {
			line = fmt.Sprintf("  up   %s · %d running", h.Endpoint, h.Active)
			if h.Err != "" {
				line += fmt.Sprintf(" · back %s ago, last error: %s", short(now.Sub(h.Since)), clean(h.Err))
			}
			out = append(out, ansi.Truncate(clean(line), p.w, "…"))
			continue
		}
		line = fmt.Sprintf("  DOWN %s", h.Endpoint)
		if !h.Since.IsZero() {
			line += " · for " + short(now.Sub(h.Since))
		}
		if !h.RetryAt.IsZero() {
			line += " · retry in " + short(h.RetryAt.Sub(now))
		}
		if h.Err != "" {
			line += " · " + clean(h.Err)
		}
		out = append(out, styleWarn.Render(ansi.Truncate(clean(line), p.w, "…")))
	}
	return out
}

func (p *containersPane) Update(msg tea.KeyMsg) tea.Cmd {
	n := len(p.st.pool.Workers)
	switch {
	case key.Matches(msg, nav.Left):
		p.sel, p.follow = max(p.sel-1, 0), true
		return nil
	case key.Matches(msg, nav.Right):
		p.sel, p.follow = max(0, min(p.sel+1, n-1)), true
		return nil
	case key.Matches(msg, nav.Follow):
		p.follow = !p.follow
		if !p.follow {
			p.top = p.followTop()
		}
		return nil
	}
	l := p.log()
	if l == nil {
		return nil
	}
	_, _, _, rows := p.layout()
	first, total := l.Lines.Total()-l.Lines.Len(), l.Lines.Total()
	if p.follow {
		p.top = p.followTop()
	}
	s := scroller{top: p.top - first}
	if !s.move(msg, total-first, rows) {
		return nil
	}
	p.top = s.top + first
	// Reaching the end follows again, as a pager with +F would.
	p.follow = key.Matches(msg, nav.Bottom) || p.top >= total-rows
	return nil
}

// followTop is the absolute first line when following.
func (p *containersPane) followTop() int {
	l := p.log()
	if l == nil {
		return 0
	}
	_, _, _, rows := p.layout()
	return max(l.Lines.Total()-rows, l.Lines.Total()-l.Lines.Len())
}

func (p *containersPane) Lines() []string {
	if p.h <= 0 {
		return nil
	}
	pool := p.st.pool
	busy := 0
	for _, w := range pool.Workers {
		if w.Busy {
			busy++
		}
	}
	info := fmt.Sprintf("%d/%d busy · queue %d · done %d", busy, len(pool.Workers), pool.Queue, pool.Done)
	if pool.Sessions > 0 {
		info += fmt.Sprintf(" · %d agent session%s", pool.Sessions, map[bool]string{true: "s"}[pool.Sessions != 1])
	}
	if p.w >= 90 {
		info += fmt.Sprintf(" · p50 %s p95 %s · timeouts %d · infra %d · retries %d", short(pool.P50), short(pool.P95),
			pool.Timeouts, pool.InfraFailures, pool.Retries)
	}
	if d := p.st.dropped(); d.Logs > 0 {
		info += fmt.Sprintf(" · dropped %d log batches", d.Logs)
	}
	out := []string{titleLine(p.Name(), info, p.w, p.focused)}
	hostRows, tableRows, liveRows, logRows := p.layout()
	out = append(out, p.hostLines(hostRows)...)
	if tableRows > 0 {
		out = append(out, styleDim.Render(p.workerHeader()))
		p.sel = max(0, min(p.sel, len(pool.Workers)-1))
		first := max(0, min(p.sel-(tableRows-2), len(pool.Workers)-(tableRows-1)))
		for i := first; i < len(pool.Workers) && i < first+tableRows-1; i++ {
			line := clean(p.worker(i))
			if i == p.sel {
				line = styleSelected.Render(fitLine(">"+line[1:], p.w))
			}
			out = append(out, line)
		}
		for len(out) < 1+hostRows+tableRows {
			out = append(out, "")
		}
	}
	if liveRows > 0 {
		out = append(out, p.liveLines(liveRows)...)
		for len(out) < 1+hostRows+tableRows+liveRows {
			out = append(out, "")
		}
	}
	l := p.log()
	logInfo := "no log yet"
	if l != nil {
		mode := "following"
		if !p.follow {
			mode = fmt.Sprintf("scrolled +%d", max(l.Lines.Total()-(p.top+logRows), 0))
		}
		logInfo = fmt.Sprintf("%s · %s · %s · %d lines", mode, l.InstanceID, l.ID, l.Lines.Total())
	}
	if p.h > 1 {
		out = append(out, styleTitle.Render(fitLine(clean("·· log · "+logInfo+" "), p.w)))
	}
	if l != nil && logRows > 0 {
		first := l.Lines.Total() - l.Lines.Len()
		top := p.top
		if p.follow {
			top = p.followTop()
		}
		top = max(first, min(top, l.Lines.Total()-logRows))
		top = max(top, first)
		if !p.follow {
			p.top = top
		}
		for i := top; i < l.Lines.Total() && i < top+logRows; i++ {
			out = append(out, ansi.Truncate(clean(l.Lines.At(i-first)), p.w, "…"))
		}
	}
	return block(out, p.w, p.h)
}

func (p *containersPane) workerHeader() string {
	if p.w >= 90 {
		return fmt.Sprintf("  %-3s %-4s %-28s %-12s %7s  %s", "id", "", "task", "container", "elapsed", "status")
	}
	return fmt.Sprintf("  %-3s %-4s %-20s %6s  %s", "id", "", "task", "time", "status")
}

func (p *containersPane) worker(i int) string {
	w := p.st.pool.Workers[i]
	state := "idle"
	el := "-"
	if w.Busy {
		state = "busy"
		if !w.Since.IsZero() {
			el = short(p.st.now().Sub(w.Since))
		}
	}
	if p.w >= 90 {
		return fmt.Sprintf("  %-3d %-4s %-28s %-12s %7s  %s", w.ID, state, cut(orDash(w.InstanceID, "-"), 28),
			shortID(w.ContainerID), el, w.Status)
	}
	return fmt.Sprintf("  %-3d %-4s %-20s %6s  %s", w.ID, state, cut(orDash(w.InstanceID, "-"), 20), el, w.Status)
}

// short formats a duration for narrow columns: 950ms, 12.3s, 4m05s, 2h10m.
func short(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}

// shortID is a container id as docker ps shows it: 12 characters.
func shortID(id string) string {
	if id == "" {
		return "-"
	}
	return id[:min(len(id), 12)]
}
