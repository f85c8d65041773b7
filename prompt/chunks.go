package prompt

import (
	"fmt"
	"math"
	"path"
	"regexp"
	"slices"
	"strings"
)

// A file longer than what is left of the prompt's budget is shown as whole
// chunks, chosen by relevance to the issue: top-level functions and classes
// (for a class too big to show whole, its header and whole methods), in
// file order, each gap marked by one ElisionLine. The first lines of a file
// are rarely where its bug is.

// LineRange is lines [Start, End) of a file, counted from 0.
type LineRange struct{ Start, End int }

func (r LineRange) String() string { return fmt.Sprintf("L%d-%d", r.Start+1, r.End) }

// codeChunk is a unit shown whole or not at all.
type codeChunk struct {
	Name       string
	Start, End int
	Kind       string // "def", "class", "code"
	// Parent is the index of the chunk that is shown with this one (a
	// method's class header), -1 for none.
	Parent int
}

// ElisionLine marks n lines left out of a file, indented like the first of
// them so the shown code keeps its shape.
func ElisionLine(indent string, n int) string {
	return fmt.Sprintf("%s... [%d lines not shown]", indent, n)
}

var elisionRe = regexp.MustCompile(`^\s*\.\.\. \[\d+ lines not shown\]$`)

// IsElisionLine reports whether a line of a shown file is an ElisionLine,
// not code of the file.
func IsElisionLine(l string) bool { return elisionRe.MatchString(l) }

// splitLines splits a file into lines without their newlines.
func splitLines(text string) []string {
	return strings.Split(strings.TrimSuffix(text, "\n"), "\n")
}

func isPython(p string) bool {
	ext := path.Ext(p)
	return ext == ".py" || ext == ".pyi"
}

// fileChunks splits a file into top-level chunks that cover it in order.
func fileChunks(p string, lines []string) []codeChunk {
	if isPython(p) {
		return pythonChunks(lines, 0, len(lines), "")
	}
	return paragraphChunks(lines)
}

// paragraphChunks splits a file of any language where a line at column 0
// follows a blank one: functions and blocks in most code, sections in text.
func paragraphChunks(lines []string) []codeChunk {
	out := []codeChunk{{Start: 0, Kind: "code", Parent: -1}}
	for i := 1; i < len(lines); i++ {
		if lines[i] != "" && leading(lines[i]) == "" && strings.TrimSpace(lines[i-1]) == "" {
			out[len(out)-1].End = i
			out = append(out, codeChunk{Start: i, Kind: "code", Parent: -1})
		}
	}
	out[len(out)-1].End = len(lines)
	return out
}

// leading is a line's indentation.
func leading(l string) string { return l[:len(l)-len(strings.TrimLeft(l, " \t"))] }

// pythonChunks splits lines [from, to) at the statements indented by
// exactly indent: a def or class starts a chunk, with the decorators and
// the comment lines right above it; the statements after a def or class
// body start another. Lines inside triple-quoted strings never split.
func pythonChunks(lines []string, from, to int, indent string) []codeChunk {
	var out []codeChunk
	start := func(at int, kind, name string) {
		if n := len(out); n > 0 && out[n-1].Start == at {
			out[n-1].Kind, out[n-1].Name = kind, name
			return
		}
		if n := len(out); n > 0 {
			out[n-1].End = at
		}
		out = append(out, codeChunk{Start: at, Kind: kind, Name: name, Parent: -1})
	}
	start(from, "code", "")
	quote := ""        // the triple quote of the string being read, if any
	commentStart := -1 // first of the comment lines right above this one
	decorated := false // the chunk began with decorators and awaits its def
	for i := from; i < to; i++ {
		l := lines[i]
		if quote != "" {
			quote = tripleQuote(l, quote)
			continue
		}
		trimmed := strings.TrimSpace(l)
		if trimmed == "" || leading(l) != indent {
			commentStart = -1
			quote = tripleQuote(l, "")
			continue
		}
		at := i
		if commentStart >= 0 {
			at = commentStart
		}
		switch kind, name := pythonStatement(trimmed); {
		case kind == "comment":
			if commentStart < 0 {
				commentStart = i
			}
		case kind == "decorator":
			if !decorated {
				start(at, "def", "")
				decorated = true
			}
			commentStart = -1
		case kind == "def" || kind == "class":
			if decorated {
				out[len(out)-1].Kind, out[len(out)-1].Name = kind, name
				decorated = false
			} else {
				start(at, kind, name)
			}
			commentStart = -1
		default:
			if cur := out[len(out)-1].Kind; cur != "code" {
				start(at, "code", "")
			}
			decorated, commentStart = false, -1
		}
		quote = tripleQuote(l, "")
	}
	out[len(out)-1].End = to
	return out
}

