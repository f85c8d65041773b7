package reward

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/swetui/swetui/sandbox"
	"github.com/swetui/swetui/task"
)

// Apply methods of the harness's fallback chain, in the order they are tried:
// the eval-script protocol's own (sandbox owns it), so host and container
// verdicts compare as they are.
const (
	ApplyGit       = sandbox.ApplyGit       // git apply --verbose
	ApplyGitReject = sandbox.ApplyGitReject // git apply --verbose --reject
	ApplyPatch     = sandbox.ApplyPatch     // patch --batch --fuzz=5 -p1 --forward
	ApplyFailed    = sandbox.ApplyFailed
	ApplyEmpty     = sandbox.ApplyEmpty
)

// ApplyResult is the verdict of an apply check.
type ApplyResult struct {
	Applied  bool          `json:"applied"`
	Method   string        `json:"method"`           // ApplyGit, ApplyGitReject, ApplyPatch or ApplyFailed
	Output   string        `json:"output,omitempty"` // the last command's output, capped
	Duration time.Duration `json:"duration_ns"`
}

// ErrRepoUnavailable means no local copy of an instance's repository (or its
// base commit) could be found: an infrastructure failure, not a model one.
var ErrRepoUnavailable = errors.New("repository unavailable")

// Applier checks on the host whether patches apply to a repository at a
// commit, with the same fallback chain and verdicts as the container. It
// keeps, per repository, a bare copy sharing the source's objects, and per
// commit an index file read from the commit's tree; a check runs
// `git apply --cached --check` against that index, and only when that fails
// materialises the files the patch touches for the --reject and patch
// fallbacks. Nothing is ever checked out in full. Safe for concurrent use.
type Applier struct {
	// ReposDir holds clones (bare or not) named <owner>__<name>.
	ReposDir string
	// CacheDir holds the bare copies and index files; "" means a temporary
	// folder made on first use and removed by Close.
	CacheDir string
	// Fill, when set, is asked for a repository that neither Register nor
	// ReposDir provides (for example copied once out of the task's image);
	// it must leave a git repository (bare or not) at dst.
	Fill func(ctx context.Context, repo, dst string) error
	// CommandTimeout bounds each git or patch command (default 60s).
	CommandTimeout time.Duration

	mu       sync.Mutex
	paths    map[string]string // repo -> registered source path
	repos    map[string]*cachedRepo
	tmpCache bool
}

// cachedRepo and cachedIndex are made once; a failed attempt is not kept,
// so a cancelled context or a repository that appears later is retried.
type cachedRepo struct {
	fill   sync.Mutex
	gitDir string

	mu      sync.Mutex
	indexes map[string]*cachedIndex // commit -> index
}

type cachedIndex struct {
	mu   sync.Mutex
	path string
}

// Register makes path (a git repository, bare or not) the source of repo,
// ahead of ReposDir: the embedded suite hands its generated repositories
// over this way. Register before the first check of repo.
func (a *Applier) Register(repo, path string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.paths == nil {
		a.paths = map[string]string{}
	}
	a.paths[repo] = path
}

// RegisterInstance makes path the repository of one instance, ahead of its
// repo's: the embedded suite has a repository per task (task.MiniSuite's
// Materialize returns them by instance id).
func (a *Applier) RegisterInstance(instanceID, path string) {
	a.Register(instanceKey(instanceID), path)
}

func instanceKey(id string) string { return "instance@" + id }

// CheckInstance is Check against an instance's repository at its
// base_commit: the one registered for the instance, else its repo's.
func (a *Applier) CheckInstance(ctx context.Context, inst *task.Instance, diff string, p *Patch) (ApplyResult, error) {
	return a.Check(ctx, a.instanceRepo(inst), inst.BaseCommit, diff, p)
}

// instanceRepo is the repository key of an instance: the one registered
// for it, else its repo's.
func (a *Applier) instanceRepo(inst *task.Instance) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.paths[instanceKey(inst.InstanceID)]; ok {
		return instanceKey(inst.InstanceID)
	}
	return inst.Repo
}

// Close removes a temporary cache folder made by the Applier.
func (a *Applier) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.tmpCache && a.CacheDir != "" {
		err := os.RemoveAll(a.CacheDir)
		a.CacheDir, a.tmpCache, a.repos = "", false, nil
		return err
	}
	return nil
}

// RepoDirName is the folder name of repo ("owner/name") under ReposDir.
func RepoDirName(repo string) string { return task.RepoDirName(repo) }

func (a *Applier) timeout() time.Duration {
	if a.CommandTimeout > 0 {
		return a.CommandTimeout
	}
	return 60 * time.Second
}

