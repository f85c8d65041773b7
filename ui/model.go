package ui

import (
	"fmt"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/ansi"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
)

// Model is the console's root tea.Model. It owns the state the events build,
// lays the panes out and routes keys: global keys first, then the focused
// pane's. Update never blocks: controls are the trainer's non-blocking
// methods, and events come in batches from the pump.
type Model struct {
	ctrl Controller
	opts Options
	st   *state
	pump *pump

	hdr        *header
	rewards    *rewardsPane
	group      *groupPane
	diff       *diffPane
	containers *containersPane
	gpus       *gpusPane // above containers on a run on several GPUs
	events     *eventsPane
	panes      []pane

	width, height int
	focus         int
	zoomed        bool
	help          bool
	confirm       bool // asking whether to quit while a step is in flight
	stopCalled    bool
	quitting      bool
	// history is `swetui view` over this run's folder, opened with v: the
	// trainer's events keep arriving underneath; q or esc returns.
	history *Viewer
}

// tickMsg redraws the clocks (elapsed, ETA, worker times) once a second.
type tickMsg time.Time

func tick() tea.Cmd {
	return tea.Tick(time.Second, func(t time.Time) tea.Msg { return tickMsg(t) })
}

// Init starts the event pump and the clock.
func (m *Model) Init() tea.Cmd { return tea.Batch(m.pump.next(), tick()) }

// Update applies one message. See Run for what quitting does.
func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case eventsMsg:
		return m, m.onEvents(msg)
	case tickMsg:
		return m, tick()
	case tea.WindowSizeMsg:
		m.resize(msg.Width, msg.Height)
		if m.history != nil {
			m.history.w, m.history.h = msg.Width, msg.Height
		}
	case viewTick:
		if m.history != nil {
			_, cmd := m.history.Update(msg)
			return m, cmd
		}
	case tea.KeyMsg:
		if m.history != nil {
			return m, m.historyKey(msg)
		}
		return m, m.keys(msg)
	}
	return m, nil
}

// openHistory shows the run's whole history (the viewer) over the console.
func (m *Model) openHistory() tea.Cmd {
	dir := m.st.info.OutDir
	if dir == "" {
		m.st.logf(event.Warn, "history: the run has not said its folder yet")
		return nil
	}
	v, err := NewViewer(ViewOptions{Dir: dir, Decode: m.opts.Decode})
	if err != nil {
		m.st.logf(event.Warn, "history: %v", err)
		return nil
	}
	v.w, v.h, v.inConsole = m.width, m.height, true
	m.history = v
	return v.Init()
}

// historyKey routes a key to the viewer; its quit (or esc on its list)
// returns to the console, and ctrl+c is the console's own.
func (m *Model) historyKey(msg tea.KeyMsg) tea.Cmd {
	if msg.String() == "ctrl+c" {
		m.history = nil
		return m.keys(msg)
	}
	if msg.String() == "esc" && m.history.screen == screenList && !m.history.editing {
		m.history = nil
		return nil
	}
	if cmd := m.history.key(msg); cmd != nil {
		if _, quit := cmd().(tea.QuitMsg); quit {
			m.history = nil
			return nil
		}
		return cmd
	}
	return nil
}

func (m *Model) onEvents(msg eventsMsg) tea.Cmd {
	gpuRows := m.st.gpuRows()
	for _, ev := range msg.events {
		m.st.apply(ev)
	}
	if m.st.gpuRows() != gpuRows {
		m.layout() // the GPUs' lines take their room from the pool's pane
	}
	m.syncDiff()
	if msg.closed {
		m.st.closed = true
		if !m.st.stopped {
			m.st.stopped = true
			m.st.stop.Reason = "event stream closed"
			m.st.logf(event.Warn, "the trainer's event stream closed")
		}
	}
	if m.quitting && m.st.stopped {
		return tea.Quit
	}
	if msg.closed {
		return nil // nothing left to wait for: do not re-arm
	}
	return m.pump.next()
}

