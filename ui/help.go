package ui

import (
	"fmt"

	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/x/ansi"
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
		{"Screen", []key.Binding{keys.Next, keys.Prev, keys.Zoom, keys.Back, keys.Raw, keys.Issue, keys.History, keys.Help}},
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
		key.NewBinding(key.WithHelp("V A R", "valid, applied, resolved")),
		key.NewBinding(key.WithHelp("T I H", "truncated, infra, hack")),
		key.NewBinding(key.WithHelp("D", "verifier disagrees (sure, graded other)")),
		key.NewBinding(key.WithHelp("v=0.06", "verifier's score (reward.verifier)")),
		key.NewBinding(key.WithHelp("step N*", "step N in flight")),
	}})
	return secs
}

// helpLines lays the sections out in as many columns as fit in w, each as
// wide as its widest line, whole sections to a column: every pane's keys
// when they fit, else the focused pane's. Only a terminal too small for
// that cuts entries.
func (m *Model) helpLines(w, h int) []string {
	rows := max(h-1, 1)
	columns, widths := helpLayout(m.helpSections(true), w, rows)
	if columns == nil {
		columns, widths = helpLayout(m.helpSections(false), w, rows)
	}
	if columns == nil { // too small: the focused pane's keys, cut to fit
		cols := max(w/40, 1)
		columns, _ = helpColumns(m.helpSections(false), cols, rows)
		columns = columns[:min(len(columns), cols)]
		widths = make([]int, len(columns))
		for i := range widths {
			widths[i] = max(w/len(columns), 1)
		}
	}
	out := []string{titleLine("Help", "every key; ? or esc closes", w, true)}
	for r := 0; r < rows; r++ {
		line := ""
		for c := range columns {
			cell := ""
			if r < len(columns[c]) {
				cell = columns[c][r]
			}
			line += fitLine(cell, widths[c])
		}
		out = append(out, line)
	}
	return block(out, w, h)
}

// helpGap is the space between help columns.
const helpGap = 3

// helpLayout finds the most columns (up to one per section) in which secs
// fit whole in w cells and rows lines; nil when none does. widths include
// the gap after each column but the last.
func helpLayout(secs []helpSection, w, rows int) (columns [][]string, widths []int) {
	for cols := len(secs); cols >= 1; cols-- {
		cs, ok := helpColumns(secs, cols, rows)
		if !ok {
			continue
		}
		ws, total := make([]int, len(cs)), 0
		for i, c := range cs {
			for _, l := range c {
				ws[i] = max(ws[i], ansi.StringWidth(l))
			}
			if i < len(cs)-1 {
				ws[i] += helpGap
			}
			total += ws[i]
		}
		if total <= w {
			ws[len(ws)-1] += w - total // the last column takes the rest
			return cs, ws
		}
	}
	return nil, nil
}

// helpColumns packs sections into at most cols columns of at most rows
// lines, balanced; ok is false when they do not fit.
func helpColumns(secs []helpSection, cols, rows int) (columns [][]string, ok bool) {
	var sections [][]string
	total := 0
	for _, s := range secs {
		lines := []string{styleBold.Render(s.title)}
		for _, k := range s.keys {
			lines = append(lines, fmt.Sprintf("  %-9s  %s", k.Help().Key, k.Help().Desc))
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
