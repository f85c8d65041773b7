package prompt

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

const chunkSample = `"""Module doc.

more"""
import os


# helper for things
@decorator
@other
def alpha(x):
    s = """
not a boundary
"""
    return s


CONSTANT = 1


class Beta:
    """Doc."""

    attr = 1

    def one(self):
        return 1

    @property
    def two(self):
        return 2


async def gamma():
    pass
`

// lineCount counts a text's lines: an easy token count to reason about.
func lineCount(s string) int { return strings.Count(s, "\n") + 1 }

// rangeLines is lineCount of lines [from, to).
func rangeLines(from, to int) int { return to - from }

func TestPythonChunks(t *testing.T) {
	lines := splitLines(chunkSample)
	type c struct {
		kind, name string
		start, end int
	}
	var got []c
	for _, ch := range fileChunks("m.py", lines) {
		got = append(got, c{ch.Kind, ch.Name, ch.Start, ch.End})
	}
	want := []c{{"code", "", 0, 6}, {"def", "alpha", 6, 16}, {"code", "", 16, 19}, {"class", "Beta", 19, 32}, {"def", "gamma", 32, 34}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("chunks\n%v\nwant\n%v", got, want)
	}
	var units []string
	for _, u := range fileUnits("m.py", lines, 10, rangeLines) { // Beta's 13 lines are too many
		units = append(units, u.Name+" "+LineRange{u.Start, u.End}.String())
	}
	wantUnits := []string{"L1-6 L1-6", "def alpha L7-16", "L17-19 L17-19", "class Beta L20-24", "Beta.one L25-27", "Beta.two L28-32", "def gamma L33-34"}
	if !slices.Equal(units, wantUnits) {
		t.Fatalf("units %q, want %q", units, wantUnits)
	}
	if n := len(fileUnits("m.py", lines, 20, rangeLines)); n != 5 {
		t.Fatalf("a class that fits is one unit: %d units", n)
	}
	// Other languages split where a line at column 0 follows a blank one.
	para := paragraphChunks(splitLines("int a;\n\nint f() {\n  return 1;\n}\n\nint g() {\n\n  return 2;\n}\n"))
	if len(para) != 3 || para[1].Start != 2 || para[2].Start != 6 || para[2].End != 10 {
		t.Fatalf("paragraph chunks %+v", para)
	}
}

func TestPickChunks(t *testing.T) {
	lines := splitLines(chunkSample)
	tests := []struct {
		name   string
		query  string
		budget int
		shown  []LineRange
		text   string
		elided []string
	}{
		{"the function the issue names, the rest marked", "gamma is slow", 8, []LineRange{{32, 34}},
			"... [32 lines not shown]\nasync def gamma():\n    pass\n", nil},
		{"a method of a class too big to show whole, with its header; then what else fits", "the two property", 16, []LineRange{{19, 24}, {27, 34}},
			"... [19 lines not shown]\nclass Beta:\n    \"\"\"Doc.\"\"\"\n\n    attr = 1\n\n    ... [3 lines not shown]\n" +
				"    @property\n    def two(self):\n        return 2\n\n\nasync def gamma():\n    pass\n",
			[]string{"L1-6", "def alpha", "L17-19", "Beta.one"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pick, ok := pickChunks("m.py", lines, BM25Terms(tt.query), tt.budget, lineCount)
			if !ok {
				t.Fatal("nothing fits")
			}
			if !reflect.DeepEqual(pick.Shown, tt.shown) || pick.Text != tt.text {
				t.Fatalf("shown %v\n%s\nwant %v\n%s", pick.Shown, pick.Text, tt.shown, tt.text)
			}
			if lineCount(pick.Text) > tt.budget {
				t.Fatalf("%d tokens, budget %d", lineCount(pick.Text), tt.budget)
			}
			if tt.elided != nil && !slices.Equal(pick.Elided, tt.elided) {
				t.Fatalf("elided %q, want %q", pick.Elided, tt.elided)
			}
		})
	}
	// Room left after the relevant chunks goes to the others in file order.
	pick, _ := pickChunks("m.py", lines, BM25Terms("gamma"), 16, lineCount)
	if !reflect.DeepEqual(pick.Shown, []LineRange{{0, 6}, {16, 19}, {32, 34}}) {
		t.Fatalf("filled %v", pick.Shown)
	}
	// A module head within a quarter of the budget goes first.
	pick, _ = pickChunks("m.py", lines, BM25Terms("gamma"), 30, lineCount)
	if !reflect.DeepEqual(pick.Shown, []LineRange{{0, 19}, {32, 34}}) || pick.Chunks[0] != "L1-6" {
		t.Fatalf("head first: %v %q", pick.Shown, pick.Chunks)
	}
	if _, ok := pickChunks("m.py", lines, BM25Terms("gamma"), 3, lineCount); ok {
		t.Fatal("a budget nothing fits in picked something")
	}
}

func TestElisionLine(t *testing.T) {
	l := ElisionLine("    ", 12)
	if l != "    ... [12 lines not shown]" || !IsElisionLine(l) || IsElisionLine("x = 1  # ... [1 lines not shown]") {
		t.Fatalf("%q", l)
	}
	if got := renderShown([]string{"a", "  b", "  c", "d"}, []LineRange{{0, 1}, {3, 4}}); got != "a\n  ... [2 lines not shown]\nd\n" {
		t.Fatalf("%q", got)
	}
	if got := tripleQuote(`x = """a""" + '''`, ""); got != `'''` {
		t.Fatalf("open quote %q", got)
	}
}
