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
func num3(v float64) string { return small(v, "%.3f", 5e-4) }
func num4(v float64) string { return small(v, "%.4f", 5e-5) }
func num0(v float64) string { return fmt.Sprintf("%.0f", v) }

// small formats v with format, or in e-notation when it is not zero but
// would print as zero (a KL of 3e-7 is not "0.0000").
func small(v float64, format string, below float64) string {
	switch {
	case v > 0 && v < below:
		return fmt.Sprintf("%.1e", v)
	case v < 0 && -v < below:
		return fmt.Sprintf("%.0e", v) // as narrow as the positive form
	}
	return fmt.Sprintf(format, v)
}
func secs(v float64) string { return fmt.Sprintf("%.1fs", v) }
func signed(v float64) string {
	switch a := math.Abs(v); {
	case a < 5e-5:
		return "="
	case a < 5e-4:
		return fmt.Sprintf("%+.0e", v) // not "-0.000"
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
	{"groups drawn", func(m *event.Metrics) float64 { return float64(m.Groups) }, num0, nil},
	{"similarity", func(m *event.Metrics) float64 { return m.Similarity }, num3, unit},
	{"no-op", func(m *event.Metrics) float64 { return m.NoopRate }, pct, unit},
}

// series is one chart's data: n values read through at, oldest first, and
// the steps they span.
type series struct {
	metric
	n          int
	at         func(i int) float64
	first, end int // steps of the oldest and newest value
}

// rewardsPane charts the metrics over the whole history, bucketed to the
// width, with the latest value and its change since the previous step.
// During the warm start it charts the warm start's training and held-out
// losses instead; once GRPO runs, those stay reachable by zooming the pane,
// below GRPO's charts.
type rewardsPane struct {
	frame
	st     *state
	sel    int
	zoomed bool // set by the root model's layout
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
		p.sel = min(p.sel+1, len(p.charts())-1)
	}
	return nil
}

var (
	sftLossMetric    = metric{"loss", nil, num3, nil}
	sftHeldoutMetric = metric{"held-out loss", nil, num3, nil}
)

// charts are the series shown now: GRPO's metrics, or the warm start's
// losses while it runs (and below GRPO's when zoomed).
func (p *rewardsPane) charts() []series {
	st := p.st
	sft := func(loss, held string) []series {
		out := []series{sftSeries(sftLossMetric, loss, st.sftLoss)}
		return append(out, sftSeries(sftHeldoutMetric, held, st.sftHeld))
	}
	if st.inSFT() {
		return sft("loss", "held-out loss")
	}
	hist := st.history
	var out []series
	for _, m := range metrics {
		s := series{metric: m, n: hist.Len(), at: func(j int) float64 { return m.get(&hist.Ref(j).M) }}
		if s.n > 0 {
			s.first, s.end = hist.At(0).Step, hist.At(s.n-1).Step
		}
		out = append(out, s)
	}
	if p.zoomed && st.sftLoss.Len() > 0 {
		out = append(out, sft("sft loss", "sft held-out")...)
	}
	return out
}

func sftSeries(m metric, label string, r *ring[sftPoint]) series {
	m.label = label
	s := series{metric: m, n: r.Len(), at: func(j int) float64 { return r.Ref(j).V }}
	if s.n > 0 {
		s.first, s.end = r.At(0).Step, r.At(s.n-1).Step
	}
	return s
}

