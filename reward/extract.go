package reward

import (
	"sort"
	"strings"
)

// Diff forms: how a diff was found in a completion.
const (
	FormFenced = "fenced" // a ```diff or ```patch block (or an untagged fence holding a diff)
	FormTagged = "tagged" // <patch>...</patch>
	FormBare   = "bare"   // diff text outside any fence or tag
	FormNone   = "none"
)

// Extraction is the diff found in a completion.
type Extraction struct {
	Diff  string // normalised: LF line endings, ends with a newline; "" when none
	Form  string // FormFenced, FormTagged, FormBare or FormNone
	Patch *Patch // the parsed diff when it is well formed
	Err   error  // the first candidate's syntax error when none was well formed
	// Partial is, with Err, what could be read of Diff (ReadDiff): the hack
	// check reads it, so that a broken diff is parsed once too.
	Partial *Patch
	// Candidates counts the diff-looking blocks seen.
	Candidates int
}

// Valid reports a well-formed, non-empty diff.
func (e Extraction) Valid() bool { return e.Patch != nil && len(e.Patch.Files) > 0 }

type candidate struct {
	pos, end int // the block's span in the completion, fences or tags included
	form     string
	text     string
}

// Extract finds the diff in a model completion: fenced diff/patch blocks,
// <patch> tags, or a bare diff. With several candidates the first well-formed
// one (in text order) wins; if none is well formed the first candidate is
// returned with its syntax error, so the result still says what was tried.
func Extract(completion string) Extraction {
	text := normaliseNewlines(completion)
	cands := fencedCandidates(text)
	cands = append(cands, taggedCandidates(text)...)
	cands = append(cands, bareCandidates(text, cands)...)
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].pos < cands[j].pos })
	if len(cands) == 0 {
		return Extraction{Form: FormNone}
	}
	var first Extraction
	for i, c := range cands {
		diff := repairFinalNewline(c.text)
		read := ValidateDiff
		if i == 0 {
			read = ReadDiff // the same verdict, and what it read if it is broken
		}
		p, err := read(diff)
		if err == nil {
			return Extraction{Diff: diff, Form: c.form, Patch: p, Candidates: len(cands)}
		}
		if i == 0 {
			first = Extraction{Diff: diff, Form: c.form, Err: err, Partial: p, Candidates: len(cands)}
		}
	}
	return first
}

// NormalizeDiff applies the line-ending and final-newline repairs of Extract
// to a diff given as such (a prediction's model_patch).
func NormalizeDiff(diff string) string {
	return repairFinalNewline(normaliseNewlines(diff))
}

func normaliseNewlines(s string) string {
	if !strings.Contains(s, "\r") {
		return s
	}
	s = strings.ReplaceAll(s, "\r\n", "\n")
	return strings.ReplaceAll(s, "\r", "\n")
}

// repairFinalNewline gives the diff the final newline that a truncated or
// trimmed completion loses, a classic reason for "corrupt patch".
func repairFinalNewline(s string) string {
	if s == "" || strings.HasSuffix(s, "\n") {
		return s
	}
	return s + "\n"
}

// fencedCandidates finds ``` or ~~~ blocks tagged diff/patch (or untagged
// ones whose body starts like a diff). An unclosed fence runs to the end, as
// in a truncated completion.
func fencedCandidates(text string) []candidate {
	var out []candidate
	pos := 0
	for pos < len(text) {
		lineEnd := strings.IndexByte(text[pos:], '\n')
		line := text[pos:]
		next := len(text)
		if lineEnd >= 0 {
			line = text[pos : pos+lineEnd]
			next = pos + lineEnd + 1
		}
		trimmed := strings.TrimLeft(line, " ")
		fence := fenceRun(trimmed)
		if fence == "" || len(line)-len(trimmed) > 3 {
			pos = next
			continue
		}
		info := strings.ToLower(strings.TrimSpace(trimmed[len(fence):]))
		if strings.ContainsAny(info, "`") {
			pos = next
			continue
		}
		bodyStart := next
		bodyEnd, after := closeFence(text, bodyStart, fence)
		body := text[bodyStart:bodyEnd]
		lang, _, _ := strings.Cut(info, " ")
		switch {
		case lang == "diff" || lang == "patch" || lang == "udiff":
			out = append(out, candidate{pos, after, FormFenced, body})
		case lang == "" && looksLikeDiff(body):
			out = append(out, candidate{pos, after, FormFenced, body})
		}
		pos = after
	}
	return out
}

