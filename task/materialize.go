package task

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/swetui/swetui/config"
)

const (
	// MiniBaseImage is what the suite's image is built FROM (.ci/base-image.sh).
	MiniBaseImage = "swetui/base:bookworm"
	// MiniDigestLabel labels the suite's image with the suite's Digest, so
	// that a prepare step can tell an up-to-date image from a stale one.
	MiniDigestLabel = "swetui.mini.digest"
	// miniUID owns the repositories in the image: the base image's swetui
	// user, so that tests run as non-root.
	miniUID, miniUser = 1000, "swetui"
)

// GenerateMiniFor generates the suite cfg describes (data.mini_seed,
// data.mini_tasks, data.test_fraction, sandbox.image).
func GenerateMiniFor(cfg config.Config) (*MiniSuite, error) {
	d := cfg.Data
	return GenerateMini(d.MiniSeed, d.MiniTasks, d.TestFrac, cfg.Sandbox.Image)
}

// DefaultCacheDir is where materialised repositories are kept between runs.
func DefaultCacheDir() string {
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "swetui")
	}
	return filepath.Join(os.TempDir(), "swetui-cache")
}

// MaterializeMini writes the suite's git repositories, each at its
// base_commit, under cacheDir/mini-<digest>/<instance_id> (reusing them when
// already there) and returns each instance id's repository path. Reward's
// host-side apply checks run against these.
func MaterializeMini(ctx context.Context, cacheDir string, cfg config.Config) (map[string]string, error) {
	s, err := GenerateMiniFor(cfg)
	if err != nil {
		return nil, err
	}
	return s.Materialize(ctx, cacheDir)
}

// Materialize is MaterializeMini for a generated suite.
func (s *MiniSuite) Materialize(ctx context.Context, cacheDir string) (map[string]string, error) {
	final := filepath.Join(cacheDir, "mini-"+s.Digest())
	paths := make(map[string]string, len(s.Tasks))
	for _, t := range s.Tasks {
		paths[t.Instance.InstanceID] = filepath.Join(final, t.Instance.InstanceID)
	}
	if st, err := os.Stat(final); err == nil && st.IsDir() {
		return paths, nil
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return nil, fmt.Errorf("materialize mini suite: %w", err)
	}
	// Write beside the final folder and rename it into place, so that a
	// crash or a concurrent run never leaves a half-written cache behind.
	tmp, err := os.MkdirTemp(cacheDir, ".mini-tmp-")
	if err != nil {
		return nil, fmt.Errorf("materialize mini suite: %w", err)
	}
	defer os.RemoveAll(tmp)
	// MkdirTemp makes 0700; the repositories may be read by other users
	// (a container's uid 1000 through a bind mount).
	if err := os.Chmod(tmp, 0o755); err != nil {
		return nil, fmt.Errorf("materialize mini suite: %w", err)
	}
	// Writing is syscall-bound: a few workers, each with whole repositories.
	jobs := make(chan *MiniTask)
	errs := make(chan error, materializeWorkers)
	var wg sync.WaitGroup
	for w := 0; w < materializeWorkers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var first error
			for t := range jobs {
				if first == nil {
					first = writeRepoDir(tmp, t)
				}
			}
			errs <- first
		}()
	}
	for i := range s.Tasks {
		if ctx.Err() != nil {
			break
		}
		jobs <- &s.Tasks[i]
	}
	close(jobs)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, final); err != nil {
		if st, serr := os.Stat(final); serr == nil && st.IsDir() {
			return paths, nil // another process won the race
		}
		return nil, fmt.Errorf("materialize mini suite: %w", err)
	}
	return paths, nil
}

const materializeWorkers = 4

// writeRepoDir writes one task's repository under dir.
func writeRepoDir(dir string, t *MiniTask) error {
	made := map[string]bool{}
	put := func(p string, data []byte) error {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if d := filepath.Dir(full); !made[d] {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
			made[d] = true
		}
		return os.WriteFile(full, data, 0o644)
	}
	if err := t.repo.write(t.Instance.InstanceID, put); err != nil {
		return fmt.Errorf("materialize %s: %w", t.Instance.InstanceID, err)
	}
	return nil
}

