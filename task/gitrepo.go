package task

import (
	"bytes"
	"compress/zlib"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
)

// The suite's repositories are written as git repositories directly, in Go:
// loose objects, one commit with a fixed identity and date, a ref and an
// index. Commit hashes are then known without running git, are the same on
// every machine, and materialising 300 repositories takes no processes.

const (
	gitAuthor = "swetui mini <mini@swetui.invalid>"
	gitBranch = "main"
)

type gitObject struct {
	id   [20]byte
	kind string
	body []byte
}

func newGitObject(kind string, body []byte) gitObject {
	h := sha1.New()
	fmt.Fprintf(h, "%s %d\x00", kind, len(body))
	h.Write(body)
	var o gitObject
	copy(o.id[:], h.Sum(nil))
	o.kind, o.body = kind, body
	return o
}

func (o gitObject) hex() string { return hex.EncodeToString(o.id[:]) }

// gitRepo is a repository with a single commit holding files.
type gitRepo struct {
	files   map[string]string
	paths   []string // sorted
	blobs   map[string]gitObject
	objects []gitObject
	commit  gitObject
}

// buildGitRepo hashes files into blobs and trees and commits them at unix
// time ts with message msg.
func buildGitRepo(files map[string]string, ts int64, msg string) *gitRepo {
	g := &gitRepo{files: files, blobs: map[string]gitObject{}}
	for p := range files {
		g.paths = append(g.paths, p)
	}
	sort.Strings(g.paths)
	for _, p := range g.paths {
		b := newGitObject("blob", []byte(files[p]))
		g.blobs[p] = b
		g.objects = append(g.objects, b)
	}
	root := g.tree("")
	body := fmt.Sprintf("tree %s\nauthor %s %d +0000\ncommitter %s %d +0000\n\n%s\n",
		root.hex(), gitAuthor, ts, gitAuthor, ts, msg)
	g.commit = newGitObject("commit", []byte(body))
	g.objects = append(g.objects, g.commit)
	return g
}

// tree builds the tree object of directory dir ("" is the root).
func (g *gitRepo) tree(dir string) gitObject {
	prefix := dir
	if prefix != "" {
		prefix += "/"
	}
	type entry struct {
		name, mode string
		id         [20]byte
		isDir      bool
	}
	var entries []entry
	seen := map[string]bool{}
	for _, p := range g.paths {
		if !strings.HasPrefix(p, prefix) {
			continue
		}
		rest := p[len(prefix):]
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			name := rest[:i]
			if !seen[name] {
				seen[name] = true
				sub := g.tree(prefix + name)
				entries = append(entries, entry{name, "40000", sub.id, true})
			}
			continue
		}
		entries = append(entries, entry{rest, "100644", g.blobs[p].id, false})
	}
	// Git orders tree entries by name, a directory as if it ended in "/".
	key := func(e entry) string {
		if e.isDir {
			return e.name + "/"
		}
		return e.name
	}
	sort.Slice(entries, func(i, j int) bool { return key(entries[i]) < key(entries[j]) })
	var b bytes.Buffer
	for _, e := range entries {
		fmt.Fprintf(&b, "%s %s\x00", e.mode, e.name)
		b.Write(e.id[:])
	}
	t := newGitObject("tree", b.Bytes())
	g.objects = append(g.objects, t)
	return t
}

// index returns the repository's .git/index (version 2) for a clean
// checkout. Stat fields are zero, so git re-hashes a file once before
// trusting it, which keeps the index valid wherever the files land.
func (g *gitRepo) index() []byte {
	var b bytes.Buffer
	b.WriteString("DIRC")
	binary.Write(&b, binary.BigEndian, uint32(2))
	binary.Write(&b, binary.BigEndian, uint32(len(g.paths)))
	for _, p := range g.paths {
		start := b.Len()
		var stat [10]uint32 // ctime s/ns, mtime s/ns, dev, ino, mode, uid, gid, size
		stat[6] = 0o100644
		stat[9] = uint32(len(g.files[p]))
		binary.Write(&b, binary.BigEndian, stat)
		id := g.blobs[p].id
		b.Write(id[:])
		binary.Write(&b, binary.BigEndian, uint16(min(len(p), 0xfff)))
		b.WriteString(p)
		// NUL-terminate and pad the entry to a multiple of 8 bytes.
		pad := 8 - (b.Len()-start)%8
		b.Write(make([]byte, pad))
	}
	sum := sha1.Sum(b.Bytes())
	b.Write(sum[:])
	return b.Bytes()
}

// write puts the working tree and .git of the repository under root through
// put (paths use "/").
func (g *gitRepo) write(root string, put func(path string, data []byte) error) error {
	for _, p := range g.paths {
		if err := put(root+"/"+p, []byte(g.files[p])); err != nil {
			return err
		}
	}
	meta := []struct{ name, data string }{
		{"HEAD", "ref: refs/heads/" + gitBranch + "\n"},
		{"config", "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n"},
		{"refs/heads/" + gitBranch, g.commit.hex() + "\n"},
		{"index", string(g.index())},
	}
	for _, m := range meta {
		if err := put(root+"/.git/"+m.name, []byte(m.data)); err != nil {
			return err
		}
	}
	written := map[[20]byte]bool{}
	for _, o := range g.objects {
		if written[o.id] { // identical files share a blob
			continue
		}
		written[o.id] = true
		var z bytes.Buffer
		zw := zlib.NewWriter(&z)
		fmt.Fprintf(zw, "%s %d\x00", o.kind, len(o.body))
		zw.Write(o.body)
		if err := zw.Close(); err != nil {
			return err
		}
		h := o.hex()
		if err := put(root+"/.git/objects/"+h[:2]+"/"+h[2:], z.Bytes()); err != nil {
			return err
		}
	}
	return nil
}

// UnifiedDiff is a git-style patch turning old into new for one file: one
// hunk spanning everything between the common head and tail, with three
// lines of context. Both texts end in a newline.
func UnifiedDiff(path, old, new string) string {
	a, b := splitLines(old), splitLines(new)
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	if pre == len(a) && pre == len(b) {
		return ""
	}
	const ctx = 3
	start := max(0, pre-ctx)
	endA := min(len(a), len(a)-suf+ctx)
	endB := min(len(b), len(b)-suf+ctx)
	var w strings.Builder
	fmt.Fprintf(&w, "diff --git a/%s b/%s\n--- a/%s\n+++ b/%s\n", path, path, path, path)
	fmt.Fprintf(&w, "@@ -%s +%s @@\n", hunkRange(start, endA-start), hunkRange(start, endB-start))
	for _, l := range a[start:pre] {
		w.WriteString(" " + l + "\n")
	}
	for _, l := range a[pre : len(a)-suf] {
		w.WriteString("-" + l + "\n")
	}
	for _, l := range b[pre : len(b)-suf] {
		w.WriteString("+" + l + "\n")
	}
	for _, l := range a[len(a)-suf : endA] {
		w.WriteString(" " + l + "\n")
	}
	return w.String()
}

// hunkRange writes a hunk's "start,count" the way git does.
func hunkRange(start, count int) string {
	switch count {
	case 0:
		return fmt.Sprintf("%d,0", start)
	case 1:
		return fmt.Sprintf("%d", start+1)
	}
	return fmt.Sprintf("%d,%d", start+1, count)
}

func splitLines(s string) []string {
	s = strings.TrimSuffix(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}
