package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// gitID runs git with a fixed identity and returns its trimmed output.
func gitID(t *testing.T, dir string, args ...string) string {
	t.Helper()
	return strings.TrimSpace(git(t, dir, append([]string{"-c", "user.email=t@example.com", "-c", "user.name=t"}, args...)...))
}

// TestRepoImageStage stages a repository as a build would: with the base
// commits only (shallow, later history left out) or the whole history, from
// a bare mirror or a work tree, checked out at the first commit with no
// remote pointing back at the host.
func TestRepoImageStage(t *testing.T) {
	src := t.TempDir()
	gitID(t, src, "init", "-q", "-b", "main")
	var commits []string
	for _, body := range []string{"one\n", "two\n", "three\n", "four\n"} {
		if err := os.WriteFile(filepath.Join(src, "f.txt"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		gitID(t, src, "add", "-A")
		gitID(t, src, "commit", "-q", "-m", body)
		commits = append(commits, gitID(t, src, "rev-parse", "HEAD"))
	}
	bare := filepath.Join(t.TempDir(), "m.git")
	gitID(t, t.TempDir(), "clone", "-q", "--bare", src, bare)
	tests := []struct {
		name   string
		source string
		full   bool
		want   int // commits reachable in the staged repository
	}{
		{"base commits from a work tree", src, false, 2},
		{"base commits from a bare mirror", bare, false, 2},
		{"full history", bare, true, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := RepoImage{Name: "x", Base: BaseImage, Source: tt.source, Commits: []string{commits[1], commits[2]}, Full: tt.full}
			dst := filepath.Join(t.TempDir(), "testbed")
			if err := r.stage(context.Background(), dst); err != nil {
				t.Fatal(err)
			}
			if head := gitID(t, dst, "rev-parse", "HEAD"); head != commits[1] {
				t.Errorf("HEAD %s, want the first base commit %s", head, commits[1])
			}
			if b, _ := os.ReadFile(filepath.Join(dst, "f.txt")); string(b) != "two\n" {
				t.Errorf("work tree f.txt = %q", b)
			}
			if n := len(strings.Fields(gitID(t, dst, "rev-list", "--all"))); n != tt.want {
				t.Errorf("%d commits staged, want %d", n, tt.want)
			}
			if remotes := gitID(t, dst, "remote"); remotes != "" {
				t.Errorf("remotes %q left", remotes)
			}
		})
	}
	r := RepoImage{Name: "x", Source: src, Commits: []string{"0123456789012345678901234567890123456789"}}
	if err := r.stage(context.Background(), filepath.Join(t.TempDir(), "testbed")); err == nil || !strings.Contains(err.Error(), "0123456789") {
		t.Errorf("a commit the source lacks: %v", err)
	}
	// The digest follows what the image holds, not where it came from.
	a := RepoImage{Base: BaseImage, Source: src, Commits: commits[:2]}
	b := a
	b.Source = bare
	c := a
	c.Install = []string{"make"}
	if a.Digest() != b.Digest() || a.Digest() == c.Digest() {
		t.Errorf("digests: same contents %s %s, with install %s", a.Digest(), b.Digest(), c.Digest())
	}
}
