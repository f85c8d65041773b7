package reward

import (
	"fmt"
	"strconv"
	"strings"
)

// The pieces of a diff's header lines, read for the syntax check: hunk
// ranges, git's extended headers and file modes, and paths.

// parseHunkHeader reads "@@ -l[,s] +l[,s] @@[ section]".
func parseHunkHeader(h string) (oldStart, oldN, newStart, newN int, err error) {
	rest := h[3:]
	end := strings.Index(rest, " @@")
	if end < 0 {
		return 0, 0, 0, 0, fmt.Errorf("malformed hunk header %.60q", h)
	}
	ranges := rest[:end]
	o, n, ok := strings.Cut(ranges, " ")
	if !ok || len(o) < 2 || len(n) < 2 || o[0] != '-' || n[0] != '+' {
		return 0, 0, 0, 0, fmt.Errorf("malformed hunk header %.60q", h)
	}
	if oldStart, oldN, err = parseRange(o[1:]); err != nil {
		return 0, 0, 0, 0, fmt.Errorf("hunk header %.60q: %w", h, err)
	}
	if newStart, newN, err = parseRange(n[1:]); err != nil {
		return 0, 0, 0, 0, fmt.Errorf("hunk header %.60q: %w", h, err)
	}
	if (oldN > 0 && oldStart == 0) || (newN > 0 && newStart == 0) {
		return 0, 0, 0, 0, fmt.Errorf("hunk header %.60q: line 0 with a non-empty range", h)
	}
	return oldStart, oldN, newStart, newN, nil
}

func parseRange(s string) (start, n int, err error) {
	a, b, hasCount := strings.Cut(s, ",")
	start, err = atoi(a)
	if err != nil {
		return 0, 0, err
	}
	n = 1
	if hasCount {
		if n, err = atoi(b); err != nil {
			return 0, 0, err
		}
	}
	return start, n, nil
}

// atoi accepts only plain decimal digits (no sign, no spaces), bounded.
func atoi(s string) (int, error) {
	if s == "" || len(s) > 9 {
		return 0, fmt.Errorf("bad number %q", s)
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("bad number %q", s)
		}
		n = n*10 + int(s[i]-'0')
	}
	return n, nil
}

var keywords = []string{
	"old mode ", "new mode ", "deleted file mode ", "new file mode ", "rename from ", "rename to ",
	"copy from ", "copy to ", "similarity index ", "dissimilarity index ", "index ",
}

// cutKeyword recognises git's extended header lines.
func cutKeyword(l string) (kw, val string, ok bool) {
	for _, k := range keywords {
		if strings.HasPrefix(l, k) {
			return k[:len(k)-1], l[len(k):], true
		}
	}
	if strings.HasPrefix(l, "Binary files ") && strings.HasSuffix(l, " differ") {
		return "Binary files", "", true
	}
	if l == "GIT binary patch" {
		return l, "", true
	}
	return "", "", false
}

func checkMode(m string) error {
	switch m {
	case "100644", "100755", "120000", "160000":
		return nil
	}
	return fmt.Errorf("unsupported file mode %q", m)
}

// pathPair reads the paths of a --- line and of the +++ line that must
// follow it. They are what was read even with an error (ReadDiff keeps
// them); a line that is not +++ is left unread, as it may start a section.
func (d *diffParser) pathPair(minus string) (oldP, newP string, err error) {
	if oldP, err = d.headerPath(minus[4:]); err != nil {
		return oldP, "", err
	}
	at, atLine := d.pos, d.line
	l, ok := d.next()
	if !ok || !strings.HasPrefix(l, "+++ ") {
		err := d.errf("--- line not followed by +++")
		d.pos, d.line = at, atLine
		return oldP, "", err
	}
	newP, err = d.headerPath(l[4:])
	return oldP, newP, err
}

// headerPath reads a ---/+++ path: /dev/null is "", a tab ends the name (a
// timestamp may follow), and the first component (a/, b/) is stripped.
func (d *diffParser) headerPath(s string) (string, error) {
	if i := strings.IndexByte(s, '\t'); i >= 0 {
		s = s[:i]
	}
	if !strings.HasPrefix(s, `"`) {
		s = strings.TrimRight(s, " ")
	}
	s = unquote(s)
	if s == "/dev/null" {
		return "", nil
	}
	p, err := stripPrefix(s)
	if err != nil {
		return p, d.errf("%v", err)
	}
	return p, nil
}

// stripPrefix drops the first path component, as -p1 does, then checks the
// rest. The helpers below return the path as read even with an error: what
// ReadDiff keeps, so that the hack check sees where a broken diff leads.
func stripPrefix(s string) (string, error) {
	if strings.HasPrefix(s, "/") {
		return s, fmt.Errorf("absolute path %q", s)
	}
	i := strings.IndexByte(s, '/')
	if i < 0 {
		return s, fmt.Errorf("path %q has no a/ or b/ component to strip", s)
	}
	return cleanPath(s[i+1:])
}

// cleanPath checks that a repository-relative path stays inside the
// repository and out of .git.
func cleanPath(p string) (string, error) {
	if p == "" {
		return p, fmt.Errorf("empty path")
	}
	if strings.HasPrefix(p, "/") {
		return p, fmt.Errorf("absolute path %q", p)
	}
	if strings.ContainsRune(p, 0) {
		return p, fmt.Errorf("path %q contains NUL", p)
	}
	for _, c := range strings.Split(p, "/") {
		switch {
		case c == "..":
			return p, fmt.Errorf("path %q leaves the repository", p)
		case c == "" || c == ".":
			return p, fmt.Errorf("path %q has an empty or '.' component", p)
		case strings.EqualFold(c, ".git"):
			return p, fmt.Errorf("path %q points into .git", p)
		}
	}
	return p, nil
}

// unquote decodes git's C-style quoted names; other names pass through.
func unquote(s string) string {
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		if u, err := strconv.Unquote(s); err == nil {
			return u
		}
		// git writes octal escapes (\303) that strconv also reads; anything
		// else stays as written and fails the path checks if it matters.
	}
	return s
}
