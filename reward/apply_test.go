package reward

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

const fixedGitDate = "2024-01-01T00:00:00+00:00"

// gitT runs git in dir for a test.
func gitT(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	// Fixed identity and dates: the same files give the same commit, here
	// and in the integration test's image.
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t",
		"GIT_AUTHOR_DATE="+fixedGitDate, "GIT_COMMITTER_DATE="+fixedGitDate)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// makeRepo creates a repository with files committed, returning its path and
// the commit.
func makeRepo(t testing.TB, files map[string]string) (string, string) {
	t.Helper()
	dir := t.TempDir()
	gitT(t, dir, "init", "-q")
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gitT(t, dir, "add", "-A")
	gitT(t, dir, "commit", "-q", "-m", "base")
	return dir, gitT(t, dir, "rev-parse", "HEAD")
}

func numbered(prefix string, n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "%s line %d\n", prefix, i)
	}
	return b.String()
}

var applyFiles = map[string]string{
	"pkg/mod.py":    numbered("mod", 30),
	"pkg/other.py":  "x = 1\n",
	"README":        "readme\n",
	"tests/test.py": "def test(): pass\n",
}

// applyCases are patches with the verdict the harness chain gives them.
var applyCases = []struct {
	name   string
	diff   string
	method string
}{
	{"clean", "diff --git a/pkg/mod.py b/pkg/mod.py\n--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -4,3 +4,3 @@\n mod line 4\n-mod line 5\n+MOD LINE 5\n mod line 6\n", ApplyGit},
	{"offset hunk", "--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -3,3 +3,3 @@\n mod line 14\n-mod line 15\n+changed\n mod line 16\n", ApplyGit},
	{"new file", "diff --git a/pkg/new.py b/pkg/new.py\nnew file mode 100644\n--- /dev/null\n+++ b/pkg/new.py\n@@ -0,0 +1 @@\n+y = 2\n", ApplyGit},
	{"delete", "diff --git a/README b/README\ndeleted file mode 100644\n--- a/README\n+++ /dev/null\n@@ -1 +0,0 @@\n-readme\n", ApplyGit},
	{"rename", "diff --git a/pkg/other.py b/pkg/renamed.py\nsimilarity index 100%\nrename from pkg/other.py\nrename to pkg/renamed.py\n", ApplyGit},
	{"two files", "--- a/pkg/other.py\n+++ b/pkg/other.py\n@@ -1 +1 @@\n-x = 1\n+x = 3\n--- a/README\n+++ b/README\n@@ -1 +1,2 @@\n readme\n+more\n", ApplyGit},
	{"hunk at line 1 must match the start", "--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -1,3 +1,3 @@\n mod line 14\n-mod line 15\n+changed\n mod line 16\n", ApplyPatch},
	{"needs fuzz", "--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -9,7 +9,7 @@\n mod line 9\n WRONG 10\n mod line 11\n-mod line 12\n+twelve\n mod line 13\n WRONG 14\n mod line 15\n", ApplyPatch},
	{"wrong removed line", "--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -5 +5 @@\n-not there\n+x\n", ApplyFailed},
	{"missing file", "--- a/pkg/absent.py\n+++ b/pkg/absent.py\n@@ -1 +1 @@\n-a\n+b\n", ApplyFailed},
	{"delete missing file", "diff --git a/nope.py b/nope.py\ndeleted file mode 100644\n--- a/nope.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n", ApplyFailed},
	{"create existing file", "diff --git a/README b/README\nnew file mode 100644\n--- /dev/null\n+++ b/README\n@@ -0,0 +1 @@\n+again\n", ApplyFailed},
	{"already applied", "--- a/pkg/other.py\n+++ b/pkg/other.py\n@@ -1 +1 @@\n-x = 0\n+x = 1\n", ApplyFailed},
	{"one of two hunks fails", "--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -2,3 +2,3 @@\n mod line 2\n-mod line 3\n+three\n mod line 4\n@@ -20,3 +20,3 @@\n mod line 20\n-nothing like it\n+x\n mod line 22\n", ApplyFailed},
}