// keys handles what the terminal sent as one key message. Bubble Tea
// reports printable runes that arrive in one read as one message ("aa2" when
// keys come faster than the console reads: a quick typist, SSH, tmux
// send-keys), which would match no binding; each is a key of its own. An
// escape read together with the next key arrives as that key with Alt, and
// the console binds no Alt key: it is esc, then the key. A paste is text,
// not keys, and is ignored (a pasted q must not quit).
func (m *Model) keys(msg tea.KeyMsg) tea.Cmd {
	if msg.Paste {
		return nil
	}
	var cmds []tea.Cmd
	if msg.Alt {
		cmds = append(cmds, m.onKey(tea.KeyMsg{Type: tea.KeyEsc}))
		msg.Alt = false
	}
	if msg.Type == tea.KeyRunes && len(msg.Runes) > 1 {
		for _, r := range msg.Runes {
			cmds = append(cmds, m.onKey(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{r}}))
		}
	} else {
		cmds = append(cmds, m.onKey(msg))
	}
	if len(cmds) == 1 {
		return cmds[0]
	}
	return tea.Sequence(cmds...)
}

// onKey handles a key: the quit question first, then global keys, then the
// focused pane.
func (m *Model) onKey(msg tea.KeyMsg) tea.Cmd {
	if m.confirm {
		switch {
		case key.Matches(msg, confirmYes):
			m.confirm = false
			return m.stopAndQuit()
		case key.Matches(msg, confirmNo):
			m.confirm = false
		}
		return nil
	}
	st := m.st
	switch {
	case key.Matches(msg, keys.Quit):
		return m.quit(msg.String() == "ctrl+c")
	case key.Matches(msg, keys.Help):
		m.help = !m.help
	case key.Matches(msg, keys.History):
		return m.openHistory()
	case key.Matches(msg, keys.Back):
		m.help, m.zoomed = false, false
	case key.Matches(msg, keys.Pause):
		m.togglePause()
	case key.Matches(msg, keys.Syntax):
		m.setPhase(config.PhaseSyntax)
	case key.Matches(msg, keys.Apply):
		m.setPhase(config.PhaseApplyOnly)
	case key.Matches(msg, keys.Docker):
		m.setPhase(config.PhaseDocker)
	case key.Matches(msg, keys.Auto):
		if m.control("auto-curriculum") {
			// Toggle what was last asked for, not what was last
			// acknowledged: twice before the trainer answers is on, off.
			want := !st.auto
			if st.wantAuto != nil {
				want = !*st.wantAuto
			}
			m.ctrl.SetAuto(want)
			st.wantAuto = &want
			st.logf(event.Info, "asked: auto-curriculum %s%s", onOff(want), m.whenGRPO())
		}
	case key.Matches(msg, keys.Save):
		if m.control("save") {
			m.ctrl.SaveNow()
			st.logf(event.Info, "asked: save a checkpoint")
		}
	case key.Matches(msg, keys.Replay):
		c := m.group.Selected()
		switch {
		case c == nil:
			st.logf(event.Warn, "replay: no completion selected")
		case m.control("replay"):
			text := c.Completion
			if c.Agent != nil {
				// A trajectory's graded diff, scored again as a reply.
				text = "```diff\n" + strings.TrimRight(c.Verdict.Patch, "\n") + "\n```\n"
			}
			m.ctrl.Replay(c.Verdict.InstanceID, text)
			st.logf(event.Info, "asked: replay %s %d.%d of step %d", c.Verdict.InstanceID, c.Group, c.Index, c.Step)
		}
	case key.Matches(msg, keys.Next):
		m.setFocus((m.focus + 1) % len(m.panes))
	case key.Matches(msg, keys.Prev):
		m.setFocus((m.focus + len(m.panes) - 1) % len(m.panes))
	case key.Matches(msg, keys.Zoom):
		m.zoomed = !m.zoomed
		m.layout()
	case key.Matches(msg, keys.Raw):
		m.diff.toggle(modeRaw)
	case key.Matches(msg, keys.Issue):
		m.diff.toggle(modeIssue)
	default:
		cmd := m.panes[m.focus].Update(msg)
		m.syncDiff()
		return cmd
	}
	m.layout() // help and zoom change what is drawn where
	return nil
}

