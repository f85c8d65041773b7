package reward

import (
	"fmt"
	"strings"

	"github.com/swetui/swetui/task"
)

// FileDiff is one file of a unified diff, as the syntax check read it. Paths
// are repository-relative: the a/ and b/ prefixes (git's, and patch -p1's
// first component) are stripped.
type FileDiff struct {
	OldPath  string `json:"old_path,omitempty"` // empty for a new file
	NewPath  string `json:"new_path,omitempty"` // empty for a deleted file
	IsNew    bool   `json:"is_new,omitempty"`
	IsDelete bool   `json:"is_delete,omitempty"`
	IsRename bool   `json:"is_rename,omitempty"`
	IsCopy   bool   `json:"is_copy,omitempty"`
	IsBinary bool   `json:"is_binary,omitempty"`
	ModeOnly bool   `json:"mode_only,omitempty"` // only a mode change
	Hunks    int    `json:"hunks"`
	Added    int    `json:"added"`
	Deleted  int    `json:"deleted"`

	// hunks are the text hunks as read (Hunks counts the whole ones): the
	// shaping terms and the hack check take them from here, so that a diff
	// is walked once.
	hunks   []hunk
	symlink bool // the patched file is a symbolic link (mode 120000): its + line is the target
}

// Path is the file's path in the patched tree, or its old path if deleted.
func (f FileDiff) Path() string {
	if f.NewPath != "" {
		return f.NewPath
	}
	return f.OldPath
}

// Patch is a syntactically valid unified diff.
type Patch struct {
	Files []FileDiff `json:"files"`
	Git   bool       `json:"git"` // has diff --git headers
}

// Paths lists every path the patch reads or writes (old and new names), once each.
func (p *Patch) Paths() []string {
	seen := map[string]bool{}
	var out []string
	for _, f := range p.Files {
		for _, q := range []string{f.OldPath, f.NewPath} {
			if q != "" && !seen[q] {
				seen[q] = true
				out = append(out, q)
			}
		}
	}
	return out
}

// SyntaxError is the first problem the syntax check found, with its 1-based line.
type SyntaxError struct {
	Line int
	Msg  string
}

func (e *SyntaxError) Error() string { return fmt.Sprintf("diff line %d: %s", e.Line, e.Msg) }

// ValidateDiff is the strict syntax check of mode syntax: it parses a unified
// diff (git's, or plain ---/+++ diffs) and returns its files, or the first
// problem. The diff must be non-empty, every hunk's line counts must match its
// body, no hunk may be empty, and every path must be relative and stay inside
// the repository (no absolute paths, no "..", nothing under .git).
func ValidateDiff(diff string) (*Patch, error) {
	p, _, err := parseDiff(diff, parseStrict)
	return p, err
}

// ReadDiff reads diff as ValidateDiff does but on past its problems: every
// file section with what could be read of it (paths as written, hunks as far
// as they go), and the first problem, the one ValidateDiff reports. The hack
// check reads a broken diff this way, so that it is still flagged for what
// it tries. The Patch is never nil.
func ReadDiff(diff string) (*Patch, error) {
	p, _, err := parseDiff(diff, parseSalvage)
	return p, err
}

// parseMode says what parseDiff does with a line that cannot continue the diff.
type parseMode int

const (
	parseStrict  parseMode = iota // an error (ValidateDiff)
	parsePrefix                   // the end of the diff: extraction cuts trailing prose off there
	parseSalvage                  // noted and passed over (ReadDiff)
)

// diffParser walks a diff line by line without copying it.
type diffParser struct {
	src  string
	pos  int // offset of the next unread line
	line int // number of the last line read
}

func (d *diffParser) next() (string, bool) {
	if d.pos >= len(d.src) {
		return "", false
	}
	end := strings.IndexByte(d.src[d.pos:], '\n')
	var l string
	if end < 0 {
		l = d.src[d.pos:]
		d.pos = len(d.src)
	} else {
		l = d.src[d.pos : d.pos+end]
		d.pos += end + 1
	}
	d.line++
	return l, true
}

// peek returns the next line without consuming it.
func (d *diffParser) peek() (string, bool) {
	save, saveLine := d.pos, d.line
	l, ok := d.next()
	d.pos, d.line = save, saveLine
	return l, ok
}

func (d *diffParser) errf(format string, args ...any) error {
	return &SyntaxError{Line: d.line, Msg: fmt.Sprintf(format, args...)}
}

