// Package mine owns building SWE-style task instances out of a repository's
// git history, the way SWE-bench and SWE-Gym build theirs: a commit that
// changes both tests and source is a candidate; its non-test diff is the gold
// patch, its test diff the test patch, its parent the base commit and its
// message the problem statement (Scan). A candidate becomes an instance when
// running its test files shows tests that fail at base + test patch and pass
// at base + patch + test patch (FAIL_TO_PASS) (Verify, through any
// reward.Evaluator: the docker pool in `swetui mine`); a gold patch the
// scorer would penalise (reward.CheckHacks) is dropped before any test runs.
// It reads git with the git command and never starts containers itself.
package mine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path"
	"strings"
	"time"

	"github.com/swetui/swetui/reward"
	"github.com/swetui/swetui/task"
)

// History modes: which commits Scan walks.
const (
	// FirstParent walks the first-parent chain from HEAD, the commits made
	// on the main line (merges skipped).
	FirstParent = "first-parent"
	// AllCommits walks every non-merge commit HEAD reaches, branches merged
	// in included, newest first; a change seen in a newer commit (a
	// cherry-pick) is not taken again.
	AllCommits = "all"
)

// Reasons a commit is not a candidate, as Scan counts them.
const (
	SkipNoTests     = "changes no test file"
	SkipNoSource    = "changes no source file"
	SkipBinary      = "binary change"
	SkipSubmodule   = "submodule change"
	SkipRoot        = "root commit"
	SkipDuplicate   = "same change as a newer commit"
	SkipEmptyChange = "empty diff"
)

// Options say what Scan walks.
type Options struct {
	History string // FirstParent (default) or AllCommits
	Rev     string // where the walk starts; "" = HEAD
}

// Candidate is a commit that changes tests and source: the parts of an
// instance that git gives.
type Candidate struct {
	Commit    string
	Parent    string
	Date      time.Time // committer date
	Message   string    // subject and body
	Patch     string    // the non-test files' diff, packaging and config files included
	TestPatch string    // the test files' diff (conftest.py counts as a test file)
	// Packaging lists the packaging and runner configuration files the
	// patch changes (tox.ini, setup.cfg, pyproject.toml, ...).
	Packaging []string
	// SrcLayout: the base tree or the commit's has a src/ folder, so the
	// package imports from there (the tests need it on the path).
	SrcLayout bool
}

// Result is what Scan found: the candidates, newest first, and how many
// commits were passed over for each reason.
type Result struct {
	Commits    int // non-merge commits looked at
	Candidates []Candidate
	Skipped    map[string]int
}

// sourceExts are the non-test files whose change makes a commit a fix of
// code rather than of docs or tooling.
var sourceExts = []string{".py", ".pyi", ".pyx", ".pxd", ".c", ".h", ".cpp"}

// packagingFiles are packaging and runner configuration files, by base name.
var packagingFiles = map[string]bool{"tox.ini": true, "setup.cfg": true, "pyproject.toml": true, "setup.py": true,
	"pytest.ini": true, "MANIFEST.in": true}

// IsPackaging reports whether a repository path is a packaging or runner
// configuration file (tox.ini, setup.cfg, pyproject.toml, setup.py, ...).
func IsPackaging(p string) bool {
	base := path.Base(p)
	return packagingFiles[base] || (strings.HasPrefix(base, "requirements") && strings.HasSuffix(base, ".txt"))
}

// IsSource reports whether a non-test path is source code: a Python module
// or a C extension's file.
func IsSource(p string) bool {
	for _, x := range sourceExts {
		if strings.HasSuffix(p, x) {
			return true
		}
	}
	return false
}

// git runs git in dir with no user or system configuration that could
// change its output, returning stdout.
func git(ctx context.Context, dir string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", dir, "-c", "core.quotePath=false"}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_TERMINAL_PROMPT=0", "LC_ALL=C")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// logEntry is one commit of the walk with its changed files.
type logEntry struct {
	commit, parent string
	date           time.Time
	files          []string
	binary         bool
}