func (a *Applier) repo(repo string) (*cachedRepo, string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.CacheDir == "" {
		dir, err := os.MkdirTemp("", "swetui-apply-")
		if err != nil {
			return nil, "", fmt.Errorf("apply cache: %w", err)
		}
		a.CacheDir, a.tmpCache = dir, true
	}
	if a.repos == nil {
		a.repos = map[string]*cachedRepo{}
	}
	r, ok := a.repos[repo]
	if !ok {
		r = &cachedRepo{indexes: map[string]*cachedIndex{}}
		a.repos[repo] = r
	}
	return r, a.CacheDir, nil
}

// gitDir returns the bare copy of repo, making it on first use.
func (a *Applier) gitDir(ctx context.Context, repo string) (string, error) {
	r, cache, err := a.repo(repo)
	if err != nil {
		return "", err
	}
	r.fill.Lock()
	defer r.fill.Unlock()
	if r.gitDir == "" {
		dir, err := a.fillRepo(ctx, repo, cache)
		if err != nil {
			return "", err
		}
		r.gitDir = dir
	}
	return r.gitDir, nil
}

func (a *Applier) fillRepo(ctx context.Context, repo, cache string) (string, error) {
	dst := filepath.Join(cache, RepoDirName(repo)+".git")
	if isBareRepo(dst) { // a persistent cache from an earlier run
		return dst, nil
	}
	a.mu.Lock()
	src := a.paths[repo]
	a.mu.Unlock()
	if src == "" && a.ReposDir != "" {
		cand := filepath.Join(a.ReposDir, RepoDirName(repo))
		if _, err := os.Stat(cand); err == nil {
			src = cand
		}
	}
	if src == "" && a.Fill != nil {
		filled := filepath.Join(cache, RepoDirName(repo)+".src")
		if err := a.Fill(ctx, repo, filled); err != nil {
			return "", fmt.Errorf("repo %s: fill: %w: %w", repo, ErrRepoUnavailable, err)
		}
		src = filled
	}
	if src == "" {
		return "", fmt.Errorf("repo %s: no clone at %s and none registered: %w", repo,
			filepath.Join(a.ReposDir, RepoDirName(repo)), ErrRepoUnavailable)
	}
	// --shared borrows the source's objects: the copy costs milliseconds and
	// isolates our refs and index files from the user's clone. It is made
	// beside its place and renamed, so an interrupted copy leaves nothing.
	tmp, err := os.MkdirTemp(cache, ".clone-")
	if err != nil {
		return "", fmt.Errorf("repo %s: %w", repo, err)
	}
	defer os.RemoveAll(tmp)
	if out, err := a.git(ctx, "", nil, nil, "clone", "--bare", "--shared", "--quiet", src, filepath.Join(tmp, "r.git")); err != nil {
		if ctx.Err() != nil {
			return "", fmt.Errorf("repo %s: bare copy of %s: %w", repo, src, ctx.Err())
		}
		return "", fmt.Errorf("repo %s: bare copy of %s: %w: %v: %s", repo, src, ErrRepoUnavailable, err, out)
	}
	if err := os.Rename(filepath.Join(tmp, "r.git"), dst); err != nil && !isBareRepo(dst) {
		return "", fmt.Errorf("repo %s: %w", repo, err)
	}
	return dst, nil
}

func isBareRepo(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "HEAD"))
	if err != nil {
		return false
	}
	_, err = os.Stat(filepath.Join(dir, "objects"))
	return err == nil
}

// index returns an index file holding commit's tree, made once per commit.
// Checks only read it (apply --check takes no lock), so all share one.
func (a *Applier) index(ctx context.Context, repo, gitDir, commit string) (string, error) {
	r, _, err := a.repo(repo)
	if err != nil {
		return "", err
	}
	r.mu.Lock()
	ix, ok := r.indexes[commit]
	if !ok {
		ix = &cachedIndex{}
		r.indexes[commit] = ix
	}
	r.mu.Unlock()
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.path == "" {
		path := filepath.Join(gitDir, "swetui-index-"+commit)
		if out, err := a.git(ctx, gitDir, []string{"GIT_INDEX_FILE=" + path}, nil, "read-tree", commit+"^{tree}"); err != nil {
			if ctx.Err() != nil {
				return "", fmt.Errorf("repo %s: base commit %s: %w", repo, commit, ctx.Err())
			}
			return "", fmt.Errorf("repo %s: base commit %s: %w: %v: %s", repo, commit, ErrRepoUnavailable, err, out)
		}
		ix.path = path
	}
	return ix.path, nil
}

// Prepare makes the bare copy and the base index of (repo, commit) ahead of
// the first check, so that its cost is not counted against a patch.
func (a *Applier) Prepare(ctx context.Context, repo, commit string) error {
	gitDir, err := a.gitDir(ctx, repo)
	if err != nil {
		return err
	}
	_, err = a.index(ctx, repo, gitDir, commit)
	return err
}