// parseDiff parses src in mode; end is the offset where the diff stops
// (before the first line that cannot continue it, in parsePrefix).
func parseDiff(src string, mode parseMode) (p *Patch, end int, err error) {
	d := &diffParser{src: src}
	p = &Patch{}
	var first error // parseSalvage: the first problem, read on past
	for {
		start := d.pos
		l, ok := d.next()
		if !ok {
			break
		}
		var f FileDiff
		var ferr error
		section := true // l starts a file section, f
		switch {
		case strings.HasPrefix(l, "diff --git "):
			p.Git = true
			f, ferr = d.gitFile(l)
		case strings.HasPrefix(l, "--- "):
			f, ferr = d.plainFile(l)
		case strings.TrimSpace(l) == "":
			continue
		case mode == parsePrefix && len(p.Files) > 0:
			d.pos = start
			return p, start, nil
		default:
			section = false
			if len(p.Files) == 0 {
				ferr = d.errf("expected a file header (diff --git or ---), got %.60q", l)
			} else {
				ferr = d.errf("unexpected line after the last hunk: %.60q", l)
				if mode == parseSalvage && strings.HasPrefix(l, "@@ ") {
					_ = d.hunk(&p.Files[len(p.Files)-1], l) // a hunk after its section broke is still that file's
				}
			}
		}
		if ferr != nil {
			if mode != parseSalvage {
				return nil, start, ferr
			}
			if first == nil {
				first = ferr
			}
		}
		if section {
			p.Files = append(p.Files, f)
		}
	}
	if first == nil && len(p.Files) == 0 {
		first = &SyntaxError{Line: d.line, Msg: "empty diff: no file headers"}
	}
	if first != nil && mode != parseSalvage {
		return nil, d.pos, first
	}
	return p, d.pos, first
}

// gitFile parses one "diff --git" section: extended headers, then hunks or a
// binary marker.
func (d *diffParser) gitFile(header string) (FileDiff, error) {
	var f FileDiff
	headerLine := d.line
	aPath, bPath, herr := task.SplitGitHeader(header[len("diff --git "):])
	if herr == nil {
		// What ReadDiff keeps if the section breaks before its ---/+++ or
		// rename lines name the file; those overwrite it below.
		f.OldPath, _ = stripPrefix(aPath)
		f.NewPath, _ = stripPrefix(bPath)
	}
	var renameFrom, renameTo string
	modeChange := false
	for {
		l, ok := d.peek()
		if !ok {
			break
		}
		kw, val, found := cutKeyword(l)
		if !found {
			break
		}
		d.next()
		switch kw {
		case "old mode", "new mode":
			if err := checkMode(val); err != nil {
				return f, d.errf("%s: %v", kw, err)
			}
			modeChange = true
			if kw == "new mode" {
				f.symlink = val == symlinkMode
			}
		case "new file mode":
			if err := checkMode(val); err != nil {
				return f, d.errf("%s: %v", kw, err)
			}
			f.IsNew = true
			f.symlink = val == symlinkMode
		case "deleted file mode":
			if err := checkMode(val); err != nil {
				return f, d.errf("%s: %v", kw, err)
			}
			f.IsDelete = true
		case "rename from", "copy from":
			renameFrom = val
			f.IsRename = kw == "rename from"
			f.IsCopy = kw == "copy from"
		case "rename to", "copy to":
			renameTo = val
		case "similarity index", "dissimilarity index", "index":
		case "Binary files":
			f.IsBinary = true
		case "GIT binary patch":
			f.IsBinary = true
			if err := d.skipBinary(); err != nil {
				return f, err
			}
		}
	}
	if f.IsNew && f.IsDelete {
		return f, &SyntaxError{Line: headerLine, Msg: "file is both new and deleted"}
	}
	// Names: the ---/+++ lines are authoritative; then rename/copy lines; the
	// diff --git line is ambiguous with spaces and comes last.
	if l, ok := d.peek(); ok && strings.HasPrefix(l, "--- ") {
		if f.IsBinary {
			return f, d.errf("text hunks after a binary marker")
		}
		d.next()
		oldP, newP, err := d.pathPair(l)
		if err != nil {
			if oldP != "" {
				f.OldPath = oldP
			}
			if newP != "" {
				f.NewPath = newP
			}
			return f, err
		}
		if oldP == "" && !f.IsNew {
			f.IsNew = true
		}
		if newP == "" && !f.IsDelete {
			f.IsDelete = true
		}
		if (oldP == "" && newP == "") || (f.IsNew && oldP != "") || (f.IsDelete && newP != "") {
			return f, d.errf("--- %q / +++ %q disagree with the file's new/deleted header", oldP, newP)
		}
		f.OldPath, f.NewPath = oldP, newP
		if err := d.hunks(&f); err != nil {
			return f, err
		}
	} else {
		switch {
		case renameFrom != "" || renameTo != "":
			if renameFrom == "" || renameTo == "" {
				return f, &SyntaxError{Line: headerLine, Msg: "rename/copy without both from and to"}
			}
			var err error
			if f.OldPath, err = cleanPath(unquote(renameFrom)); err != nil {
				return f, &SyntaxError{Line: headerLine, Msg: err.Error()}
			}
			if f.NewPath, err = cleanPath(unquote(renameTo)); err != nil {
				return f, &SyntaxError{Line: headerLine, Msg: err.Error()}
			}
		case herr != nil:
			return f, &SyntaxError{Line: headerLine, Msg: herr.Error()}
		default:
			var err error
			if f.OldPath, err = stripPrefix(aPath); err != nil {
				return f, &SyntaxError{Line: headerLine, Msg: err.Error()}
			}
			if f.NewPath, err = stripPrefix(bPath); err != nil {
				return f, &SyntaxError{Line: headerLine, Msg: err.Error()}
			}
		}
		if f.IsNew {
			f.OldPath = ""
		}
		if f.IsDelete {
			f.NewPath = ""
		}
		if !f.IsBinary && !f.IsNew && !f.IsDelete && !f.IsRename && !f.IsCopy {
			if !modeChange {
				return f, &SyntaxError{Line: headerLine, Msg: "file section has no hunks, no binary marker and no rename, mode or new/deleted header"}
			}
			f.ModeOnly = true
		}
	}
	if renameFrom != "" && f.OldPath != "" {
		if p, err := cleanPath(unquote(renameFrom)); err == nil && p != f.OldPath {
			return f, &SyntaxError{Line: headerLine, Msg: fmt.Sprintf("rename from %q but --- names %q", p, f.OldPath)}
		}
	}
	return f, nil
}

