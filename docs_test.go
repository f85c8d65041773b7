package main

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// The documentation is README.md and the pages under docs/. These tests keep
// its relative links honest: every file or folder a link names exists, and
// every #anchor names a heading of the page it points into, as GitHub
// renders it.

// docFiles lists README.md and every docs/*.md, relative to the repository
// root (the package's folder, where go test runs).
func docFiles(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join("docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"README.md"}, pages...)
}

// mdLine is one line of a markdown file outside its fenced code blocks.
type mdLine struct {
	num  int // 1-based
	text string
}

// fence reports whether line opens or closes a fenced code block: up to any
// indentation (fences inside list items are indented), a run of at least
// three backticks or tildes. info says whether text follows the run; a
// closing fence has none.
func fence(line string) (char byte, n int, info bool) {
	s := strings.TrimLeft(line, " \t")
	if len(s) < 3 || (s[0] != '`' && s[0] != '~') {
		return 0, 0, false
	}
	c := s[0]
	for n < len(s) && s[n] == c {
		n++
	}
	if n < 3 {
		return 0, 0, false
	}
	rest := strings.TrimSpace(s[n:])
	if c == '`' && strings.Contains(rest, "`") {
		return 0, 0, false // an inline code span, not a fence
	}
	return c, n, rest != ""
}

// proseLines returns the lines of a markdown text that are not inside fenced
// code blocks (the fence lines themselves left out too). A block closes only
// at a fence of its own character, at least as long, with no info string, so
// a "```diff" line inside a ``` block stays inside it.
func proseLines(text string) []mdLine {
	var out []mdLine
	var open byte
	openLen := 0
	for i, line := range strings.Split(text, "\n") {
		c, n, info := fence(line)
		if open != 0 {
			if c == open && n >= openLen && !info {
				open = 0
			}
			continue
		}
		if c != 0 {
			open, openLen = c, n
			continue
		}
		out = append(out, mdLine{i + 1, line})
	}
	return out
}

// stripCodeSpans removes inline code spans (a run of backticks up to the next
// run of the same length) from a line, so that text such as `](x)` in code
// is not read as a link.
func stripCodeSpans(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		if s[i] != '`' {
			b.WriteByte(s[i])
			i++
			continue
		}
		j := i
		for j < len(s) && s[j] == '`' {
			j++
		}
		run := s[i:j]
		end := -1
		for k := j; k < len(s); {
			if s[k] != '`' {
				k++
				continue
			}
			m := k
			for m < len(s) && s[m] == '`' {
				m++
			}
			if m-k == len(run) {
				end = m
				break
			}
			k = m
		}
		if end < 0 { // unmatched: literal backticks
			b.WriteString(run)
			i = j
			continue
		}
		i = end
	}
	return b.String()
}

