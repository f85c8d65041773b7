package ui

import (
	"reflect"
	"testing"
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
		"plain":                    "plain",
		"a\tb":                     "a    b",
		"\x1b[31mred\x1b[0m":       "red",
		"bell\a and \x1b[2J clear": "bell? and  clear",
		"carriage\rreturn":         "carriage?return",
		"©":                        "©",
	}
	for in, want := range cases {
		if got := clean(in); got != want {
			t.Errorf("clean(%q) = %q, want %q", in, got, want)
		}
	}
}
