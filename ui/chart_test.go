package ui

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/charmbracelet/x/ansi"
	"github.com/swetui/swetui/event"
)

func TestRing(t *testing.T) {
	r := newRing[int](3)
	if _, ok := r.Last(); ok {
		t.Fatal("empty ring has a last value")
	}
	for i := 1; i <= 5; i++ {
		r.Push(i)
	}
	got := []int{}
	for i := 0; i < r.Len(); i++ {
		got = append(got, r.At(i))
	}
	if !reflect.DeepEqual(got, []int{3, 4, 5}) || r.Total() != 5 {
		t.Fatalf("ring holds %v (total %d)", got, r.Total())
	}
	if v, _ := r.Last(); v != 5 {
		t.Fatalf("last %d", v)
	}
	r.Set(0, 9)
	if r.At(0) != 9 {
		t.Fatal("Set")
	}
}

func TestBucket(t *testing.T) {
	at := func(v []float64) func(int) float64 { return func(i int) float64 { return v[i] } }
	cases := []struct {
		name    string
		in      []float64
		m       int
		stretch bool
		want    []float64
	}{
		{"fewer kept", []float64{1, 2}, 4, false, []float64{1, 2}},
		{"means", []float64{1, 3, 5, 7}, 2, false, []float64{2, 6}},
		{"uneven", []float64{1, 2, 3, 4, 5}, 2, false, []float64{1.5, 4}},
		{"stretched", []float64{0, 3}, 4, true, []float64{0, 1, 2, 3}},
		{"one value not stretched", []float64{2}, 4, true, []float64{2}},
		{"none", nil, 4, false, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := bucket(len(c.in), c.m, c.stretch, at(c.in)); !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got %v, want %v", got, c.want)
			}
		})
	}
}

func TestSparklineAndBraille(t *testing.T) {
	if got := sparkline([]float64{0, 0.5, 1}, 0, 1, 4); got != "▁▅█ " {
		t.Fatalf("sparkline %q", got)
	}
	// A rising line over 2x1 cells: dots at the bottom left, top right.
	got := braille([]float64{0, 1 / 3.0, 2 / 3.0, 1}, 0, 1, 2, 1)
	if want := []string{"⡠⠊"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("braille %q, want %q", got, want)
	}
	lo, hi := bounds([]float64{2, 2}, nil)
	if !(lo < 2 && hi > 2) {
		t.Fatalf("flat series bounds %v..%v", lo, hi)
	}
}