// plainFile parses a ---/+++ file without a diff --git line (diff -u, patch -p1 style).
func (d *diffParser) plainFile(first string) (FileDiff, error) {
	var f FileDiff
	var err error
	if f.OldPath, f.NewPath, err = d.pathPair(first); err != nil {
		return f, err
	}
	if f.OldPath == "" && f.NewPath == "" {
		return f, d.errf("both --- and +++ are /dev/null")
	}
	f.IsNew, f.IsDelete = f.OldPath == "", f.NewPath == ""
	return f, d.hunks(&f)
}

// hunks parses one or more hunks; at least one is required.
func (d *diffParser) hunks(f *FileDiff) error {
	for {
		l, ok := d.peek()
		if !ok || !strings.HasPrefix(l, "@@ ") {
			break
		}
		d.next()
		if err := d.hunk(f, l); err != nil {
			return err
		}
	}
	if f.Hunks == 0 {
		return d.errf("file %q has a --- / +++ header but no hunks", f.Path())
	}
	return nil
}

func (d *diffParser) hunk(f *FileDiff, header string) error {
	oldStart, oldN, newStart, newN, err := parseHunkHeader(header)
	if err != nil {
		return d.errf("%v", err)
	}
	if oldN == 0 && newN == 0 {
		return d.errf("empty hunk")
	}
	if f.IsNew && (oldStart != 0 || oldN != 0) {
		return d.errf("hunk of new file %q must start at -0,0", f.Path())
	}
	if f.IsDelete && (newStart != 0 || newN != 0) {
		return d.errf("hunk of deleted file %q must end at +0,0", f.Path())
	}
	headerLine := d.line
	// The body has at most oldN+newN lines; a header may lie, so the guess is capped.
	f.hunks = append(f.hunks, hunk{header: header, oldStart: oldStart, oldN: oldN, lines: make([]string, 0, min(oldN+newN, 512))})
	h := &f.hunks[len(f.hunks)-1]
	oldLeft, newLeft := oldN, newN
	changed := false
	for oldLeft > 0 || newLeft > 0 {
		at, atLine := d.pos, d.line
		l, ok := d.next()
		if !ok {
			return &SyntaxError{Line: headerLine, Msg: fmt.Sprintf("hunk ends early: %d old and %d new lines missing at end of diff", oldLeft, newLeft)}
		}
		if l == "" {
			l = " " // git apply reads an empty line as empty context
		}
		switch l[0] {
		case ' ':
			oldLeft--
			newLeft--
		case '-':
			oldLeft--
			f.Deleted++
			changed = true
		case '+':
			newLeft--
			f.Added++
			changed = true
		case '\\':
			if !strings.HasPrefix(l, `\ `) {
				return d.errf("malformed no-newline marker %.60q", l)
			}
			continue
		default:
			err := &SyntaxError{Line: d.line, Msg: fmt.Sprintf("hunk at line %d: line %.60q where %d old and %d new lines were still due", headerLine, l, oldLeft, newLeft)}
			d.pos, d.line = at, atLine // it may start the next section, where ReadDiff reads on
			return err
		}
		h.lines = append(h.lines, l)
		if oldLeft < 0 || newLeft < 0 {
			return &SyntaxError{Line: d.line, Msg: fmt.Sprintf("hunk at line %d: body longer than its header says (-%d,+%d)", headerLine, oldN, newN)}
		}
	}
	if l, ok := d.peek(); ok && strings.HasPrefix(l, `\ `) {
		d.next()
	}
	if !changed {
		return &SyntaxError{Line: headerLine, Msg: "hunk changes nothing (context lines only)"}
	}
	f.Hunks++
	return nil
}

// skipBinary consumes a "GIT binary patch" body: literal/delta blocks of
// base85 lines, each block ended by a blank line.
func (d *diffParser) skipBinary() error {
	blocks := 0
	for {
		l, ok := d.peek()
		if !ok || !(strings.HasPrefix(l, "literal ") || strings.HasPrefix(l, "delta ")) {
			break
		}
		d.next()
		blocks++
		for {
			b, ok := d.next()
			if !ok || b == "" {
				break
			}
			if c := b[0]; !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z') {
				return d.errf("malformed base85 line in binary patch")
			}
		}
	}
	if blocks == 0 {
		return d.errf("GIT binary patch without literal or delta data")
	}
	return nil
}