func (p *rewardsPane) Lines() []string {
	if p.h <= 0 {
		return nil
	}
	charts := p.charts()
	p.sel = max(0, min(p.sel, len(charts)-1))
	info := "no step yet"
	switch {
	case p.st.inSFT() && charts[0].n > 0:
		info = fmt.Sprintf("warm start %d–%d/%d", charts[0].first, charts[0].end, p.st.sft.Steps)
	case p.st.inSFT():
		info = "warm start · no step yet"
	case charts[0].n > 0:
		info = fmt.Sprintf("steps %d–%d", charts[0].first, charts[0].end)
	}
	lines := []string{titleLine(p.Name(), info, p.w, p.focused)}
	body := p.h - 1
	cols := 1
	if p.w >= 90 && len(charts) > 2 {
		cols = 2
	}
	rows := (len(charts) + cols - 1) / cols
	per := body / rows
	cw := (p.w - (cols - 1)) / cols
	if per < 3 {
		// Compact: one sparkline per chart, scrolled to keep the selected
		// one in sight when the pane is shorter than the list.
		first := 0
		if rows > body && body > 0 {
			first = max(0, min(p.sel/cols-body/2, rows-body))
		}
		for r := first; r < rows && len(lines) < p.h; r++ {
			line := ""
			for c := 0; c < cols; c++ {
				i := r*cols + c
				if i >= len(charts) {
					break
				}
				if c > 0 {
					line += " "
				}
				line += fitLine(p.spark(charts[i], i, cw), cw)
			}
			lines = append(lines, line)
		}
		return block(lines, p.w, p.h)
	}
	for r := 0; r < rows; r++ {
		cells := make([][]string, cols)
		for c := 0; c < cols; c++ {
			if i := r*cols + c; i < len(charts) {
				cells[c] = p.chart(charts[i], i, cw, per)
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

// values returns s bucketed to m points, and its latest value and change
// since the previous one.
func (s series) values(m int, stretch bool) (vals []float64, last, delta float64, ok bool) {
	if s.n == 0 {
		return nil, 0, 0, false
	}
	vals = bucket(s.n, m, stretch, s.at)
	last = s.at(s.n - 1)
	if s.n > 1 {
		delta = last - s.at(s.n-2)
	}
	return vals, last, delta, true
}

func (p *rewardsPane) label(s series, i int) string {
	mark := "  "
	if i == p.sel && p.focused {
		mark = "> "
	}
	return mark + fmt.Sprintf("%-13s", s.label)
}

func (p *rewardsPane) value(s series, last, delta float64, ok bool) string {
	if !ok {
		return "     -"
	}
	return fmt.Sprintf("%7s %7s", s.format(last), signed(delta))
}

func (p *rewardsPane) spark(s series, i, w int) string {
	valW := 16
	sw := w - 16 - valW
	if sw < 4 {
		sw = 0
	}
	vals, last, delta, ok := s.values(sw, false)
	lo, hi := bounds(vals, s.fixed)
	out := p.label(s, i)
	if sw > 0 {
		if s.fixed == nil && flat(vals) {
			out += flatSpark(vals, sw)
		} else {
			out += sparkline(vals, lo, hi, sw)
		}
	}
	return out + p.value(s, last, delta, ok)
}

func (p *rewardsPane) chart(s series, i, w, h int) []string {
	const axisW = 8
	pw := max(w-axisW, 1)
	vals, last, delta, ok := s.values(2*pw, true)
	lo, hi := bounds(vals, s.fixed)
	head := styleBold.Render(p.label(s, i)) + p.value(s, last, delta, ok)
	out := []string{head}
	plot := braille(vals, lo, hi, pw, h-1)
	// A flat series has no range to label: its value goes beside its line.
	lineRow := -1
	if s.fixed == nil && flat(vals) {
		lineRow = len(plot) - 1 - level(vals[0], lo, hi, 4*len(plot))/4
	}
	for r, row := range plot {
		axis := ""
		switch {
		case !ok: // no value yet: no range to label either
		case lineRow >= 0:
			if r == lineRow {
				axis = s.format(vals[0])
			}
		case r == 0:
			axis = s.format(hi)
		case r == len(plot)-1:
			axis = s.format(lo)
		}
		out = append(out, row+styleDim.Render(fmt.Sprintf(" %*s", axisW-1, axis)))
	}
	return block(out, w, h)
}