// control reports whether a control can be sent now, logging why not.
func (m *Model) control(what string) bool {
	switch {
	case m.st.stopped:
		m.st.logf(event.Warn, "%s: the run has stopped", what)
		return false
	case m.stopCalled:
		m.st.logf(event.Warn, "%s: the run is stopping", what)
		return false
	}
	return true
}

// togglePause flips what was last asked for: from RUNNING it pauses
// (PAUSING until the trainer's Paused), from PAUSED it resumes (RESUMING
// until Resumed); pressed again before the answer it takes the request back
// (a pause that has not taken hold is cancelled with Resume, so the run goes
// on; a resume is cancelled with Pause). The trainer answers each request in
// order, so the requests alternate however fast the key is pressed.
func (m *Model) togglePause() {
	st := m.st
	if !m.control("pause") {
		return
	}
	want := st.targetPaused()
	switch {
	case want && st.paused:
		m.ctrl.Resume()
		st.logf(event.Info, "asked: resume")
	case want:
		m.ctrl.Resume()
		st.logf(event.Info, "asked: cancel the pause")
	case st.paused:
		m.ctrl.Pause()
		st.logf(event.Info, "asked: stay paused (cancels the resume)")
	default:
		m.ctrl.Pause()
		if st.inSFT() {
			st.logf(event.Info, "asked: pause the warm start after its current step")
		} else {
			st.logf(event.Info, "asked: pause after the step in flight")
		}
	}
	st.asked++
	st.wantPaused = !want
}

func (m *Model) setPhase(phase string) {
	if !m.control("phase") {
		return
	}
	m.ctrl.SetPhase(phase)
	m.st.logf(event.Info, "asked: phase %s%s", phase, m.whenGRPO())
}

// whenGRPO qualifies a control that the warm start does not use.
func (m *Model) whenGRPO() string {
	if m.st.inSFT() {
		return " (takes effect when GRPO starts)"
	}
	return ""
}

// quit is q or ctrl-c. Nothing running: quit at once. A step in flight: ask
// first. Otherwise stop the run and quit when its Stopped arrives. While
// stopping, ctrl-c quits without waiting any longer.
func (m *Model) quit(force bool) tea.Cmd {
	switch {
	case !m.st.running():
		if !m.stopCalled && !m.st.stopped {
			m.ctrl.Stop() // the trainer may be starting: tell it anyway
			m.stopCalled = true
		}
		return tea.Quit
	case m.stopCalled:
		if force {
			return tea.Quit
		}
		m.st.logf(event.Warn, "stopping: waiting for the trainer (ctrl-c quits now)")
		return nil
	case m.st.inFlight, m.st.inSFT() && !m.st.paused:
		m.confirm = true // a step (GRPO's or the warm start's) is in flight
		return nil
	}
	return m.stopAndQuit()
}

func (m *Model) stopAndQuit() tea.Cmd {
	m.ctrl.Stop()
	m.stopCalled, m.quitting = true, true
	m.st.stopRequested = true
	m.st.logf(event.Info, "asked: stop the run; quitting once it has stopped")
	if m.st.stopped {
		return tea.Quit
	}
	return nil
}

// syncDiff shows the group's selection in the diff pane.
func (m *Model) syncDiff() { m.diff.SetCompletion(m.group.Selected()) }

func (m *Model) setFocus(i int) {
	m.panes[m.focus].SetFocus(false)
	m.focus = i
	m.panes[i].SetFocus(true)
}

func (m *Model) resize(w, h int) {
	m.width, m.height = w, h
	m.layout()
}

// Layout: header (2 lines), body, events strip, key bar (1 line). The body
// is two columns (rewards over group | diff over containers), or the focused
// pane alone when zoomed or narrower than 70 columns.
func (m *Model) eventsHeight() int {
	if m.height >= 40 {
		return 5
	}
	return 2
}

func (m *Model) bodyHeight() int { return max(m.height-2-m.eventsHeight()-1, 0) }

func (m *Model) single() bool { return m.zoomed || m.width < 70 }

