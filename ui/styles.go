package ui

import (
	"strings"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
)

// Styles. Colour is decoration only: every state is also a word or a glyph,
// so the console reads the same with NO_COLOR (and in the ASCII goldens).
var (
	styleBold     = lipgloss.NewStyle().Bold(true)
	styleDim      = lipgloss.NewStyle().Faint(true)
	styleTitle    = lipgloss.NewStyle().Bold(true)
	styleFocus    = lipgloss.NewStyle().Bold(true).Foreground(lipgloss.Color("12"))
	styleSelected = lipgloss.NewStyle().Reverse(true)
	styleAdd      = lipgloss.NewStyle().Foreground(lipgloss.Color("2"))
	styleDel      = lipgloss.NewStyle().Foreground(lipgloss.Color("1"))
	styleHunk     = lipgloss.NewStyle().Foreground(lipgloss.Color("6"))
	styleFileHdr  = lipgloss.NewStyle().Bold(true)
	styleWarn     = lipgloss.NewStyle().Foreground(lipgloss.Color("3"))
	styleErr      = lipgloss.NewStyle().Foreground(lipgloss.Color("1")).Bold(true)
	styleGood     = lipgloss.NewStyle().Foreground(lipgloss.Color("2"))
	styleBar      = lipgloss.NewStyle().Reverse(true).Bold(true)
)

func phaseStyle(phase string) lipgloss.Style {
	s := lipgloss.NewStyle().Bold(true)
	switch phase {
	case config.PhaseSyntax:
		return s.Foreground(lipgloss.Color("3"))
	case config.PhaseApplyOnly:
		return s.Foreground(lipgloss.Color("4"))
	case config.PhaseDocker:
		return s.Foreground(lipgloss.Color("2"))
	}
	return s
}

func stateStyle(s runState) lipgloss.Style {
	switch s {
	case stateRunning:
		return styleGood.Bold(true)
	case statePaused, statePausing, stateResuming:
		return lipgloss.NewStyle().Bold(true).Reverse(true).Foreground(lipgloss.Color("3"))
	case stateStopping, stateStopped:
		return styleErr
	}
	return styleBold
}

func levelStyle(l event.Level) lipgloss.Style {
	switch l {
	case event.Warn:
		return styleWarn
	case event.Error:
		return styleErr
	}
	return lipgloss.NewStyle()
}

// fitLine cuts or pads s (which may hold ANSI styles) to exactly w cells.
func fitLine(s string, w int) string {
	if w <= 0 {
		return ""
	}
	n := ansi.StringWidth(s)
	if n > w {
		s = ansi.Truncate(s, w, "…")
		n = ansi.StringWidth(s)
	}
	if n < w {
		s += strings.Repeat(" ", w-n)
	}
	return s
}

// block turns lines into exactly h lines of exactly w cells.
func block(lines []string, w, h int) []string {
	out := make([]string, h)
	for i := range out {
		if i < len(lines) {
			out[i] = fitLine(lines[i], w)
		} else {
			out[i] = strings.Repeat(" ", max(w, 0))
		}
	}
	return out
}

// titleLine draws a pane's title as a rule: heavy when focused, so focus
// shows without colour.
func titleLine(title, info string, w int, focused bool) string {
	rule, lead := "─", "── "
	st := styleTitle
	if focused {
		rule, lead = "━", "━━ "
		st = styleFocus
	}
	text := lead + title
	if info != "" {
		text += " · " + info
	}
	text += " "
	n := ansi.StringWidth(text)
	if n >= w {
		return st.Render(ansi.Truncate(text, w, "…"))
	}
	return st.Render(text + strings.Repeat(rule, w-n))
}

// spread puts left and right on one line of w cells, right-aligned.
func spread(left, right string, w int) string {
	gap := w - ansi.StringWidth(left) - ansi.StringWidth(right)
	if gap < 1 {
		return fitLine(left+" "+right, w)
	}
	return left + strings.Repeat(" ", gap) + right
}

// clean makes untrusted text (completions, container logs) safe to draw:
// escape sequences are dropped, tabs expanded, other control bytes shown as
// '?', so nothing the model or a test prints can move the cursor.
func clean(s string) string {
	if !needsClean(s) {
		return s
	}
	s = ansi.Strip(s)
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\t':
			b.WriteString("    ")
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
			b.WriteByte('?')
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func needsClean(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f || c == 0xc2 {
			return true
		}
	}
	return false
}