// Check runs the fallback chain for diff (already normalised) against repo at
// commit. p is the diff's parsed form (from ValidateDiff); the fallbacks
// materialise only the files it names. A returned error is an infrastructure
// failure (repository or commit unavailable, git broken), never a verdict.
func (a *Applier) Check(ctx context.Context, repo, commit, diff string, p *Patch) (ApplyResult, error) {
	start := time.Now()
	res, err := a.check(ctx, repo, commit, diff, p)
	res.Duration = time.Since(start)
	return res, err
}

func (a *Applier) check(ctx context.Context, repo, commit, diff string, p *Patch) (ApplyResult, error) {
	if strings.TrimSpace(diff) == "" {
		return ApplyResult{Applied: true, Method: ApplyEmpty}, nil
	}
	gitDir, err := a.gitDir(ctx, repo)
	if err != nil {
		return ApplyResult{}, err
	}
	idx, err := a.index(ctx, repo, gitDir, commit)
	if err != nil {
		return ApplyResult{}, err
	}
	// 1. git apply, against the base index: no files at all.
	out, err := a.git(ctx, gitDir, []string{"GIT_INDEX_FILE=" + idx}, strings.NewReader(diff),
		"apply", "--cached", "--check", "--verbose", "-")
	if err == nil {
		return ApplyResult{Applied: true, Method: ApplyGit, Output: capOutput(out)}, nil
	}
	if !isExit(err) {
		return ApplyResult{}, fmt.Errorf("repo %s: git apply: %w", repo, err)
	}
	if p == nil {
		if p, err = ValidateDiff(diff); err != nil {
			// git itself judged it; without paths the fallbacks cannot run
			// on the host, and a diff this broken does not apply anyway.
			return ApplyResult{Method: ApplyFailed, Output: capOutput(out)}, nil
		}
	}
	// 2 and 3 need files: materialise only the touched ones, fresh for each
	// attempt, as the eval script reverts a failed attempt before the next.
	tmp, err := os.MkdirTemp("", "swetui-apply-")
	if err != nil {
		return ApplyResult{}, fmt.Errorf("apply check: %w", err)
	}
	defer os.RemoveAll(tmp)
	patchFile := filepath.Join(tmp, "model.patch")
	if err := os.WriteFile(patchFile, []byte(diff), 0o644); err != nil {
		return ApplyResult{}, fmt.Errorf("apply check: %w", err)
	}
	files, err := a.readFiles(ctx, gitDir, commit, p.Paths())
	if err != nil {
		return ApplyResult{}, fmt.Errorf("repo %s: %w", repo, err)
	}
	attempts := []struct {
		method string
		name   string
		args   []string
	}{
		{ApplyGitReject, "git", []string{"apply", "--verbose", "--reject", patchFile}},
		{ApplyPatch, "patch", []string{"--batch", "--fuzz=5", "-p1", "--forward", "-i", patchFile}},
	}
	for i, at := range attempts {
		work := filepath.Join(tmp, "tree"+strconv.Itoa(i))
		if err := materialise(work, files); err != nil {
			return ApplyResult{}, fmt.Errorf("apply check: %w", err)
		}
		// GIT_CEILING_DIRECTORIES keeps git from finding a repository above
		// the folder; git apply then patches plain files, as in /testbed.
		out, err = a.combined(ctx, work, []string{"GIT_CEILING_DIRECTORIES=" + tmp}, nil, at.name, at.args...)
		if err == nil {
			return ApplyResult{Applied: true, Method: at.method, Output: capOutput(out)}, nil
		}
		if !isExit(err) {
			return ApplyResult{}, fmt.Errorf("apply check: %s: %w", at.name, err)
		}
	}
	return ApplyResult{Method: ApplyFailed, Output: capOutput(out)}, nil
}

type blobFile struct {
	path string
	mode string
	data []byte
}