func TestApplierCheck(t *testing.T) {
	dir, commit := makeRepo(t, applyFiles)
	a := &Applier{}
	defer a.Close()
	a.Register("acme/widget", dir)
	ctx := context.Background()
	for _, tt := range applyCases {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ValidateDiff(tt.diff)
			if err != nil {
				t.Fatalf("test patch invalid: %v", err)
			}
			res, err := a.Check(ctx, "acme/widget", commit, tt.diff, p)
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			if res.Method != tt.method || res.Applied != (tt.method != ApplyFailed) {
				t.Errorf("Check = %+v, want method %s", res, tt.method)
			}
		})
	}
	// The source clone is untouched: no checkout, no index change.
	if st := gitT(t, dir, "status", "--porcelain"); st != "" {
		t.Errorf("source repository changed: %s", st)
	}
}

// TestApplierMatchesFullCheckout runs the container's fallback chain (the
// eval script's commands, each attempt reverted before the next) on a full
// checkout and compares its verdict with the host fast path's, patch by patch.
func TestApplierMatchesFullCheckout(t *testing.T) {
	dir, commit := makeRepo(t, applyFiles)
	a := &Applier{}
	defer a.Close()
	a.Register("acme/widget", dir)
	for _, tt := range applyCases {
		t.Run(tt.name, func(t *testing.T) {
			work, pf := checkoutWithPatch(t, dir, commit, tt.diff)
			script := `
revert() { git checkout -q -- . ; git clean -qfd ; }
if git apply --verbose "$1"; then echo git-apply
elif revert; git apply --verbose --reject "$1"; then echo git-apply-reject
elif revert; patch --batch --fuzz=5 -p1 --forward -i "$1"; then echo patch
else echo failed; fi`
			cmd := exec.Command("bash", "-c", script, "chain", pf)
			cmd.Dir = work
			cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null")
			out, _ := cmd.CombinedOutput()
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			inContainer := lines[len(lines)-1]
			p, _ := ValidateDiff(tt.diff)
			res, err := a.Check(context.Background(), "acme/widget", commit, tt.diff, p)
			if err != nil {
				t.Fatal(err)
			}
			if res.Method != inContainer {
				t.Errorf("host says %s, full checkout says %s\n%s", res.Method, inContainer, out)
			}
		})
	}
}

func TestApplierReposDirAndErrors(t *testing.T) {
	src, commit := makeRepo(t, applyFiles)
	repos := t.TempDir()
	// A bare clone named owner__name, as reward.repos_dir holds them.
	gitT(t, repos, "clone", "-q", "--bare", src, "acme__widget")
	a := &Applier{ReposDir: repos, CacheDir: t.TempDir()}
	ctx := context.Background()
	res, err := a.Check(ctx, "acme/widget", commit, applyCases[0].diff, nil)
	if err != nil || res.Method != ApplyGit {
		t.Fatalf("Check via repos_dir = %+v, %v", res, err)
	}
	_, err = a.Check(ctx, "acme/absent", commit, applyCases[0].diff, nil)
	if !errors.Is(err, ErrRepoUnavailable) {
		t.Errorf("unknown repo: err = %v, want ErrRepoUnavailable", err)
	}
	_, err = a.Check(ctx, "acme/widget", strings.Repeat("ab", 20), applyCases[0].diff, nil)
	if !errors.Is(err, ErrRepoUnavailable) {
		t.Errorf("unknown commit: err = %v, want ErrRepoUnavailable", err)
	}
	// A cancelled check is an error, and is not remembered.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	fresh := &Applier{ReposDir: repos, CacheDir: t.TempDir()}
	if _, err := fresh.Check(cancelled, "acme/widget", commit, applyCases[0].diff, nil); err == nil {
		t.Errorf("check with a cancelled context succeeded")
	}
	if res, err := fresh.Check(ctx, "acme/widget", commit, applyCases[0].diff, nil); err != nil || !res.Applied {
		t.Errorf("check after a cancelled one = %+v, %v", res, err)
	}
	if res, err := a.Check(ctx, "acme/widget", commit, "", nil); err != nil || res.Method != ApplyEmpty {
		t.Errorf("empty patch: %+v, %v", res, err)
	}
	// Fill is asked when nothing else has the repository.
	filled := &Applier{CacheDir: t.TempDir(), Fill: func(ctx context.Context, repo, dst string) error {
		cmd := exec.CommandContext(ctx, "git", "clone", "-q", src, dst)
		return cmd.Run()
	}}
	if res, err := filled.Check(ctx, "acme/filled", commit, applyCases[0].diff, nil); err != nil || !res.Applied {
		t.Errorf("Check via Fill = %+v, %v", res, err)
	}
}

