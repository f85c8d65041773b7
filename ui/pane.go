package ui

import (
	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
)

// pane is one focusable part of the screen. The root model owns the data
// (state) and routes keys to the focused pane; a pane keeps only its view
// state (selection, scroll, mode) and draws itself in exactly w x h cells.
type pane interface {
	Name() string
	SetSize(w, h int)
	SetFocus(bool)
	// Update handles a key while the pane has the focus.
	Update(msg tea.KeyMsg) tea.Cmd
	// Lines draws the pane: h lines of w cells.
	Lines() []string
	// Keys lists the pane's own keys for the help view.
	Keys() []key.Binding
}

// frame holds the size and focus every pane has.
type frame struct {
	w, h    int
	focused bool
}

func (f *frame) SetSize(w, h int) { f.w, f.h = max(w, 0), max(h, 0) }
func (f *frame) SetFocus(b bool)  { f.focused = b }

// scroller is a viewport's offset over n lines shown h at a time.
type scroller struct{ top int }

func (s *scroller) clamp(n, h int) {
	s.top = max(0, min(s.top, n-h))
}

// move handles the navigation keys; it reports whether the key was one.
func (s *scroller) move(msg tea.KeyMsg, n, h int) bool {
	switch {
	case key.Matches(msg, nav.Up):
		s.top--
	case key.Matches(msg, nav.Down):
		s.top++
	case key.Matches(msg, nav.PageUp):
		s.top -= max(h-1, 1)
	case key.Matches(msg, nav.PageDown):
		s.top += max(h-1, 1)
	case key.Matches(msg, nav.Top):
		s.top = 0
	case key.Matches(msg, nav.Bottom):
		s.top = n
	default:
		return false
	}
	s.clamp(n, h)
	return true
}
