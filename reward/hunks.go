package reward

import (
	"strings"
)

// Hunk-level reading and application of a diff, in Go, on base files held in
// memory: what per-hunk credit, re-diffing for similarity and the no-op
// check need. The verdict whether a patch applies stays the fallback
// chain's (Applier); this applier is exact (no fuzz, no whitespace
// leniency), so it never credits a hunk that git would refuse.

// hunk is one hunk of a file's diff, as the syntax check read it.
type hunk struct {
	header         string // the @@ line
	oldStart, oldN int
	lines          []string // the body, each line with its ' ', '-' or '+'; no-newline markers dropped
}

// pre and post are the hunk's old and new lines, prefixes stripped.
func (h hunk) pre() []string  { return h.side('-') }
func (h hunk) post() []string { return h.side('+') }

func (h hunk) side(keep byte) []string {
	var out []string
	for _, l := range h.lines {
		if l[0] == ' ' || l[0] == keep {
			out = append(out, l[1:])
		}
	}
	return out
}

// parsePatch validates a diff and returns its files with their hunks.
func parsePatch(diff string) ([]FileDiff, error) {
	p, err := ValidateDiff(diff)
	if err != nil {
		return nil, err
	}
	return p.Files, nil
}

// findHunk is where h's old lines start in old at or after from: at its
// stated line if they match there, else at the nearest line where they do
// (git apply's search, without fuzz); -1 if nowhere.
func findHunk(old []string, h hunk, from int) int {
	pre := h.pre()
	want := h.oldStart - 1
	if len(pre) == 0 {
		want = h.oldStart // "-k,0" inserts after line k
		if want < from || want > len(old) {
			return -1
		}
		return want
	}
	match := func(pos int) bool {
		if pos < from || pos+len(pre) > len(old) {
			return false
		}
		for i, l := range pre {
			if old[pos+i] != l {
				return false
			}
		}
		return true
	}
	for dist := 0; want-dist >= from || want+dist+len(pre) <= len(old); dist++ {
		if match(want - dist) {
			return want - dist
		}
		if dist > 0 && match(want+dist) {
			return want + dist
		}
	}
	return -1
}

// applyHunks applies hunks in order to old, each after the one before;
// ok is false if one does not match.
func applyHunks(old []string, hunks []hunk) (out []string, ok bool) {
	cur := 0
	for _, h := range hunks {
		pos := findHunk(old, h, cur)
		if pos < 0 {
			return nil, false
		}
		out = append(out, old[cur:pos]...)
		out = append(out, h.post()...)
		cur = pos + len(h.pre())
	}
	return append(out, old[cur:]...), true
}

// fileResult is one path of a patch applied in memory.
type fileResult struct {
	old, new []string
	ok       bool // every hunk of every section for the path applied
	moved    bool // created, deleted, renamed or copied: a change whatever the lines say
}

// applyPatch applies files to base (path -> content at base_commit; a path
// absent from it does not exist there), keyed by the path in the patched
// tree. Binary sections never apply here.
func applyPatch(files []FileDiff, base map[string]string) map[string]*fileResult {
	out := map[string]*fileResult{}
	for _, f := range files {
		r := out[f.Path()]
		if r == nil {
			r = &fileResult{ok: true}
			out[f.Path()] = r
			content, exists := base[f.OldPath]
			switch {
			case f.IsBinary:
				r.ok = false
			case f.IsNew:
				_, clash := base[f.NewPath]
				r.ok, r.moved = !clash, true
			case !exists:
				r.ok = false
			default:
				r.old = splitFileLines(content)
				r.new = r.old
			}
			r.moved = r.moved || f.IsDelete || f.IsRename || f.IsCopy
		}
		if !r.ok {
			continue
		}
		r.new, r.ok = applyHunks(r.new, f.hunks)
		if f.IsDelete && len(r.new) > 0 {
			r.ok = false // git refuses to delete a file the hunks do not empty
		}
	}
	return out
}

// splitFileLines splits a file's text into lines, a final newline ending the
// last line rather than starting an empty one.
func splitFileLines(s string) []string {
	s = strings.TrimSuffix(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// hunksApplying counts the text hunks of files and those that apply on
// their own to base: each by itself, its old lines matching exactly
// somewhere in its base file; a new file's hunks apply where the file does
// not exist yet.
func hunksApplying(files []FileDiff, base map[string]string) (applied, total int) {
	for _, f := range files {
		total += len(f.hunks)
		if f.IsNew {
			if _, clash := base[f.NewPath]; !clash {
				applied += len(f.hunks)
			}
			continue
		}
		content, exists := base[f.OldPath]
		if !exists {
			continue
		}
		old := splitFileLines(content)
		for _, h := range f.hunks {
			if findHunk(old, h, 0) >= 0 {
				applied++
			}
		}
	}
	return applied, total
}

// HunksApplying is hunksApplying on a diff: how many of its text hunks
// apply on their own to base (path -> content; absent means no such file),
// and how many it has. A diff that fails the syntax check has none.
func HunksApplying(diff string, base map[string]string) (applied, total int) {
	files, err := parsePatch(diff)
	if err != nil {
		return 0, 0
	}
	return hunksApplying(files, base)
}

// noopKeys are a text's lines as the no-op check compares them: trailing
// whitespace trimmed, blank lines dropped. Indentation and whitespace within
// a line are kept: in Python they can be the fix.
func noopKeys(lines []string) []string {
	var out []string
	for _, l := range lines {
		if l = strings.TrimRight(l, " \t\f\v\r"); l != "" {
			out = append(out, l)
		}
	}
	return out
}

func sameUpToWhitespace(a, b []string) bool {
	ka, kb := noopKeys(a), noopKeys(b)
	if len(ka) != len(kb) {
		return false
	}
	for i := range ka {
		if ka[i] != kb[i] {
			return false
		}
	}
	return true
}

// noopFiles reports a patch that changes nothing: it has text hunks or
// empty new files, no other sections (binary, mode, rename), and every
// hunk's new lines equal its old ones up to trailing whitespace and blank
// lines (a removed line re-added as it was, a trailing space, an empty
// line).
func noopFiles(files []FileDiff) bool {
	n := 0
	for _, f := range files {
		if f.IsNew && len(f.hunks) == 0 && !f.IsBinary && !f.symlink {
			n++ // an agent's stray `> name`: a policy learned to earn the apply bonus so
			continue
		}
		if len(f.hunks) == 0 || f.IsBinary || f.IsRename || f.IsCopy || f.IsDelete || f.ModeOnly {
			return false
		}
		for _, h := range f.hunks {
			if !sameUpToWhitespace(h.pre(), h.post()) {
				return false
			}
			n++
		}
	}
	return n > 0
}

// noopResult reports a patch whose applied result equals the base files up
// to trailing whitespace and blank lines (hunks that undo each other, say);
// false when a file did not apply in memory, as nothing is known then.
func noopResult(res map[string]*fileResult) bool {
	if len(res) == 0 {
		return false
	}
	for _, r := range res {
		if !r.ok || r.moved || !sameUpToWhitespace(r.old, r.new) {
			return false
		}
	}
	return true
}

// NoopDiff reports a diff that changes nothing (noopFiles), or, with base
// files (path -> content) given, whose result equals them (noopResult). A
// diff that fails the syntax check is not a no-op: it is not a diff.
func NoopDiff(diff string, base map[string]string) bool {
	files, err := parsePatch(diff)
	if err != nil {
		return false
	}
	return noopFiles(files) || (base != nil && noopResult(applyPatch(files, base)))
}