// walk lists the non-merge commits of the history mode, newest first, with
// the files each changes against its first parent (renames as a deletion
// and an addition) and whether any of them is binary.
func walk(ctx context.Context, dir string, o Options) ([]logEntry, error) {
	rev := o.Rev
	if rev == "" {
		rev = "HEAD"
	}
	args := []string{"log", "-z", "--no-merges", "--no-renames", "--numstat", "--format=%x01%H %P%x09%cI"}
	switch o.History {
	case "", FirstParent:
		args = append(args, "--first-parent")
	case AllCommits:
	default:
		return nil, fmt.Errorf("mine: history %q: want %s or %s", o.History, FirstParent, AllCommits)
	}
	out, err := git(ctx, dir, append(args, rev, "--")...)
	if err != nil {
		return nil, fmt.Errorf("mine: %w", err)
	}
	var entries []logEntry
	for _, tok := range strings.Split(string(out), "\x00") {
		tok = strings.TrimLeft(tok, "\n")
		if tok == "" {
			continue
		}
		if rest, ok := strings.CutPrefix(tok, "\x01"); ok {
			ids, date, _ := strings.Cut(rest, "\t")
			f := strings.Fields(ids)
			if len(f) == 0 {
				return nil, fmt.Errorf("mine: git log: header %q has no commit", rest)
			}
			e := logEntry{commit: f[0]}
			if len(f) > 1 {
				e.parent = f[1]
			}
			if e.date, err = time.Parse(time.RFC3339, strings.TrimSpace(date)); err != nil {
				return nil, fmt.Errorf("mine: git log: commit %s: %w", e.commit, err)
			}
			entries = append(entries, e)
			continue
		}
		if len(entries) == 0 {
			return nil, fmt.Errorf("mine: git log: file line %q before any commit", tok)
		}
		// "added<TAB>deleted<TAB>path"; binary files count "-".
		f := strings.SplitN(tok, "\t", 3)
		if len(f) != 3 {
			return nil, fmt.Errorf("mine: git log: bad numstat line %q", tok)
		}
		e := &entries[len(entries)-1]
		e.files = append(e.files, f[2])
		if f[0] == "-" && f[1] == "-" {
			e.binary = true
		}
	}
	return entries, nil
}

// classify says why a commit whose files are these is no candidate ("" if it
// is one).
func classify(files []string) string {
	tests, source := false, false
	for _, f := range files {
		switch {
		case reward.IsTestPath(f):
			tests = true
		case IsSource(f):
			source = true
		}
	}
	switch {
	case len(files) == 0:
		return SkipEmptyChange
	case !tests:
		return SkipNoTests
	case !source:
		return SkipNoSource
	}
	return ""
}

// Scan walks dir's history and returns the commits that change both test
// files (reward.IsTestPath) and source files, each split into the gold
// patch and the test patch.
func Scan(ctx context.Context, dir string, o Options) (Result, error) {
	entries, err := walk(ctx, dir, o)
	if err != nil {
		return Result{}, err
	}
	res := Result{Commits: len(entries), Skipped: map[string]int{}}
	seen := map[[32]byte]bool{}
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return Result{}, fmt.Errorf("mine: %w", err)
		}
		why := classify(e.files)
		switch {
		case e.parent == "":
			why = SkipRoot
		case why == "" && e.binary:
			why = SkipBinary
		}
		if why != "" {
			res.Skipped[why]++
			continue
		}
		c, why, err := candidate(ctx, dir, e)
		if err != nil {
			return Result{}, err
		}
		if why == "" {
			key := sha256.Sum256([]byte(stripIndex(c.Patch) + "\x00" + stripIndex(c.TestPatch)))
			if seen[key] {
				why = SkipDuplicate
			}
			seen[key] = true
		}
		if why != "" {
			res.Skipped[why]++
			continue
		}
		res.Candidates = append(res.Candidates, c)
	}
	return res, nil
}

