package ui

import (
	"strings"
	"unicode"
	"unicode/utf8"

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
	text = clean(text)
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

// clean makes untrusted text (completions, issue texts, container logs,
// error messages) safe to draw: escape sequences are dropped, tabs expanded,
// and every rune whose width a terminal may count otherwise than
// ansi.StringWidth does is replaced, so that nothing the model or a test
// prints can move the cursor or wrap a line and shift the screen (a
// byte-level model samples invalid UTF-8, zero-width and combining runes,
// emoji sequences and controls). A run of invalid bytes becomes one U+FFFD,
// other unsafe runes '?'. What is left draws in exactly ansi.StringWidth cells, one or
// two per rune.
func clean(s string) string {
	if !needsClean(s) {
		return s
	}
	s = ansi.Strip(strings.ToValidUTF8(s, string(utf8.RuneError)))
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		switch {
		case r == utf8.RuneError:
			b.WriteRune(r)
		case r == '\t':
			b.WriteString("    ")
		case safeRune(r):
			b.WriteRune(r)
		default:
			b.WriteByte('?')
		}
	}
	return b.String()
}

// needsClean: anything but printable ASCII goes through clean's slow path.
func needsClean(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f {
			return true
		}
	}
	return false
}

// safeRune reports whether r is drawn in the same cells by every terminal and
// by ansi.StringWidth, and never joins a neighbour into one grapheme: the
// printable letters, digits, punctuation, symbols and spaces of the blocks
// in narrowRunes (one cell each) and wideRunes (East Asian wide text, two
// cells). Controls, format and zero-width runes, combining marks, line
// separators, emoji (whose width and joining differ between terminals) and
// the scripts whose runes join into clusters are not.
func safeRune(r rune) bool {
	if r < 0x7f {
		return r >= 0x20
	}
	if !unicode.In(r, unicode.L, unicode.N, unicode.P, unicode.S, unicode.Zs) || r == 0xad {
		return false
	}
	w := 0
	switch {
	case inRanges(r, narrowRunes):
		w = 1
	case inRanges(r, wideRunes):
		w = 2
	default:
		return false
	}
	return ansi.StringWidth(string(r)) == w
}

// narrowRunes are the blocks of one-cell text safeRune accepts: Latin,
// Greek, Cyrillic, and the punctuation, symbols, arrows, box drawing,
// blocks and braille that source code, logs and this console use.
var narrowRunes = [][2]rune{
	{0x00a0, 0x024f}, // Latin-1 supplement, Latin extended A and B
	{0x0370, 0x03ff}, // Greek
	{0x0400, 0x04ff}, // Cyrillic
	{0x1e00, 0x1eff}, // Latin extended additional
	{0x2010, 0x2027}, // general punctuation (no zero-width or bidi runes)
	{0x2030, 0x205e},
	{0x2070, 0x20bf}, // super- and subscripts, currency
	{0x2100, 0x2bff}, // letterlike ... arrows, maths, box drawing, blocks, shapes, braille
}

// wideRunes are the blocks of two-cell East Asian text safeRune accepts.
var wideRunes = [][2]rune{
	{0x3000, 0x30ff},   // CJK punctuation, hiragana, katakana
	{0x3130, 0x318f},   // Hangul compatibility jamo (standalone)
	{0x3400, 0x4dbf},   // CJK extension A
	{0x4e00, 0x9fff},   // CJK unified ideographs
	{0xac00, 0xd7a3},   // Hangul syllables (precomposed; the jamo join)
	{0xf900, 0xfaff},   // CJK compatibility ideographs
	{0xff01, 0xff60},   // fullwidth forms
	{0xffe0, 0xffe6},   // fullwidth signs
	{0x20000, 0x3fffd}, // CJK extensions B and later
}

func inRanges(r rune, ranges [][2]rune) bool {
	for _, g := range ranges {
		if r >= g[0] && r <= g[1] {
			return true
		}
	}
	return false
}