// Dockerfile is the suite image's Dockerfile.
func (s *MiniSuite) Dockerfile() string {
	return fmt.Sprintf(`FROM %s
COPY gitconfig /etc/gitconfig
COPY --chown=%d:%d repos/ %s/
LABEL %s="%s"
USER %s
WORKDIR %s
`, MiniBaseImage, miniUID, miniUID, MiniReposDir, MiniDigestLabel, s.Digest(), miniUser, MiniReposDir)
}

// MiniBuildContext writes the Docker build context of the suite's image as
// a tar stream to w: a Dockerfile FROM MiniBaseImage, a system gitconfig
// that trusts the repositories whoever runs git, and every repository under
// /repos/<instance_id>, owned by the swetui user (uid 1000). Tag the image
// with sandbox.image.
func MiniBuildContext(ctx context.Context, cfg config.Config, w io.Writer) error {
	s, err := GenerateMiniFor(cfg)
	if err != nil {
		return err
	}
	return s.WriteBuildContext(ctx, w)
}

// OpenMiniBuildContext streams MiniBuildContext through a pipe, in the shape
// of sandbox.ImageSource.Context. Closing the reader early stops the writer.
func OpenMiniBuildContext(ctx context.Context, cfg config.Config) (io.ReadCloser, error) {
	s, err := GenerateMiniFor(cfg)
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(s.WriteBuildContext(ctx, pw)) }()
	return pr, nil
}

// WriteBuildContext is MiniBuildContext for a generated suite. The stream
// is deterministic: same suite, same bytes.
func (s *MiniSuite) WriteBuildContext(ctx context.Context, w io.Writer) error {
	tw := tar.NewWriter(w)
	mtime := time.Unix(miniEpoch, 0).UTC()
	dirs := map[string]bool{}
	header := func(name string, mode int64, size int, typ byte) *tar.Header {
		return &tar.Header{Name: name, Mode: mode, Size: int64(size), Typeflag: typ, ModTime: mtime,
			Uid: miniUID, Gid: miniUID, Uname: miniUser, Gname: miniUser, Format: tar.FormatPAX}
	}
	var mkdirs func(dir string) error
	mkdirs = func(dir string) error {
		if dir == "." || dir == "" || dirs[dir] {
			return nil
		}
		if err := mkdirs(path.Dir(dir)); err != nil {
			return err
		}
		dirs[dir] = true
		return tw.WriteHeader(header(dir+"/", 0o755, 0, tar.TypeDir))
	}
	put := func(p string, data []byte) error {
		if err := mkdirs(path.Dir(p)); err != nil {
			return err
		}
		if err := tw.WriteHeader(header(p, 0o644, len(data), tar.TypeReg)); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	if err := put("Dockerfile", []byte(s.Dockerfile())); err != nil {
		return fmt.Errorf("mini build context: %w", err)
	}
	if err := put("gitconfig", []byte("[safe]\n\tdirectory = *\n")); err != nil {
		return fmt.Errorf("mini build context: %w", err)
	}
	for _, t := range s.Tasks {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := t.repo.write("repos/"+t.Instance.InstanceID, put); err != nil {
			return fmt.Errorf("mini build context: %s: %w", t.Instance.InstanceID, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("mini build context: %w", err)
	}
	return nil
}

// Task returns the suite's task with an instance id.
func (s *MiniSuite) Task(id string) (*MiniTask, bool) {
	for i := range s.Tasks {
		if s.Tasks[i].Instance.InstanceID == id {
			return &s.Tasks[i], true
		}
	}
	return nil, false
}

// RepoFile reads one file of a repository at its base commit from a
// checkout (a materialised mini repository or a clone in reward.repos_dir).
func RepoFile(repoDir, name string) (string, error) {
	if strings.Contains(name, "..") || path.IsAbs(name) {
		return "", fmt.Errorf("read %s in %s: path leaves the repository", name, repoDir)
	}
	b, err := os.ReadFile(filepath.Join(repoDir, filepath.FromSlash(name)))
	if err != nil {
		return "", fmt.Errorf("read repository file: %w", err)
	}
	return string(b), nil
}