// candidate reads a commit's message and diff and splits the diff.
func candidate(ctx context.Context, dir string, e logEntry) (Candidate, string, error) {
	msg, err := git(ctx, dir, "log", "-1", "--format=%B", e.commit)
	if err != nil {
		return Candidate{}, "", fmt.Errorf("mine: %w", err)
	}
	diff, err := git(ctx, dir, "diff", "--no-color", "--no-ext-diff", "--no-textconv", "--no-renames", "--no-relative",
		"--src-prefix=a/", "--dst-prefix=b/", "--ignore-submodules=none", e.parent, e.commit, "--")
	if err != nil {
		return Candidate{}, "", fmt.Errorf("mine: %w", err)
	}
	c := Candidate{Commit: e.commit, Parent: e.parent, Date: e.date.UTC(), Message: strings.TrimSpace(string(msg)) + "\n"}
	patch, tests, packaging, why := Split(string(diff))
	if why != "" {
		return c, why, nil
	}
	c.Patch, c.TestPatch, c.Packaging = patch, tests, packaging
	// The fix may be the move to src/ itself.
	for _, rev := range []string{e.parent, e.commit} {
		if _, err := git(ctx, dir, "cat-file", "-e", rev+":src"); err == nil {
			c.SrcLayout = true
		}
	}
	return c, "", nil
}

// Split cuts a git diff into its non-test part (the gold patch) and its
// test part, file by file in the diff's order, and lists the packaging
// files of the gold patch. A binary or submodule change gives a reason
// instead; so does a diff with no file in one of the parts.
func Split(diff string) (patch, tests string, packaging []string, why string) {
	var p, t strings.Builder
	for _, file := range splitFiles(diff) {
		if strings.Contains(file, "\nGIT binary patch\n") || binaryLine(file) {
			return "", "", nil, SkipBinary
		}
		if strings.Contains(file, "\n+Subproject commit ") || strings.Contains(file, "\n-Subproject commit ") {
			return "", "", nil, SkipSubmodule
		}
		fcs := task.PatchFiles(file)
		if len(fcs) == 0 {
			continue
		}
		name := fcs[0].Path()
		if reward.IsTestPath(name) {
			t.WriteString(file)
			continue
		}
		p.WriteString(file)
		if IsPackaging(name) {
			packaging = append(packaging, name)
		}
	}
	switch {
	case t.Len() == 0:
		return "", "", nil, SkipNoTests
	case p.Len() == 0:
		return "", "", nil, SkipNoSource
	}
	return p.String(), t.String(), packaging, ""
}

// splitFiles cuts a git diff at its "diff --git" lines; each part ends
// with a newline.
func splitFiles(diff string) []string {
	var out []string
	var cur strings.Builder
	for _, line := range strings.SplitAfter(diff, "\n") {
		if strings.HasPrefix(line, "diff --git ") && cur.Len() > 0 {
			out = append(out, cur.String())
			cur.Reset()
		}
		cur.WriteString(line)
	}
	if cur.Len() > 0 {
		s := cur.String()
		if !strings.HasSuffix(s, "\n") {
			s += "\n"
		}
		out = append(out, s)
	}
	return out
}

// binaryLine finds git's "Binary files a/x and b/x differ" in one file's
// header (before any hunk).
func binaryLine(file string) bool {
	for _, line := range strings.Split(file, "\n") {
		if strings.HasPrefix(line, "@@ ") {
			return false
		}
		if strings.HasPrefix(line, "Binary files ") && strings.HasSuffix(line, " differ") {
			return true
		}
	}
	return false
}

// stripIndex drops a diff's "index" lines (blob ids), so that the same
// change made on two branches compares equal.
func stripIndex(diff string) string {
	var b strings.Builder
	for _, line := range strings.SplitAfter(diff, "\n") {
		if !strings.HasPrefix(line, "index ") {
			b.WriteString(line)
		}
	}
	return b.String()
}