var (
	atxHeading = regexp.MustCompile(`^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$`)
	closingSeq = regexp.MustCompile(`(?:^|[ \t]+)#+[ \t]*$`)
	setextLine = regexp.MustCompile(`^ {0,3}(=+|-+)[ \t]*$`)
	inlineLink = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	linkTarget = regexp.MustCompile(`\]\(\s*<?([^)\s>]+)>?(?:\s+(?:"[^"]*"|'[^']*'))?\s*\)`)
	refDef     = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*<?([^\s>]+)>?`)
)

// slug is GitHub's anchor for a heading's text: the text as rendered (link
// syntax reduced to the link's text), lowercased, every character that is not
// a letter, a mark, a digit, '_', '-' or a space dropped, spaces turned into
// '-'.
func slug(heading string) string {
	text := inlineLink.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case unicode.IsLetter(r), unicode.IsMark(r), unicode.IsDigit(r), r == '_', r == '-':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// headingTexts returns the text of every ATX and setext heading of a
// markdown text, in order, outside fenced code blocks.
func headingTexts(text string) []string {
	var out []string
	lines := proseLines(text)
	for i, l := range lines {
		if m := atxHeading.FindStringSubmatch(l.text); m != nil {
			out = append(out, strings.TrimSpace(closingSeq.ReplaceAllString(m[2], "")))
			continue
		}
		if i == 0 || !setextLine.MatchString(l.text) {
			continue
		}
		prev := lines[i-1]
		p := strings.TrimSpace(prev.text)
		if prev.num != l.num-1 || p == "" || atxHeading.MatchString(prev.text) ||
			strings.HasPrefix(p, "|") || strings.HasPrefix(p, "- ") || strings.HasPrefix(p, "* ") ||
			strings.HasPrefix(p, ">") {
			continue
		}
		out = append(out, p)
	}
	return out
}

// anchors returns the set of anchors a markdown text's headings produce: a
// heading's slug, and for the second, third, ... heading of the same slug the
// slug with -1, -2, ... appended, as GitHub numbers them.
func anchors(text string) map[string]bool {
	set := map[string]bool{}
	seen := map[string]int{}
	for _, h := range headingTexts(text) {
		s := slug(h)
		a := s
		if n := seen[s]; n > 0 {
			a = fmt.Sprintf("%s-%d", s, n)
		}
		seen[s]++
		set[a] = true
	}
	return set
}

// docLink is one link target of a markdown file.
type docLink struct {
	line   int
	target string
}

// links returns every inline link and image target (`](target)`) and every
// reference definition (`[name]: target`) of a markdown text outside fenced
// code blocks and inline code spans.
func links(text string) []docLink {
	var out []docLink
	for _, l := range proseLines(text) {
		s := stripCodeSpans(l.text)
		for _, m := range linkTarget.FindAllStringSubmatch(s, -1) {
			out = append(out, docLink{l.num, m[1]})
		}
		if m := refDef.FindStringSubmatch(s); m != nil {
			out = append(out, docLink{l.num, m[1]})
		}
	}
	return out
}

// external reports whether a link target leaves the repository.
func external(target string) bool {
	t := strings.ToLower(target)
	for _, p := range []string{"http:", "https:", "mailto:"} {
		if strings.HasPrefix(t, p) {
			return true
		}
	}
	return false
}

func TestDocsLinksResolve(t *testing.T) {
	files := docFiles(t)
	texts := map[string]string{}
	read := func(path string) (string, error) {
		path = filepath.Clean(path)
		if s, ok := texts[path]; ok {
			return s, nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return "", err
		}
		texts[path] = string(b)
		return texts[path], nil
	}
	checked := 0
	for _, file := range files {
		text, err := read(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range links(text) {
			if external(l.target) {
				continue
			}
			checked++
			pathPart, anchor, _ := strings.Cut(l.target, "#")
			if p, err := url.PathUnescape(pathPart); err == nil {
				pathPart = p
			}
			if a, err := url.PathUnescape(anchor); err == nil {
				anchor = a
			}
			into := file // a bare #anchor points into the same file
			if pathPart != "" {
				into = filepath.Join(filepath.Dir(file), filepath.FromSlash(pathPart))
				if _, err := os.Stat(into); err != nil {
					t.Errorf("%s:%d: link %q: %s does not exist", file, l.line, l.target, into)
					continue
				}
			}
			if anchor == "" || !strings.EqualFold(filepath.Ext(into), ".md") {
				continue
			}
			target, err := read(into)
			if err != nil {
				t.Errorf("%s:%d: link %q: %v", file, l.line, l.target, err)
				continue
			}
			if !anchors(target)[anchor] {
				t.Errorf("%s:%d: link %q: no heading of %s gives the anchor #%s", file, l.line, l.target, into, anchor)
			}
		}
	}
	if checked == 0 {
		t.Fatal("found no relative link to check: the link parser is broken")
	}
}

// Every page under docs/ is reachable from README.md, and each one starts
// with its title and links back to README.
func TestDocsPagesLinkedFromReadme(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	linked := map[string]bool{}
	for _, l := range links(string(b)) {
		p, _, _ := strings.Cut(l.target, "#")
		linked[filepath.Clean(filepath.FromSlash(p))] = true
	}
	for _, page := range docFiles(t)[1:] {
		if !linked[page] {
			t.Errorf("README.md links nowhere to %s", page)
		}
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(b), "# ") {
			t.Errorf("%s:1: a docs page starts with its \"# Title\"", page)
		}
		back := false
		for _, l := range links(string(b)) {
			p, _, _ := strings.Cut(l.target, "#")
			if filepath.Clean(filepath.Join("docs", filepath.FromSlash(p))) == "README.md" {
				back = true
			}
		}
		if !back {
			t.Errorf("%s: no link back to README.md", page)
		}
	}
}

func TestDocsSlug(t *testing.T) {
	for _, c := range []struct{ heading, want string }{
		{"On a GPU box", "on-a-gpu-box"},
		{"`swetui plan`: fits?", "swetui-plan-fits"},
		{"2. Packages and their imports", "2-packages-and-their-imports"},
		{"Pretrained models: chat template and end tokens", "pretrained-models-chat-template-and-end-tokens"},
		{"What a run does", "what-a-run-does"},
		{"snake_case and kebab-case", "snake_case-and-kebab-case"},
		{"A [linked](https://example.com) heading", "a-linked-heading"},
		{"Zürich × 2", "zürich--2"},
	} {
		if got := slug(c.heading); got != c.want {
			t.Errorf("slug(%q) = %q, want %q", c.heading, got, c.want)
		}
	}
}

func TestDocsAnchors(t *testing.T) {
	text := strings.Join([]string{
		"# Title",
		"## Setup",
		"```sh",
		"# not a heading",
		"```diff",
		"## still code: a fence with an info string does not close one",
		"```",
		"## Setup",
		"### Setup ###",
		"Closing hashes",
		"---",
	}, "\n")
	got := anchors(text)
	for _, want := range []string{"title", "setup", "setup-1", "setup-2", "closing-hashes"} {
		if !got[want] {
			t.Errorf("anchor %q missing from %v", want, got)
		}
	}
	for _, bad := range []string{"not-a-heading", "still-code-a-fence-with-an-info-string-does-not-close-one", "setup-3"} {
		if got[bad] {
			t.Errorf("anchor %q should not be there: %v", bad, got)
		}
	}
	ls := links("see [a](x.md#y) and `[b](code.md)` and ![i](img.png \"t\")\n```\n[c](fenced.md)\n```\n[r]: ref.md")
	var targets []string
	for _, l := range ls {
		targets = append(targets, fmt.Sprintf("%d:%s", l.line, l.target))
	}
	if want := "1:x.md#y 1:img.png 5:ref.md"; strings.Join(targets, " ") != want {
		t.Errorf("links = %v, want %s", targets, want)
	}
}
