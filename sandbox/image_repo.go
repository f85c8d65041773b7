package sandbox

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// RepoImage is an image swetui builds for tasks whose dataset names none:
// FROM Base, a git repository at Workdir holding the commits the tasks need
// (Commits[0] checked out), then the install commands, run as root in
// Workdir. The repository belongs to uid 1000, which the tests run as.
type RepoImage struct {
	Name    string
	Base    string
	Source  string   // a git folder (bare or not) or a git URL
	Commits []string // commits the image must hold; the first is checked out
	Full    bool     // the whole history of Source, not only Commits
	Install []string
	Workdir string // "" = /testbed
	Network string // network of the build's RUN steps; "" = none
}

// LabelRepoDigest labels a built repository image with RepoImage.Digest,
// so that an image of other commits or commands is built again.
const LabelRepoDigest = "swetui.repo.digest"

// testbedUID owns the repository in built images.
const testbedUID = 1000

func (r RepoImage) workdir() string {
	if r.Workdir == "" {
		return "/testbed"
	}
	return r.Workdir
}

// Dockerfile is the image's Dockerfile; the build context holds the staged
// repository as testbed/.
func (r RepoImage) Dockerfile() string {
	var b strings.Builder
	fmt.Fprintf(&b, "FROM %s\n", r.Base)
	fmt.Fprintf(&b, "COPY --chown=%d:%d testbed/ %s/\n", testbedUID, testbedUID, r.workdir())
	fmt.Fprintf(&b, "WORKDIR %s\n", r.workdir())
	if len(r.Install) > 0 {
		b.WriteString("USER root\n")
		for _, c := range r.Install {
			fmt.Fprintf(&b, "RUN %s\n", c)
		}
		// What the commands wrote in the repository stays writable by the tests.
		fmt.Fprintf(&b, "RUN chown -R %d:%d %s\n", testbedUID, testbedUID, r.workdir())
	}
	fmt.Fprintf(&b, "USER %d:%d\n", testbedUID, testbedUID)
	return b.String()
}

// Digest identifies what the image holds: base, commits, history mode and
// commands (the Dockerfile), not where the repository came from.
func (r RepoImage) Digest() string {
	h := sha256.New()
	commits := append([]string(nil), r.Commits...)
	sort.Strings(commits[min(1, len(commits)):]) // the checked-out one first, the rest as a set
	fmt.Fprintf(h, "%s\x00%v\x00%s\x00%s", r.Dockerfile(), r.Full, strings.Join(commits, ","), r.Network)
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// Source is the ImageSource that builds r: its context stages the
// repository in a temporary folder (removed when the context is closed).
func (r RepoImage) ImageSource(ctx context.Context) ImageSource {
	network := r.Network
	if network == "" {
		network = "none"
	}
	return ImageSource{
		Name:    r.Name,
		Labels:  map[string]string{LabelRepoDigest: r.Digest()},
		Network: network,
		Context: func() (io.ReadCloser, error) { return r.openContext(ctx) },
	}
}

// openContext stages the repository and streams the build context.
func (r RepoImage) openContext(ctx context.Context) (io.ReadCloser, error) {
	if len(r.Commits) == 0 {
		return nil, fmt.Errorf("image %s: no commit to check out", r.Name)
	}
	stage, err := os.MkdirTemp("", "swetui-stage-")
	if err != nil {
		return nil, fmt.Errorf("stage %s: %w", r.Name, err)
	}
	repo := filepath.Join(stage, "testbed")
	if err := r.stage(ctx, repo); err != nil {
		os.RemoveAll(stage)
		return nil, err
	}
	pr, pw := io.Pipe()
	go func() {
		err := writeContext(pw, r.Dockerfile()+fmt.Sprintf("LABEL %s=%q\n", LabelRepoDigest, r.Digest()), repo)
		pw.CloseWithError(err)
	}()
	return &stagedContext{PipeReader: pr, dir: stage}, nil
}

type stagedContext struct {
	*io.PipeReader
	dir string
}

func (s *stagedContext) Close() error {
	err := s.PipeReader.Close()
	os.RemoveAll(s.dir)
	return err
}

// stage makes dst a repository holding the commits (or the whole history)
// of the source, checked out at the first commit, with no remote.
func (r RepoImage) stage(ctx context.Context, dst string) error {
	git := func(args ...string) error {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "GIT_CONFIG_NOSYSTEM=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	src := r.Source
	if st, err := os.Stat(src); err == nil && st.IsDir() {
		if src, err = filepath.Abs(src); err != nil {
			return fmt.Errorf("stage %s: %w", r.Name, err)
		}
	}
	if err := git("init", "-q", dst); err != nil {
		return fmt.Errorf("stage %s: %w", r.Name, err)
	}
	if r.Full {
		// Every branch and tag, as the source has them.
		if err := git("-C", dst, "fetch", "-q", "--tags", src, "+refs/heads/*:refs/heads/*"); err != nil {
			return fmt.Errorf("stage %s from %s: %w", r.Name, r.Source, err)
		}
	} else {
		// Only the base commits, each without its history. A source that
		// refuses a fetch by id (a short id, a server without
		// allowAnySHA1InWant) gets fetched whole instead.
		args := append([]string{"-C", dst, "-c", "uploadpack.allowAnySHA1InWant=true", "fetch", "-q", "--depth=1", "--no-tags", src}, dedupe(r.Commits)...)
		if err := git(args...); err != nil {
			if err2 := git("-C", dst, "fetch", "-q", "--tags", src, "+refs/heads/*:refs/heads/*"); err2 != nil {
				return fmt.Errorf("stage %s from %s: %w (and fetching the whole history: %v)", r.Name, r.Source, err, err2)
			}
		}
	}
	// A ref per commit keeps it, whatever the source's branches are.
	for _, c := range dedupe(r.Commits) {
		if err := git("-C", dst, "update-ref", "refs/swetui/base/"+refName(c), c); err != nil {
			return fmt.Errorf("stage %s: commit %s is not in %s: %w", r.Name, c, r.Source, err)
		}
	}
	if err := git("-C", dst, "-c", "advice.detachedHead=false", "checkout", "-q", "-f", "--detach", r.Commits[0]); err != nil {
		return fmt.Errorf("stage %s: %w", r.Name, err)
	}
	return nil
}

func dedupe(ss []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range ss {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// refName makes a commit-ish usable as the last part of a ref name.
func refName(c string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == '~' || r == '^' || r == ':' || r == ' ' {
			return '_'
		}
		return r
	}, c)
}

// writeContext writes a build context: the Dockerfile and the folder repo
// as testbed/, symlinks kept, modes kept.
func writeContext(w io.Writer, dockerfile, repo string) error {
	tw := tar.NewWriter(w)
	if err := tw.WriteHeader(&tar.Header{Name: "Dockerfile", Mode: 0o644, Size: int64(len(dockerfile)), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := io.WriteString(tw, dockerfile); err != nil {
		return err
	}
	err := filepath.WalkDir(repo, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(repo, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(filepath.Join("testbed", rel))
		info, err := de.Info()
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		h.Name = name
		if info.IsDir() {
			h.Name += "/"
		}
		h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "", ""
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return fmt.Errorf("build context: %w", err)
	}
	return tw.Close()
}