var pyDefRe = regexp.MustCompile(`^(?:async\s+)?(def|class)\s+(\w+)`)

// pythonStatement classifies a statement's first line.
func pythonStatement(trimmed string) (kind, name string) {
	switch {
	case strings.HasPrefix(trimmed, "#"):
		return "comment", ""
	case strings.HasPrefix(trimmed, "@"):
		return "decorator", ""
	}
	if m := pyDefRe.FindStringSubmatch(trimmed); m != nil {
		return m[1], m[2]
	}
	return "code", ""
}

// tripleQuote returns the triple quote still open at the end of l, given
// the one open at its start ("" for none). Quotes inside comments and
// one-line strings are not told apart: near enough to keep a docstring in
// one chunk.
func tripleQuote(l, open string) string {
	for {
		if open != "" {
			k := strings.Index(l, open)
			if k < 0 {
				return open
			}
			l, open = l[k+3:], ""
			continue
		}
		d, s := strings.Index(l, `"""`), strings.Index(l, `'''`)
		switch {
		case d < 0 && s < 0:
			return ""
		case s < 0 || (d >= 0 && d < s):
			l, open = l[d+3:], `"""`
		default:
			l, open = l[s+3:], `'''`
		}
	}
}

// fileUnits are the chunks the selection picks from, named as `swetui
// prompt` shows them: a file's top-level chunks, with each Python class
// whose text counts more than maxTokens split into its header and its
// methods (each shown with the header).
func fileUnits(p string, lines []string, maxTokens int, cost func(from, to int) int) []codeChunk {
	var out []codeChunk
	for _, c := range fileChunks(p, lines) {
		if c.Kind == "class" && isPython(p) && cost(c.Start, c.End) > maxTokens {
			if parts := classUnits(lines, c, len(out)); len(parts) > 1 {
				out = append(out, parts...)
				continue
			}
		}
		switch c.Kind {
		case "def", "class":
			c.Name = c.Kind + " " + c.Name
		default:
			c.Name = LineRange{c.Start, c.End}.String()
		}
		out = append(out, c)
	}
	return out
}

// classUnits splits a class chunk one level in: its header (decorators,
// class line, docstring, attributes) at index at, then its members, each
// with the header as Parent. A class without methods stays whole.
func classUnits(lines []string, c codeChunk, at int) []codeChunk {
	head := c.Start
	for head < c.End && pyDefRe.FindStringSubmatch(strings.TrimSpace(lines[head])) == nil {
		head++ // past decorators and comments to the class line
	}
	body := ""
	for i := head + 1; i < c.End; i++ {
		if strings.TrimSpace(lines[i]) != "" {
			body = leading(lines[i])
			break
		}
	}
	if body == "" {
		return []codeChunk{c}
	}
	members := pythonChunks(lines, head+1, c.End, body)
	if !slices.ContainsFunc(members, func(m codeChunk) bool { return m.Kind == "def" }) {
		return []codeChunk{c}
	}
	header := codeChunk{Name: "class " + c.Name, Start: c.Start, End: members[0].Start, Kind: "class", Parent: -1}
	if members[0].Kind == "code" { // docstring and attributes before the first method
		header.End = members[0].End
		members = members[1:]
	}
	out := []codeChunk{header}
	for _, m := range members {
		m.Parent = at
		if m.Kind == "code" {
			m.Name = c.Name + " " + LineRange{m.Start, m.End}.String()
		} else {
			m.Name = c.Name + "." + m.Name
		}
		out = append(out, m)
	}
	return out
}

func joinLines(lines []string, from, to int) string {
	return strings.Join(lines[from:to], "\n")
}

// renderShown is the file's text with only the lines in shown (sorted,
// disjoint), each gap replaced by one ElisionLine.
func renderShown(lines []string, shown []LineRange) string {
	var b strings.Builder
	gap := func(from, to int) {
		if from >= to {
			return
		}
		indent := ""
		for i := from; i < to; i++ {
			if strings.TrimSpace(lines[i]) != "" {
				indent = leading(lines[i])
				break
			}
		}
		b.WriteString(ElisionLine(indent, to-from) + "\n")
	}
	at := 0
	for _, r := range shown {
		gap(at, r.Start)
		for _, l := range lines[r.Start:r.End] {
			b.WriteString(l + "\n")
		}
		at = r.End
	}
	gap(at, len(lines))
	return b.String()
}

