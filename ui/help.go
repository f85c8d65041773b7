package ui

import (
	"fmt"

	"github.com/charmbracelet/bubbles/key"
)

// helpSection is one titled list of keys in the help view.
type helpSection struct {
	title string
	keys  []key.Binding
}

func (m *Model) helpSections() []helpSection {
	secs := []helpSection{
		{"Run", []key.Binding{keys.Pause, keys.Syntax, keys.Apply, keys.Docker, keys.Auto, keys.Save, keys.Replay, keys.Quit}},
		{"Screen", []key.Binding{keys.Next, keys.Prev, keys.Zoom, keys.Back, keys.Raw, keys.Issue, keys.Help}},
	}
	// The focused pane's own keys: all panes' would not fit in 80x24.
	p := m.panes[m.focus]
	secs = append(secs, helpSection{p.Name() + " (focused; tab for others)", p.Keys()})
	secs = append(secs, helpSection{"Group flags", []key.Binding{
		key.NewBinding(key.WithHelp("V A R", "valid diff, applied, resolved")),
		key.NewBinding(key.WithHelp("T I H", "truncated, infra failure, hack")),
		key.NewBinding(key.WithHelp("step N*", "step N in flight")),
	}})
	return secs
}

// helpLines lays the sections out in as many columns as fit in w x h.
func (m *Model) helpLines(w, h int) []string {
	const colW = 40
	var entries []string
	for _, s := range m.helpSections() {
		if len(entries) > 0 {
			entries = append(entries, "")
		}
		entries = append(entries, styleBold.Render(s.title))
		for _, k := range s.keys {
			entries = append(entries, fmt.Sprintf("  %-12s %s", k.Help().Key, k.Help().Desc))
		}
	}
	rows := max(h-1, 1)
	cols := max(w/colW, 1)
	out := []string{titleLine("Help", "every key; ? or esc closes", w, true)}
	for r := 0; r < rows; r++ {
		line := ""
		for c := 0; c < cols; c++ {
			i := c*rows + r
			if i < len(entries) {
				line += fitLine(entries[i], colW)
			}
		}
		out = append(out, line)
	}
	return block(out, w, h)
}