// fenceRun returns the leading run of at least three backticks or tildes.
func fenceRun(s string) string {
	if len(s) < 3 || (s[0] != '`' && s[0] != '~') {
		return ""
	}
	i := 0
	for i < len(s) && s[i] == s[0] {
		i++
	}
	if i < 3 {
		return ""
	}
	return s[:i]
}

// closeFence finds the line closing a fence opened with fence: the same
// character, at least as many, nothing else on the line.
func closeFence(text string, from int, fence string) (bodyEnd, after int) {
	pos := from
	for pos < len(text) {
		lineEnd := strings.IndexByte(text[pos:], '\n')
		line := text[pos:]
		next := len(text)
		if lineEnd >= 0 {
			line = text[pos : pos+lineEnd]
			next = pos + lineEnd + 1
		}
		t := strings.TrimSpace(line)
		if r := fenceRun(t); r != "" && r[0] == fence[0] && len(r) >= len(fence) && len(r) == len(t) {
			return pos, next
		}
		pos = next
	}
	return len(text), len(text)
}

func looksLikeDiff(body string) bool {
	b := strings.TrimLeft(body, "\n")
	return strings.HasPrefix(b, "diff --git ") || (strings.HasPrefix(b, "--- ") && strings.Contains(b, "\n+++ "))
}

func taggedCandidates(text string) []candidate {
	var out []candidate
	pos := 0
	for {
		i := strings.Index(text[pos:], "<patch>")
		if i < 0 {
			return out
		}
		start := pos + i
		bodyStart := start + len("<patch>")
		j := strings.Index(text[bodyStart:], "</patch>")
		bodyEnd := len(text)
		if j >= 0 {
			bodyEnd = bodyStart + j
		}
		body := strings.TrimPrefix(text[bodyStart:bodyEnd], "\n")
		// A fence inside the tags is a common double wrapping.
		if f := fencedCandidates(body); len(f) > 0 {
			body = f[0].text
		}
		if j < 0 {
			return append(out, candidate{start, len(text), FormTagged, body})
		}
		pos = bodyEnd + len("</patch>")
		out = append(out, candidate{start, pos, FormTagged, body})
	}
}

// bareCandidates finds diffs outside fences and tags: from a line that starts
// a diff to the last line that still continues it.
func bareCandidates(text string, claimed []candidate) []candidate {
	var out []candidate
	spans := append([]candidate(nil), claimed...)
	sort.Slice(spans, func(i, j int) bool { return spans[i].pos < spans[j].pos })
	skip := 0 // offsets only grow: skip the spans that end before off
	covered := func(off int) bool {
		for skip < len(spans) && spans[skip].end <= off {
			skip++
		}
		for _, c := range spans[skip:] {
			if c.pos > off {
				return false
			}
			if off < c.end {
				return true
			}
		}
		return false
	}
	pos := 0
	for pos < len(text) {
		lineEnd := strings.IndexByte(text[pos:], '\n')
		next := len(text)
		if lineEnd >= 0 {
			next = pos + lineEnd + 1
		}
		rest := text[pos:]
		if (strings.HasPrefix(rest, "diff --git ") || (strings.HasPrefix(rest, "--- ") && strings.HasPrefix(text[next:], "+++ "))) && !covered(pos) {
			_, end, err := parseDiff(rest, parsePrefix)
			if err != nil || end == 0 {
				end = len(rest)
				if err != nil {
					// keep the failing text whole so its error is reported
					return append(out, candidate{pos, len(text), FormBare, rest})
				}
			}
			out = append(out, candidate{pos, pos + end, FormBare, rest[:end]})
			pos += end
			continue
		}
		pos = next
	}
	return out
}