func (m *Model) layout() {
	w, bh := m.width, m.bodyHeight()
	m.hdr.w = w
	m.rewards.zoomed = m.zoomed && m.panes[m.focus] == pane(m.rewards)
	m.events.SetSize(w, m.eventsHeight())
	if m.single() {
		m.panes[m.focus].SetSize(w, bh)
		m.syncDiff()
		return
	}
	lw := w / 2
	rw := w - lw - 1
	top := bh / 2
	m.rewards.SetSize(lw, top)
	m.group.SetSize(lw, bh-top)
	m.diff.SetSize(rw, bh-top)
	gh := min(m.st.gpuRows(), top/2)
	m.gpus.SetSize(rw, gh)
	m.containers.SetSize(rw, top-gh)
	m.syncDiff()
}

// View draws the whole screen: exactly height lines of width cells.
func (m *Model) View() string {
	if m.width <= 0 || m.height <= 0 {
		return ""
	}
	if m.history != nil {
		return m.history.View()
	}
	lines := make([]string, 0, m.height)
	lines = append(lines, m.hdr.Lines()...)
	lines = append(lines, m.body()...)
	if !(m.single() && m.focus == len(m.panes)-1) {
		lines = append(lines, m.events.Lines()...)
	} else {
		lines = append(lines, block(nil, m.width, m.eventsHeight())...)
	}
	lines = append(lines, m.keyBar())
	return strings.Join(block(lines, m.width, m.height), "\n")
}

func (m *Model) body() []string {
	w, bh := m.width, m.bodyHeight()
	switch {
	case bh <= 0:
		return nil
	case m.help:
		return m.helpLines(w, bh)
	case m.single():
		return m.panes[m.focus].Lines()
	}
	left := append(m.rewards.Lines(), m.group.Lines()...)
	right := append(append(m.gpus.Lines(), m.containers.Lines()...), m.diff.Lines()...)
	out := make([]string, bh)
	for i := range out {
		out[i] = left[i] + "│" + right[i]
	}
	return out
}

// keyBar is the last line: the quit question, the stopping notice, or the
// main keys, as many as fit (the least used give way first; help and quit
// always stay).
func (m *Model) keyBar() string {
	var s string
	switch {
	case m.confirm:
		what := fmt.Sprintf("Step %d is in flight", m.st.step)
		if m.st.inSFT() {
			what = "The warm start is running"
			if m.st.haveSFT {
				what = fmt.Sprintf("The warm start is at step %d/%d", m.st.sft.Step, m.st.sft.Steps)
			}
		}
		s = " " + what + ". Stop the run and quit? y/n "
	case m.stopCalled && !m.st.stopped:
		s = " STOPPING: waiting for the trainer to stop (ctrl-c quits now) "
	case m.st.stopped:
		s = " STOPPED: q quits · ? help · tab/enter browse "
	default:
		s = " " + strings.Join(fitHints(m.hints(), m.width-2), " · ") + " "
	}
	return styleBar.Render(fitLine(s, m.width))
}

// hint is one key of the key bar; the lowest rank gives way first.
type hint struct {
	text string
	rank int
}

func (m *Model) hints() []hint {
	pause := "space pause"
	if m.st.targetPaused() {
		pause = "space resume"
	}
	zoom := hint{"enter zoom", 3}
	if m.zoomed {
		zoom = hint{"esc unzoom", 8}
	}
	hs := []hint{{"? help", 100}, {pause, 9}, {"1/2/3 phase", 6}, {"a auto", 4}, {"s save", 5}}
	if !m.st.inSFT() { // nothing to replay or read before GRPO samples
		hs = append(hs, hint{"r replay", 2}, hint{"c raw", 1}, hint{"v history", 1})
	}
	return append(hs, hint{"tab focus", 7}, zoom, hint{"q quit", 100})
}

// fitHints drops the lowest-ranked hints until the rest, joined, fit in w.
func fitHints(hs []hint, w int) []string {
	for {
		var texts []string
		n, low := 0, -1
		for i, h := range hs {
			texts = append(texts, h.text)
			n += ansi.StringWidth(h.text)
			if low < 0 || h.rank < hs[low].rank {
				low = i
			}
		}
		n += 3 * max(len(hs)-1, 0)
		if n <= w || len(hs) <= 2 {
			return texts
		}
		hs = append(hs[:low:low], hs[low+1:]...)
	}
}
