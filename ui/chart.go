package ui

import (
	"math"
	"strings"
)

// Charts are drawn here rather than with a chart library: a braille line
// chart and a sparkline are a few dozen lines, cost O(width) per frame
// whatever the history's length (series are bucketed first), and give exact,
// colourless output for the goldens.

// bucket reduces n values (read through at) to at most m bucket means, so a
// chart costs the same for 100 steps or 10,000. With stretch, fewer than m
// values are interpolated to m, so that a young run fills the chart.
func bucket(n, m int, stretch bool, at func(int) float64) []float64 {
	if n <= 0 || m <= 0 {
		return nil
	}
	if n <= m && (!stretch || n < 2) {
		out := make([]float64, n)
		for i := range out {
			out[i] = at(i)
		}
		return out
	}
	if n < m {
		out := make([]float64, m)
		for j := range out {
			x := float64(j) * float64(n-1) / float64(m-1)
			i := min(int(x), n-2)
			f := x - float64(i)
			out[j] = at(i)*(1-f) + at(i+1)*f
		}
		return out
	}
	out := make([]float64, m)
	for b := range out {
		lo, hi := b*n/m, (b+1)*n/m
		sum := 0.0
		for i := lo; i < hi; i++ {
			sum += at(i)
		}
		out[b] = sum / float64(hi-lo)
	}
	return out
}

// bounds returns the range to draw vals in; fixed is used when set.
func bounds(vals []float64, fixed *[2]float64) (lo, hi float64) {
	if fixed != nil {
		return fixed[0], fixed[1]
	}
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, v := range vals {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	if lo > hi {
		return 0, 1
	}
	if hi-lo < flatEps {
		// A flat series sits mid-chart, in a range that keeps its sign;
		// a flat zero (no KL, no loss yet) lies on the floor of [0, 1].
		if lo == 0 {
			return 0, 1
		}
		pad := math.Abs(lo) / 2
		return lo - pad, hi + pad
	}
	return lo, hi
}

const flatEps = 1e-12

// flat is whether vals (with at least one number) are all the same.
func flat(vals []float64) bool {
	lo, hi, n := math.Inf(1), math.Inf(-1), 0
	for _, v := range vals {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		lo, hi, n = math.Min(lo, v), math.Max(hi, v), n+1
	}
	return n > 0 && hi-lo < flatEps
}

// flatSpark draws a flat series as a line: on the floor when it is zero,
// mid-height otherwise (a bar of constant height would read as a level).
func flatSpark(vals []float64, w int) string {
	var b strings.Builder
	for i := 0; i < w; i++ {
		switch {
		case i >= len(vals) || math.IsNaN(vals[i]):
			b.WriteByte(' ')
		case vals[i] == 0:
			b.WriteRune('▁')
		default:
			b.WriteRune('─')
		}
	}
	return b.String()
}

// level maps v in [lo, hi] to 0..steps-1.
func level(v, lo, hi float64, steps int) int {
	if math.IsNaN(v) {
		return -1
	}
	f := (v - lo) / (hi - lo)
	l := int(math.Round(f * float64(steps-1)))
	return max(0, min(steps-1, l))
}

var sparks = []rune("▁▂▃▄▅▆▇█")

// sparkline draws one rune per value, left-aligned, padded to w.
func sparkline(vals []float64, lo, hi float64, w int) string {
	var b strings.Builder
	for i := 0; i < w; i++ {
		if i >= len(vals) || level(vals[i], lo, hi, len(sparks)) < 0 {
			b.WriteByte(' ')
			continue
		}
		b.WriteRune(sparks[level(vals[i], lo, hi, len(sparks))])
	}
	return b.String()
}

// braille draws vals as a connected line in a w x h grid of braille cells
// (2 x 4 dots each): value i is dot column i.
func braille(vals []float64, lo, hi float64, w, h int) []string {
	if w <= 0 || h <= 0 {
		return nil
	}
	grid := make([][]rune, h)
	for r := range grid {
		grid[r] = make([]rune, w)
		for c := range grid[r] {
			grid[r][c] = 0x2800
		}
	}
	// Dot bits of a braille cell by (column, row from the top).
	bits := [2][4]rune{{0x01, 0x02, 0x04, 0x40}, {0x08, 0x10, 0x20, 0x80}}
	rows := 4 * h
	set := func(x, y int) { // y counts from the bottom
		yy := rows - 1 - y
		grid[yy/4][x/2] |= bits[x%2][yy%4]
	}
	prev := -1
	for x := 0; x < len(vals) && x < 2*w; x++ {
		y := level(vals[x], lo, hi, rows)
		if y < 0 {
			prev = -1
			continue
		}
		if prev < 0 {
			set(x, y)
		} else {
			// Join to the previous dot with a vertical run in this column.
			a, b := min(prev, y), max(prev, y)
			if a < b {
				if prev < y {
					a++
				} else {
					b--
				}
			}
			for yy := a; yy <= b; yy++ {
				set(x, yy)
			}
			set(x, y)
		}
		prev = y
	}
	out := make([]string, h)
	for r := range grid {
		out[r] = string(grid[r])
	}
	return out
}
