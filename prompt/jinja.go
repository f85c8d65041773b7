package prompt

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"

	"github.com/ardanlabs/jinja"
)

// compileTemplate compiles a Hugging Face chat template. The jinja package
// evaluates the template's expressions and statements, but its whitespace
// control strips the nearest text even when another tag stands between
// (`{% for %}{{ x }}\n` loses that newline, which Python's Jinja2 keeps),
// so the whitespace is settled here first, as Jinja2's lexer settles it
// with transformers' settings (trim_blocks, lstrip_blocks, one trailing
// newline of the source dropped), and every run of text handed over as a
// string expression, which the package prints as it is.
func compileTemplate(src string) (*jinja.Template, error) {
	norm, err := settleWhitespace(src)
	if err != nil {
		return nil, err
	}
	return jinja.Compile(norm)
}

// rawBegin and rawEnd are Jinja2's {% raw %} and {% endraw %} tags (the
// text after the opener and its sign).
var (
	rawBegin = regexp.MustCompile(`^\s*raw\s*(-%\}|%\})`)
	rawEnd   = regexp.MustCompile(`\{%([-+]?)\s*endraw\s*([-+]?)%\}`)
)

// settleWhitespace rewrites src into a template without text: each tag
// without its whitespace signs, comments dropped, and the text between
// tags, trimmed as Jinja2 trims it, as {{ "text" }}.
func settleWhitespace(src string) (string, error) {
	src = strings.ReplaceAll(strings.ReplaceAll(src, "\r\n", "\n"), "\r", "\n")
	src = strings.TrimSuffix(src, "\n") // keep_trailing_newline=False
	var out strings.Builder
	text := func(s string) {
		if s != "" {
			r := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
			out.WriteString(`{{ "` + r.Replace(s) + `" }}`)
		}
	}
	pos, lineStart := 0, true
	for {
		i := nextTag(src, pos)
		if i < 0 {
			text(src[pos:])
			return out.String(), nil
		}
		kind, body := src[i+1], i+2
		sign := byte(0)
		if body < len(src) && (src[body] == '-' || src[body] == '+') {
			sign = src[body]
			body++
		}
		text(leftTrim(src[pos:i], sign, kind != '{', lineStart))
		if kind == '%' {
			if m := rawBegin.FindStringSubmatchIndex(src[body:]); m != nil {
				after := body + m[1]
				if src[body+m[2]] == '-' {
					after = skipSpace(src, after)
				}
				e := rawEnd.FindStringSubmatchIndex(src[after:])
				if e == nil {
					return "", fmt.Errorf("chat_template: {%% raw %%} at byte %d has no {%% endraw %%}", i)
				}
				endSign := byte(0)
				if e[3] > e[2] {
					endSign = src[after+e[2]]
				}
				text(leftTrim(src[after:after+e[0]], endSign, true, after > 0 && src[after-1] == '\n'))
				pos = after + e[1]
				pos = rightTrim(src, pos, src[after+e[4]:after+e[5]], true)
				lineStart = pos > 0 && src[pos-1] == '\n'
				continue
			}
		}
		inner, end, endSign, err := tagEnd(src, body, kind)
		if err != nil {
			return "", fmt.Errorf("chat_template: %w", err)
		}
		switch kind {
		case '{':
			out.WriteString("{{" + inner + "}}")
		case '%':
			out.WriteString("{%" + inner + "%}")
		}
		pos = rightTrim(src, end, endSign, kind != '{')
		lineStart = pos > 0 && src[pos-1] == '\n'
	}
}

// nextTag is the index of the next "{{", "{%" or "{#" at or after pos, -1
// for none.
func nextTag(src string, pos int) int {
	for i := pos; i+1 < len(src); i++ {
		if src[i] == '{' && (src[i+1] == '{' || src[i+1] == '%' || src[i+1] == '#') {
			return i
		}
	}
	return -1
}

// leftTrim applies the whitespace control before a tag to the text before
// it: "-" strips all whitespace; otherwise lstrip_blocks strips the
// indentation before a block or comment tag that begins its line.
func leftTrim(text string, sign byte, block, lineStart bool) string {
	switch {
	case sign == '-':
		return strings.TrimRightFunc(text, isPySpace)
	case sign == '+' || !block:
		return text
	}
	l := strings.LastIndexByte(text, '\n') + 1
	if (l > 0 || lineStart) && l < len(text) && strings.TrimLeftFunc(text[l:], isPySpace) == "" {
		return text[:l]
	}
	return text
}

// rightTrim is where the text after a tag that ends at end begins: past
// all whitespace after "-", past one newline after a block or comment
// (trim_blocks) unless "+".
func rightTrim(src string, end int, sign string, block bool) int {
	switch {
	case sign == "-":
		return skipSpace(src, end)
	case sign == "+" || !block:
		return end
	case strings.HasPrefix(src[end:], "\n"):
		return end + 1
	}
	return end
}

func skipSpace(src string, i int) int {
	return len(src) - len(strings.TrimLeftFunc(src[i:], isPySpace))
}

// tagEnd finds the end of the tag whose body starts at i: its body without
// the closing sign, the index after the closer and that sign ("-", "+" or
// ""). Closers inside a block's or expression's string literals do not
// count; a comment is text up to its first closer.
func tagEnd(src string, i int, kind byte) (inner string, end int, sign string, err error) {
	closer := map[byte]string{'{': "}}", '%': "%}", '#': "#}"}[kind]
	var quote byte
	for j := i; j < len(src); j++ {
		c := src[j]
		switch {
		case quote != 0:
			if c == '\\' {
				j++
			} else if c == quote {
				quote = 0
			}
		case kind != '#' && (c == '\'' || c == '"'):
			quote = c
		case strings.HasPrefix(src[j:], closer):
			body := src[i:j]
			if n := len(body); n > 0 && (body[n-1] == '-' || body[n-1] == '+' && kind != '{') {
				sign, body = body[n-1:], body[:n-1]
			}
			return body, j + len(closer), sign, nil
		}
	}
	return "", 0, "", fmt.Errorf("tag at byte %d is not closed", i-2)
}

// isPySpace is Python's str.isspace, which Jinja2's trimming uses: Go's
// unicode.IsSpace and the four ASCII separators.
func isPySpace(r rune) bool { return unicode.IsSpace(r) || r >= 0x1c && r <= 0x1f }