// bigRepo makes a repository of n Python files of 60 lines each.
func bigRepo(t testing.TB, n int) (string, string) {
	files := map[string]string{}
	for i := 0; i < n; i++ {
		files[fmt.Sprintf("pkg%02d/mod%04d.py", i%40, i)] = numbered(fmt.Sprintf("m%d", i), 60)
	}
	return makeRepo(t, files)
}

func bigPatch(i int, ok bool) string {
	name := fmt.Sprintf("pkg%02d/mod%04d.py", i%40, i)
	old := fmt.Sprintf("m%d line 31", i)
	if !ok {
		old = "no such line" // forces the fallbacks
	}
	return fmt.Sprintf("diff --git a/%s b/%s\n--- a/%s\n+++ b/%s\n@@ -30,3 +30,3 @@\n m%d line 30\n-%s\n+changed\n m%d line 32\n", name, name, name, name, i, old, i)
}

// BenchmarkApplyCheck measures the host check on a 2,000-file repository:
// patches that apply (one git process) and ones that fail through the whole
// chain (materialising their files twice). Reports the median.
func BenchmarkApplyCheck(b *testing.B) {
	dir, commit := bigRepo(b, 2000)
	for _, ok := range []bool{true, false} {
		b.Run(map[bool]string{true: "applies", false: "fails"}[ok], func(b *testing.B) {
			a := &Applier{}
			defer a.Close()
			a.Register("acme/big", dir)
			ctx := context.Background()
			if err := a.Prepare(ctx, "acme/big", commit); err != nil {
				b.Fatal(err)
			}
			var durs []time.Duration
			i := 0
			for b.Loop() {
				d := bigPatch(i%2000, ok)
				i++
				res, err := a.Check(ctx, "acme/big", commit, d, nil)
				if err != nil || res.Applied != ok {
					b.Fatalf("Check = %+v, %v", res, err)
				}
				durs = append(durs, res.Duration)
			}
			b.ReportMetric(float64(median(durs).Microseconds())/1000, "median-ms")
		})
	}
}

// BenchmarkApplyCheckConcurrent checks groups of 8 patches at once, as a GRPO
// group arrives; reports the wall time per group.
func BenchmarkApplyCheckConcurrent(b *testing.B) {
	dir, commit := bigRepo(b, 2000)
	a := &Applier{}
	defer a.Close()
	a.Register("acme/big", dir)
	ctx := context.Background()
	if err := a.Prepare(ctx, "acme/big", commit); err != nil {
		b.Fatal(err)
	}
	g := 0
	for b.Loop() {
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for k := 0; k < 8; k++ {
			d := bigPatch((g*8+k)%2000, k%4 != 3) // a quarter go through the fallbacks
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := a.Check(ctx, "acme/big", commit, d, nil); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
		g++
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/1000, "ms/group-of-8")
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// checkoutWithPatch clones dir at commit into a fresh folder and writes diff
// to a patch file beside it, as the container has them.
func checkoutWithPatch(t *testing.T, dir, commit, diff string) (work, patchFile string) {
	t.Helper()
	work = t.TempDir()
	gitT(t, work, "clone", "-q", dir, ".")
	gitT(t, work, "checkout", "-q", commit)
	patchFile = filepath.Join(t.TempDir(), "model.patch")
	if err := os.WriteFile(patchFile, []byte(diff), 0o644); err != nil {
		t.Fatal(err)
	}
	return work, patchFile
}