// mergeRanges sorts ranges and joins those that touch.
func mergeRanges(rs []LineRange) []LineRange {
	rs = slices.Clone(rs)
	slices.SortFunc(rs, func(a, b LineRange) int { return a.Start - b.Start })
	var out []LineRange
	for _, r := range rs {
		if n := len(out); n > 0 && r.Start <= out[n-1].End {
			out[n-1].End = max(out[n-1].End, r.End)
			continue
		}
		out = append(out, r)
	}
	return out
}

// chunkPick is the outcome of fitting a file by chunks.
type chunkPick struct {
	Shown          []LineRange
	Chunks, Elided []string
	Text           string
	Tokens         int // Text's
}

// pickChunks chooses whole units of a file whose shown text (ElisionLines
// included) counts at most budget tokens: the units ranked by BM25 against
// query (the units of this file are the documents), best first, each taken
// when it still fits with its class header; ties and units the issue does
// not name at all go in file order. A short module head goes first. ok is
// false when no unit fits.
func pickChunks(p string, lines []string, query []string, budget int, count func(string) int) (chunkPick, bool) {
	memo := map[LineRange]int{}
	cost := func(from, to int) int {
		r := LineRange{from, to}
		if n, ok := memo[r]; ok {
			return n
		}
		memo[r] = count(joinLines(lines, from, to))
		return memo[r]
	}
	units := fileUnits(p, lines, budget/2, cost)
	docs := make([][]string, len(units))
	costs := make([]int, len(units))
	for i, u := range units {
		docs[i], costs[i] = BM25Terms(joinLines(lines, u.Start, u.End)), cost(u.Start, u.End)
	}
	scores := NewBM25Index(docs).Scores(query)
	order := make([]int, len(units))
	for i := range order {
		order[i] = i
	}
	// A module's head (docstring, imports) that takes at most a quarter of
	// the budget goes first: it says what the names in the rest are, and
	// imports change with many fixes.
	if units[0].Kind == "code" && units[0].Parent == -1 && costs[0] <= budget/4 {
		scores[0] = math.Inf(1)
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case scores[a] > scores[b]:
			return -1
		case scores[a] < scores[b]:
			return 1
		}
		return 0
	})
	marker := count(ElisionLine("    ", len(lines))) + 1
	picked := make([]bool, len(units))
	// A gap (a run of units not shown) costs an ElisionLine; gapsWith is
	// how many there are once unit j is shown too.
	gaps := 1
	gapsWith := func(j, g int) int {
		left := j > 0 && !picked[j-1]
		right := j+1 < len(units) && !picked[j+1]
		switch {
		case left && right:
			return g + 1
		case !left && !right:
			return g - 1
		}
		return g
	}
	var taken []int
	used := 0 // the tokens of the units taken
	try := func(ids ...int) {
		g, extra := gaps, 0
		for _, j := range ids {
			g = gapsWith(j, g)
			picked[j] = true
			extra += costs[j]
		}
		if used+extra+marker*g > budget {
			for _, j := range ids {
				picked[j] = false
			}
			return
		}
		used, gaps = used+extra, g
		taken = append(taken, ids...)
	}
	for _, i := range order {
		switch par := units[i].Parent; {
		case picked[i]:
		case par >= 0 && !picked[par]:
			try(par, i)
		default:
			try(i)
		}
	}
	// The estimate counts every unit's tokens apart; the rendered text is
	// what must fit, so drop the last taken units until it does.
	for len(taken) > 0 {
		pick := renderPick(units, lines, picked)
		if pick.Tokens = count(pick.Text); pick.Tokens <= budget {
			return pick, true
		}
		last := taken[len(taken)-1]
		taken = taken[:len(taken)-1]
		picked[last] = false
		if par := units[last].Parent; par >= 0 && !slices.ContainsFunc(taken, func(j int) bool { return units[j].Parent == par }) {
			picked[par] = false
			taken = slices.DeleteFunc(taken, func(j int) bool { return j == par })
		}
	}
	return chunkPick{}, false
}

func renderPick(units []codeChunk, lines []string, picked []bool) chunkPick {
	var pick chunkPick
	var rs []LineRange
	for i, u := range units {
		if picked[i] {
			rs = append(rs, LineRange{u.Start, u.End})
			pick.Chunks = append(pick.Chunks, u.Name)
		} else {
			pick.Elided = append(pick.Elided, u.Name)
		}
	}
	pick.Shown = mergeRanges(rs)
	pick.Text = renderShown(lines, pick.Shown)
	return pick
}

// describeRanges writes ranges as "L1-20, L40-80".
func describeRanges(rs []LineRange) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = r.String()
	}
	return strings.Join(parts, ", ")
}
