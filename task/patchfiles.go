package task

import (
	"fmt"
	"strconv"
	"strings"
)

// FileChange is one file of a unified diff: its path before and after the
// patch, without the a/ and b/ prefixes; Old is "" for a file the patch
// creates and New is "" for one it deletes.
type FileChange struct {
	Old, New string
}

// Path is the file's path after the patch, or before it when the patch
// deletes it: the harness's `diff --git a/.* b/(.*)` reading.
func (c FileChange) Path() string {
	if c.New != "" {
		return c.New
	}
	return c.Old
}

// PatchFiles lists the files a unified diff (git's or plain) changes, in
// order, once each. It is the one reading of a patch's file list: the
// prompt's files, the test files the eval script resets and the test
// directives all come from it. Hunk bodies are skipped by their line counts,
// so a removed line that reads "--- a/x" is not taken for a header. It is
// lenient: a malformed patch yields what could be read (reward's strict
// parser judges syntax).
func PatchFiles(patch string) []FileChange {
	var out []FileChange
	seen := map[FileChange]bool{}
	var cur *FileChange
	paired := false // cur's ---/+++ pair was read: another pair is another file
	flush := func() {
		if cur != nil && (cur.Old != "" || cur.New != "") && !seen[*cur] {
			seen[*cur] = true
			out = append(out, *cur)
		}
		cur, paired = nil, false
	}
	lines := strings.Split(patch, "\n")
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSuffix(lines[i], "\r")
		switch {
		case strings.HasPrefix(line, "diff --git "):
			flush()
			cur = &FileChange{}
			if a, b, err := SplitGitHeader(line[len("diff --git "):]); err == nil {
				cur.Old, cur.New = stripAB(a, "a/"), stripAB(b, "b/")
			}
		case strings.HasPrefix(line, "--- ") && i+1 < len(lines) && strings.HasPrefix(lines[i+1], "+++ "):
			if cur == nil || paired {
				flush()
				cur = &FileChange{}
			}
			cur.Old = headerPath(line[len("--- "):], "a/")
			cur.New = headerPath(strings.TrimSuffix(lines[i+1], "\r")[len("+++ "):], "b/")
			paired = true
			i++
		case strings.HasPrefix(line, "rename from ") && cur != nil:
			cur.Old = unquotePath(line[len("rename from "):])
		case strings.HasPrefix(line, "rename to ") && cur != nil:
			cur.New = unquotePath(line[len("rename to "):])
		case strings.HasPrefix(line, "new file mode") && cur != nil:
			cur.Old = ""
		case strings.HasPrefix(line, "deleted file mode") && cur != nil:
			cur.New = ""
		case strings.HasPrefix(line, "@@ "):
			i += hunkLength(line, lines[i+1:])
		}
	}
	flush()
	return out
}

// Paths lists every path the changes read or write (old and new names), in
// order, once each: the files to reset before a test patch.
func Paths(changes []FileChange) []string {
	var out []string
	seen := map[string]bool{}
	for _, c := range changes {
		for _, p := range []string{c.Old, c.New} {
			if p != "" && !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out
}

// hunkLength is how many of the lines after a hunk header belong to it.
func hunkLength(header string, rest []string) int {
	var oldN, newN int
	fields := strings.Fields(header)
	if len(fields) < 3 {
		return 0
	}
	oldN, newN = rangeCount(fields[1]), rangeCount(fields[2])
	n := 0
	for n < len(rest) && (oldN > 0 || newN > 0) {
		l := rest[n]
		switch {
		case strings.HasPrefix(l, "\\"):
		case strings.HasPrefix(l, "-"):
			oldN--
		case strings.HasPrefix(l, "+"):
			newN--
		case strings.HasPrefix(l, " ") || l == "" || l == "\r":
			oldN--
			newN--
		default:
			return n // a malformed hunk ends at the first line that is not hunk text
		}
		n++
	}
	for n < len(rest) && strings.HasPrefix(rest[n], "\\") {
		n++
	}
	return n
}

// rangeCount reads the line count of "-a,b" or "+c,d" (1 when omitted).
func rangeCount(r string) int {
	_, count, ok := strings.Cut(r[1:], ",")
	if !ok {
		return 1
	}
	n, err := strconv.Atoi(count)
	if err != nil {
		return 0
	}
	return n
}

// SplitGitHeader splits the names of a diff --git line (what follows
// "diff --git "), unquoted, their a/ and b/ prefixes kept: task and reward
// read the line by this one rule. Unquoted names with spaces are ambiguous:
// halves that name the same file past their prefixes win (git writes a/X
// b/X for all but renames, which have their own lines), else the split is
// at the last " b/". The ---/+++ and rename lines, where a section has
// them, are the better source.
func SplitGitHeader(s string) (a, b string, err error) {
	if strings.HasPrefix(s, `"`) {
		end := closingQuote(s)
		if end < 0 {
			return "", "", fmt.Errorf("unterminated quoted name %.60q", s)
		}
		return unquotePath(s[:end+1]), unquotePath(strings.TrimPrefix(s[end+1:], " ")), nil
	}
	if i := strings.Index(s, ` "`); i >= 0 {
		return s[:i], unquotePath(s[i+1:]), nil
	}
	if len(s)%2 == 1 {
		h := len(s) / 2
		a, b := s[:h], s[h+1:]
		if s[h] == ' ' && len(a) > 2 && len(b) > 2 && a[2:] == b[2:] {
			return a, b, nil
		}
	}
	i := strings.LastIndex(s, " b/")
	if i < 0 {
		return "", "", fmt.Errorf("cannot read the file names of diff --git %.60q", s)
	}
	return s[:i], s[i+1:], nil
}

// headerPath reads the path of a ---/+++ line: "" for /dev/null.
func headerPath(s, prefix string) string {
	if i := strings.IndexByte(s, '\t'); i >= 0 {
		s = s[:i]
	}
	s = strings.TrimRight(s, " ")
	if s == "/dev/null" {
		return ""
	}
	return stripAB(unquotePath(s), prefix)
}

func stripAB(p, prefix string) string { return strings.TrimPrefix(p, prefix) }

func closingQuote(s string) int {
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			return i
		}
	}
	return -1
}

// unquotePath undoes git's C-style quoting of a path with unusual bytes.
func unquotePath(p string) string {
	if len(p) >= 2 && p[0] == '"' && p[len(p)-1] == '"' {
		if u, err := strconv.Unquote(p); err == nil {
			return u
		}
	}
	return p
}