// readFiles reads the files among paths that exist at commit.
func (a *Applier) readFiles(ctx context.Context, gitDir, commit string, paths []string) ([]blobFile, error) {
	if len(paths) == 0 {
		return nil, nil
	}
	args := append([]string{"ls-tree", "-z", "--full-tree", commit, "--"}, paths...)
	out, stderr, err := a.run(ctx, "", gitEnv(gitDir, nil), nil, "git", args...)
	if err != nil {
		return nil, fmt.Errorf("ls-tree %s: %v: %s", commit, err, stderr)
	}
	var files []blobFile
	var req bytes.Buffer
	for _, rec := range strings.Split(string(out), "\x00") {
		if rec == "" {
			continue
		}
		meta, path, ok := strings.Cut(rec, "\t")
		f := strings.Fields(meta)
		if !ok || len(f) != 3 {
			return nil, fmt.Errorf("ls-tree %s: unexpected record %q", commit, rec)
		}
		if f[1] != "blob" { // a directory or submodule under that name
			continue
		}
		files = append(files, blobFile{path: path, mode: f[0]})
		req.WriteString(f[2] + "\n")
	}
	if len(files) == 0 {
		return nil, nil
	}
	blobs, _, err := a.run(ctx, "", gitEnv(gitDir, nil), &req, "git", "cat-file", "--batch")
	if err != nil {
		return nil, fmt.Errorf("cat-file: %v", err)
	}
	br := bufio.NewReader(bytes.NewReader(blobs))
	for i := range files {
		header, err := br.ReadString('\n')
		if err != nil {
			return nil, fmt.Errorf("cat-file: short output for %s", files[i].path)
		}
		f := strings.Fields(header)
		if len(f) != 3 {
			return nil, fmt.Errorf("cat-file: %s: %q", files[i].path, strings.TrimSpace(header))
		}
		n, err := strconv.Atoi(f[2])
		if err != nil {
			return nil, fmt.Errorf("cat-file: %s: size %q", files[i].path, f[2])
		}
		files[i].data = make([]byte, n)
		if _, err := io.ReadFull(br, files[i].data); err != nil {
			return nil, fmt.Errorf("cat-file: %s: %w", files[i].path, err)
		}
		if _, err := br.ReadByte(); err != nil { // the newline after the content
			return nil, fmt.Errorf("cat-file: %s: %w", files[i].path, err)
		}
	}
	return files, nil
}

func materialise(dir string, files []blobFile) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		dst := filepath.Join(dir, filepath.FromSlash(f.path))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		switch f.mode {
		case "120000":
			if err := os.Symlink(string(f.data), dst); err != nil {
				return err
			}
		default:
			perm := os.FileMode(0o644)
			if f.mode == "100755" {
				perm = 0o755
			}
			if err := os.WriteFile(dst, f.data, perm); err != nil {
				return err
			}
		}
	}
	return nil
}

func gitEnv(gitDir string, env []string) []string {
	if gitDir != "" {
		env = append(env, "GIT_DIR="+gitDir)
	}
	return env
}

// git runs git with GIT_DIR set to gitDir (when non-empty) and returns its
// stdout and stderr together.
func (a *Applier) git(ctx context.Context, gitDir string, env []string, stdin io.Reader, args ...string) ([]byte, error) {
	return a.combined(ctx, "", gitEnv(gitDir, env), stdin, "git", args...)
}

func (a *Applier) combined(ctx context.Context, dir string, env []string, stdin io.Reader, name string, args ...string) ([]byte, error) {
	stdout, stderr, err := a.run(ctx, dir, env, stdin, name, args...)
	return append(stdout, stderr...), err
}

// run runs a command with a fixed environment and the Applier's timeout.
func (a *Applier) run(ctx context.Context, dir string, env []string, stdin io.Reader, name string, args ...string) (stdout, stderr []byte, err error) {
	ctx, cancel := context.WithTimeout(ctx, a.timeout())
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	// A fixed, minimal environment: no user config, no pager, no prompts,
	// the same messages whatever the locale.
	cmd.Env = append([]string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir(), "LC_ALL=C",
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_TERMINAL_PROMPT=0",
	}, env...)
	cmd.Stdin = stdin
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	if ctx.Err() != nil {
		return out.Bytes(), errOut.Bytes(), fmt.Errorf("%s %s: %w", name, args[0], ctx.Err())
	}
	return out.Bytes(), errOut.Bytes(), err
}

func isExit(err error) bool {
	var ee *exec.ExitError
	return errors.As(err, &ee)
}

const outputCap = 4 << 10

func capOutput(b []byte) string {
	if len(b) > outputCap {
		return string(b[:outputCap]) + "\n[... output truncated]"
	}
	return string(b)
}

// ReadFiles returns the contents at an instance's base_commit of those of
// paths that exist there as files (path -> content; a symlink's is its
// target): the base files of the shaping terms. An error is an
// infrastructure failure, as for Check.
func (a *Applier) ReadFiles(ctx context.Context, inst *task.Instance, paths []string) (map[string]string, error) {
	key := a.instanceRepo(inst)
	gitDir, err := a.gitDir(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("read files: %w", err)
	}
	files, err := a.readFiles(ctx, gitDir, inst.BaseCommit, paths)
	if err != nil {
		return nil, fmt.Errorf("read files: repo %s: %w", key, err)
	}
	out := make(map[string]string, len(files))
	for _, f := range files {
		out[f.path] = string(f.data)
	}
	return out, nil
}