func TestClean(t *testing.T) {
	cases := map[string]string{
		"plain":                     "plain",
		"a\tb":                      "a    b",
		"\x1b[31mred\x1b[0m":        "red",
		"bell\a and \x1b[2J clear":  "bell? and  clear",
		"carriage\rreturn":          "carriage?return",
		"©":                         "©",
		"invalid \xff bytes":        "invalid \ufffd bytes",
		"soft\u00adhyphen":          "soft?hyphen",
		"zero\u200bwidth\u200djoin": "zero?width?join",
		"e\u0301":                   "e?",
		"line\u2028sep":             "line?sep",
		"\ufeffbom":                 "?bom",
		"rtl \u202eoverride":        "rtl ?override",
		"emoji 😀 👍🏻 🇫🇷 ❤️":          "emoji ? ?? ?? ❤?",
		"中文 かな ＡＢ 한국":               "中文 かな ＡＢ 한국",
		"private \ue000 use":        "private ? use",
		"c1 \u0085 \u009b":          "c1 ? ?",
	}
	for in, want := range cases {
		if got := clean(in); got != want {
			t.Errorf("clean(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestSafeRunes: every rune safeRune accepts is as wide alone as between
// letters, beside itself and beside a wide rune: it joins nothing.
func TestSafeRunes(t *testing.T) {
	n := 0
	for r := rune(0); r <= 0x10ffff; r++ {
		if !safeRune(r) {
			continue
		}
		n++
		s := string(r)
		w := ansi.StringWidth(s)
		for _, probe := range []string{"a" + s + "a", s + s, "中" + s + "中", s + "\u3042"} {
			want := w * strings.Count(probe, s)
			for _, o := range probe {
				if o != r {
					want += ansi.StringWidth(string(o))
				}
			}
			if got := ansi.StringWidth(probe); got != want {
				t.Errorf("%U (%q): %q is %d cells, want %d", r, s, probe, got, want)
			}
		}
	}
	if n < 50000 {
		t.Fatalf("only %d safe runes", n)
	}
}

// TestCleanWidth: whatever bytes come in (a byte-level model samples any),
// clean's output is runes that every terminal draws in the cells
// ansi.StringWidth counts, one by one, none joining the next.
func TestCleanWidth(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tricky := []string{"\u200d", "\ufe0f", "\u0301", "\U0001F3FB", "\U0001F1EB", "\u1161", "\u11a8", "\r", "\x1b[", "\xe2\x80", "😀", "中"}
	for i := 0; i < 2000; i++ {
		var b strings.Builder
		for j := rng.IntN(40); j > 0; j-- {
			if rng.IntN(3) == 0 {
				b.WriteString(tricky[rng.IntN(len(tricky))])
			} else {
				b.WriteByte(byte(rng.IntN(256)))
			}
		}
		in := b.String()
		out := clean(in)
		sum := 0
		for _, r := range out {
			if !safeRune(r) && r != utf8.RuneError {
				t.Fatalf("clean(%q) = %q keeps %U", in, out, r)
			}
			sum += ansi.StringWidth(string(r))
		}
		if w := ansi.StringWidth(out); w != sum || !utf8.ValidString(out) {
			t.Fatalf("clean(%q) = %q: width %d, runes %d cells", in, out, w, sum)
		}
	}
}

// TestFlatSeries: a constant series draws as a line (on the floor when it is
// zero, mid-height otherwise) with its value beside it, not as a bar of
// constant height between invented bounds.
func TestFlatSeries(t *testing.T) {
	cases := []struct {
		name      string
		m         event.Metrics
		label     string // the chart's label
		spark     string // its sparkline's first cells
		value     string // the value drawn beside its line
		lineRow   int    // the plot row (from the top, of 4) with the line
		forbidden []string
	}{
		{"zero kl", event.Metrics{KL: 0}, "kl", "▁▁▁▁", "0.0000", 3, []string{"0.5000", "-0.5000", "1.0000"}},
		{"constant reward max", event.Metrics{RewardMax: 0.3}, "reward max", "────", "0.300", 1, []string{"0.450", "0.150"}},
		{"tiny kl", event.Metrics{KL: 3e-7}, "kl", "────", "3.0e-07", 1, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var evs []event.Event
			for s := 1; s <= 30; s++ {
				evs = append(evs, event.StepFinished{Step: s, Metrics: c.m, Duration: time.Second})
			}
			// Compact (80x24): sparklines.
			m := newTestModel(&fakeCtrl{}, 80, 24)
			feed(m, evs...)
			var line string
			for _, l := range m.rewards.Lines() {
				if strings.HasPrefix(strings.TrimSpace(l), c.label+" ") {
					line = l
				}
			}
			if !strings.Contains(line, c.spark) || !strings.Contains(line, c.value) {
				t.Errorf("sparkline %q, want %q and %q", line, c.spark, c.value)
			}
			// Charts (the pane zoomed at 200x50: 5 lines a chart).
			m = newTestModel(&fakeCtrl{}, 200, 50)
			feed(m, evs...)
			focusOn(t, m, "Rewards")
			press(m, "enter")
			idx := -1
			for i, s := range m.rewards.charts() {
				if s.label == c.label {
					idx = i
				}
			}
			chart := m.rewards.chart(m.rewards.charts()[idx], idx, 99, 5)
			plot := chart[1:]
			for r, row := range plot {
				dots := strings.Trim(row[:strings.LastIndex(row, "⠀")+len("⠀")], "⠀")
				if (dots != "") != (r == c.lineRow) {
					t.Errorf("row %d %q: the line should be on row %d only", r, row, c.lineRow)
				}
				if (r == c.lineRow) != strings.HasSuffix(strings.TrimRight(row, " "), " "+c.value) {
					t.Errorf("row %d %q: the value %s belongs beside the line, on row %d", r, row, c.value, c.lineRow)
				}
			}
			for _, f := range c.forbidden {
				if strings.Contains(strings.Join(chart, "\n"), f) {
					t.Errorf("chart labels an invented bound %s:\n%s", f, strings.Join(chart, "\n"))
				}
			}
		})
	}
}
