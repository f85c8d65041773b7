package ui

import (
	"fmt"
	"math"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/swetui/swetui/event"
)

// metric is one chart of the rewards pane.
type metric struct {
	label  string
	get    func(m *event.Metrics) float64
	format func(v float64) string
	fixed  *[2]float64 // drawn range for rates; nil = fit the data
}

var unit = &[2]float64{0, 1}

func pct(v float64) string  { return fmt.Sprintf("%.0f%%", 100*v) }
func num3(v float64) string { return fmt.Sprintf("%.3f", v) }
func num4(v float64) string { return fmt.Sprintf("%.4f", v) }
func secs(v float64) string { return fmt.Sprintf("%.1fs", v) }
func signed(v float64) string {
	if math.Abs(v) < 5e-5 {
		return "="
	}
	return fmt.Sprintf("%+.3f", v)
}

var metrics = []metric{
	{"reward mean", func(m *event.Metrics) float64 { return m.RewardMean }, num3, nil},
	{"reward max", func(m *event.Metrics) float64 { return m.RewardMax }, num3, nil},
	{"syntax-valid", func(m *event.Metrics) float64 { return m.SyntaxRate }, pct, unit},
	{"applied", func(m *event.Metrics) float64 { return m.ApplyRate }, pct, unit},
	{"resolved", func(m *event.Metrics) float64 { return m.ResolvedRate }, pct, unit},
	{"kl", func(m *event.Metrics) float64 { return m.KL }, num4, nil},
	{"loss", func(m *event.Metrics) float64 { return m.Loss }, num4, nil},
	{"step time", func(m *event.Metrics) float64 { return m.StepSeconds }, secs, nil},
}

// rewardsPane charts the metrics over the whole history, bucketed to the
// width, with the latest value and its change since the previous step.
type rewardsPane struct {
	frame
	st  *state
	sel int
}

func (p *rewardsPane) Name() string { return "Rewards" }

func (p *rewardsPane) Keys() []key.Binding {
	return []key.Binding{withHelp(nav.Up, "previous chart"), withHelp(nav.Down, "next chart")}
}

func (p *rewardsPane) Update(msg tea.KeyMsg) tea.Cmd {
	switch {
	case key.Matches(msg, nav.Up):
		p.sel = max(p.sel-1, 0)
	case key.Matches(msg, nav.Down):
		p.sel = min(p.sel+1, len(metrics)-1)
	}
	return nil
}

func (p *rewardsPane) Lines() []string {
	if p.h <= 0 {
		return nil
	}
	hist := p.st.history
	info := "no step yet"
	if n := hist.Len(); n > 0 {
		info = fmt.Sprintf("steps %d–%d", hist.At(0).Step, hist.At(n-1).Step)
	}
	lines := []string{titleLine(p.Name(), info, p.w, p.focused)}
	body := p.h - 1
	cols := 1
	if p.w >= 90 {
		cols = 2
	}
	rows := (len(metrics) + cols - 1) / cols
	per := body / rows
	cw := (p.w - (cols - 1)) / cols
	if per < 3 {
		// Compact: one sparkline per metric, scrolled to keep the selected
		// one in sight when the pane is shorter than the list.
		first := 0
		if rows > body && body > 0 {
			first = max(0, min(p.sel/cols-body/2, rows-body))
		}
		for r := first; r < rows && len(lines) < p.h; r++ {
			line := ""
			for c := 0; c < cols; c++ {
				i := r*cols + c
				if i >= len(metrics) {
					break
				}
				if c > 0 {
					line += " "
				}
				line += fitLine(p.spark(i, cw), cw)
			}
			lines = append(lines, line)
		}
		return block(lines, p.w, p.h)
	}
	for r := 0; r < rows; r++ {
		cells := make([][]string, cols)
		for c := 0; c < cols; c++ {
			if i := r*cols + c; i < len(metrics) {
				cells[c] = p.chart(i, cw, per)
			} else {
				cells[c] = block(nil, cw, per)
			}
		}
		for l := 0; l < per; l++ {
			line := ""
			for c := range cells {
				if c > 0 {
					line += " "
				}
				line += cells[c][l]
			}
			lines = append(lines, line)
		}
	}
	return block(lines, p.w, p.h)
}

// series returns metric i bucketed to m points, and its latest value and
// change since the previous step.
func (p *rewardsPane) series(i, m int, stretch bool) (vals []float64, last, delta float64, ok bool) {
	hist, get := p.st.history, metrics[i].get
	n := hist.Len()
	if n == 0 {
		return nil, 0, 0, false
	}
	vals = bucket(n, m, stretch, func(j int) float64 { return get(&hist.Ref(j).M) })
	last = get(&hist.Ref(n - 1).M)
	if n > 1 {
		delta = last - get(&hist.Ref(n-2).M)
	}
	return vals, last, delta, true
}

func (p *rewardsPane) label(i int) string {
	mark := "  "
	if i == p.sel && p.focused {
		mark = "> "
	}
	return mark + fmt.Sprintf("%-13s", metrics[i].label)
}

func (p *rewardsPane) value(i int, last, delta float64, ok bool) string {
	if !ok {
		return "     -"
	}
	return fmt.Sprintf("%7s %7s", metrics[i].format(last), signed(delta))
}

func (p *rewardsPane) spark(i, w int) string {
	valW := 16
	sw := w - 16 - valW
	if sw < 4 {
		sw = 0
	}
	vals, last, delta, ok := p.series(i, sw, false)
	lo, hi := bounds(vals, metrics[i].fixed)
	s := p.label(i)
	if sw > 0 {
		s += sparkline(vals, lo, hi, sw)
	}
	return s + p.value(i, last, delta, ok)
}

func (p *rewardsPane) chart(i, w, h int) []string {
	const axisW = 8
	pw := max(w-axisW, 1)
	vals, last, delta, ok := p.series(i, 2*pw, true)
	lo, hi := bounds(vals, metrics[i].fixed)
	head := styleBold.Render(p.label(i)) + p.value(i, last, delta, ok)
	out := []string{head}
	plot := braille(vals, lo, hi, pw, h-1)
	for r, row := range plot {
		axis := ""
		switch r {
		case 0:
			axis = metrics[i].format(hi)
		case len(plot) - 1:
			axis = metrics[i].format(lo)
		}
		out = append(out, row+styleDim.Render(fmt.Sprintf(" %*s", axisW-1, axis)))
	}
	return block(out, w, h)
}
