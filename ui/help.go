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

// helpSections lists the global keys, then every pane's own keys (or, with
// all false, only the focused pane's: all of them do not fit in 80x24).
func (m *Model) helpSections(all bool) []helpSection {
	secs := []helpSection{
		{"Run", []key.Binding{keys.Pause, keys.Syntax, keys.Apply, keys.Docker, keys.Auto, keys.Save, keys.Replay, keys.Quit}},
		{"Screen", []key.Binding{keys.Next, keys.Prev, keys.Zoom, keys.Back, keys.Raw, keys.Issue, keys.Help}},
	}
	for i, p := range m.panes {
		switch {
		case all:
			secs = append(secs, helpSection{p.Name() + " pane", p.Keys()})
		case i == m.focus:
			secs = append(secs, helpSection{p.Name() + " pane (focused; tab for others)", p.Keys()})
		}
	}
	secs = append(secs, helpSection{"Group flags", []key.Binding{
		key.NewBinding(key.WithHelp("V A R", "valid diff, applied, resolved")),
		key.NewBinding(key.WithHelp("T I H", "truncated, infra failure, hack")),
		key.NewBinding(key.WithHelp("step N*", "step N in flight")),
	}})
	return secs
}

// helpLines lays the sections out in columns as wide as fit in w, whole
// sections to a column; every pane's keys when they fit, else the focused
// pane's.
func (m *Model) helpLines(w, h int) []string {
	rows := max(h-1, 1)
	cols := max(w/40, 1)
	columns, ok := helpColumns(m.helpSections(true), cols, rows)
	if !ok {
		columns, _ = helpColumns(m.helpSections(false), cols, rows)
	}
	colW := max(w/max(min(len(columns), cols), 1), 1)
	out := []string{titleLine("Help", "every key; ? or esc closes", w, true)}
	for r := 0; r < rows; r++ {
		line := ""
		for c := 0; c < len(columns) && c < cols; c++ {
			cell := ""
			if r < len(columns[c]) {
				cell = columns[c][r]
			}
			line += fitLine(cell, colW)
		}
		out = append(out, line)
	}
	return block(out, w, h)
}

// helpColumns packs sections into at most cols columns of at most rows
// lines, balanced; ok is false when they do not fit.
func helpColumns(secs []helpSection, cols, rows int) (columns [][]string, ok bool) {
	var sections [][]string
	total := 0
	for _, s := range secs {
		lines := []string{styleBold.Render(s.title)}
		for _, k := range s.keys {
			lines = append(lines, fmt.Sprintf("  %-12s %s", k.Help().Key, k.Help().Desc))
		}
		sections = append(sections, lines)
		total += len(lines) + 1
	}
	// The shortest columns that hold every section whole in cols columns.
	low := (total + cols - 1) / cols
	for _, s := range sections {
		low = max(low, len(s))
	}
	for target := low; ; target++ {
		columns = packHelp(sections, target)
		if len(columns) <= cols || target >= rows {
			break
		}
	}
	ok = len(columns) <= cols
	for _, c := range columns {
		ok = ok && len(c) <= rows
	}
	return columns, ok
}

// packHelp fills columns of up to target lines with whole sections.
func packHelp(sections [][]string, target int) (columns [][]string) {
	var col []string
	for _, s := range sections {
		if len(col) > 0 && len(col)+1+len(s) > target {
			columns = append(columns, col)
			col = nil
		}
		if len(col) > 0 {
			col = append(col, "")
		}
		col = append(col, s...)
	}
	return append(columns, col)
}
