package task

import (
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
			a, b := splitGitHeader(line[len("diff --git "):])
			cur = &FileChange{Old: a, New: b}
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

// splitGitHeader splits "a/x b/y" (or quoted forms) into x and y. Unquoted
// paths with spaces are ambiguous there; the ---/+++ lines that follow settle
// them.
func splitGitHeader(s string) (string, string) {
	if strings.HasPrefix(s, `"`) {
		if end := closingQuote(s); end > 0 {
			a, rest := s[:end+1], strings.TrimPrefix(s[end+1:], " ")
			return stripAB(unquotePath(a), "a/"), stripAB(unquotePath(rest), "b/")
		}
	}
	if i := strings.Index(s, " b/"); i >= 0 {
		return stripAB(s[:i], "a/"), stripAB(unquotePath(s[i+1:]), "b/")
	}
	return "", ""
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
