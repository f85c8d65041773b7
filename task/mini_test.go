package task

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/swetui/swetui/config"
)

func miniSuite(t testing.TB, seed int64, n int) *MiniSuite {
	t.Helper()
	s, err := GenerateMini(seed, n, 0.1, "swetui/mini:latest")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func buildContextSum(t testing.TB, s *MiniSuite) [32]byte {
	t.Helper()
	var b bytes.Buffer
	if err := s.WriteBuildContext(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b.Bytes())
}

func TestMiniDeterministic(t *testing.T) {
	a, b := miniSuite(t, 1, 300), miniSuite(t, 1, 300)
	ja, err := a.MarshalJSONL()
	if err != nil {
		t.Fatal(err)
	}
	jb, _ := b.MarshalJSONL()
	if !bytes.Equal(ja, jb) {
		t.Fatal("same seed, different instances")
	}
	if buildContextSum(t, a) != buildContextSum(t, b) {
		t.Fatal("same seed, different build contexts")
	}
	if a.Digest() != b.Digest() {
		t.Fatal("same seed, different digests")
	}
	// A task depends on (seed, number) alone: growing the suite keeps it.
	small := miniSuite(t, 1, 40)
	for i := range small.Tasks {
		if !reflect.DeepEqual(small.Tasks[i].Instance, a.Tasks[i].Instance) {
			t.Fatalf("task %d changed when the suite grew", i)
		}
	}
	other := miniSuite(t, 2, 300)
	jo, _ := other.MarshalJSONL()
	if bytes.Equal(ja, jo) || other.Digest() == a.Digest() {
		t.Fatal("different seeds, same suite")
	}
}

func TestMiniShape(t *testing.T) {
	s := miniSuite(t, 1, 300)
	families := map[string]int{}
	var sizes []int
	test := 0
	seen := map[string]bool{}
	for _, tk := range s.Tasks {
		in := tk.Instance
		if err := in.Validate(); err != nil {
			t.Fatal(err)
		}
		if seen[in.InstanceID] || seen[in.Repo] {
			t.Fatalf("%s: id or repo not unique", in.InstanceID)
		}
		seen[in.InstanceID], seen[in.Repo] = true, true
		families[tk.Family]++
		if len(in.FailToPass) == 0 || len(in.PassToPass) == 0 {
			t.Fatalf("%s: %d FAIL_TO_PASS, %d PASS_TO_PASS", in.InstanceID, len(in.FailToPass), len(in.PassToPass))
		}
		for _, id := range append(slicesClone(in.FailToPass), in.PassToPass...) {
			if !strings.HasPrefix(id, in.TestDirectives[0]+"::test_") {
				t.Fatalf("%s: test id %q not a pytest node id in %s", in.InstanceID, id, in.TestDirectives[0])
			}
		}
		// The issue reports the symptom, never the fix: no line the gold
		// patch adds appears in it.
		for _, l := range strings.Split(in.Patch, "\n") {
			if strings.HasPrefix(l, "+") && !strings.HasPrefix(l, "+++") {
				if fix := strings.TrimSpace(l[1:]); fix != "" && strings.Contains(in.ProblemStatement, fix) {
					t.Fatalf("%s: issue text contains the fix %q", in.InstanceID, fix)
				}
			}
		}
		if !strings.Contains(in.Patch, "+++ b/"+tk.BugFile) || !strings.Contains(in.TestPatch, "+++ b/"+in.TestDirectives[0]) {
			t.Fatalf("%s: patches touch the wrong files", in.InstanceID)
		}
		if in.Workdir != "/repos/"+in.InstanceID || in.ImageName() != "swetui/mini:latest" || in.LogParser != ParserPytest {
			t.Fatalf("%s: execution fields %q %q %q", in.InstanceID, in.Workdir, in.ImageName(), in.LogParser)
		}
		if in.Split == SplitTest {
			test++
		}
		sizes = append(sizes, len(in.ProblemStatement)+len(tk.Files[tk.BugFile]))
	}
	allFamilies := []string{FamComparison, FamOffByOne, FamWrongConstant, FamSwappedArgs, FamMissingCheck, FamWrongReturn,
		FamFormatting, FamBoolOperator, FamNormalization, FamLostUpdate, FamWrongOperator, FamMissingCase}
	for _, f := range allFamilies {
		if families[f] < 5 {
			t.Errorf("family %s: %d tasks, want at least 5 of 300", f, families[f])
		}
	}
	if test < 15 || test > 45 {
		t.Errorf("%d test tasks of 300 at test_fraction 0.1", test)
	}
	sort.Ints(sizes)
	t.Logf("families %v; %d test tasks; prompt bytes (issue + buggy file) min %d p10 %d median %d p90 %d max %d",
		families, test, sizes[0], sizes[len(sizes)/10], sizes[len(sizes)/2], sizes[len(sizes)*9/10], sizes[len(sizes)-1])
	if sizes[0] > 900 || sizes[len(sizes)-1] < 2000 || sizes[len(sizes)-1] > 3000 {
		t.Errorf("prompt sizes %d..%d bytes, want from under 900 to 2000-3000", sizes[0], sizes[len(sizes)-1])
	}
}

func slicesClone(l TestList) []string { return append([]string(nil), l...) }

func gitOut(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return string(out)
}

func TestMiniMaterialize(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	cfg := config.Default()
	cache := t.TempDir()
	start := time.Now()
	paths, err := MaterializeMini(context.Background(), cache, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("materialised %d repositories in %v", len(paths), time.Since(start))
	if len(paths) != cfg.Data.MiniTasks {
		t.Fatalf("%d paths", len(paths))
	}
	s := miniSuite(t, cfg.Data.MiniSeed, cfg.Data.MiniTasks)
	for _, i := range []int{0, 7, 150, 299} {
		in := s.Tasks[i].Instance
		dir := paths[in.InstanceID]
		if head := strings.TrimSpace(gitOut(t, dir, "rev-parse", "HEAD")); head != in.BaseCommit {
			t.Fatalf("%s: HEAD %s, base_commit %s", in.InstanceID, head, in.BaseCommit)
		}
		gitOut(t, dir, "fsck", "--strict", "--no-dangling")
		if st := gitOut(t, dir, "status", "--porcelain"); st != "" {
			t.Fatalf("%s: checkout not clean:\n%s", in.InstanceID, st)
		}
		for _, p := range []string{in.Patch, in.TestPatch} {
			f := filepath.Join(t.TempDir(), "p.diff")
			os.WriteFile(f, []byte(p), 0o644)
			gitOut(t, dir, "apply", "--check", f)
		}
		got, err := RepoFile(dir, s.Tasks[i].BugFile)
		if err != nil || got != s.Tasks[i].Files[s.Tasks[i].BugFile] {
			t.Fatalf("%s: RepoFile: %v", in.InstanceID, err)
		}
	}
	// A second call reuses the cache.
	again, err := MaterializeMini(context.Background(), cache, cfg)
	if err != nil || !reflect.DeepEqual(again, paths) {
		t.Fatalf("second materialise: %v", err)
	}
	if _, err := RepoFile(paths[s.Tasks[0].Instance.InstanceID], "../x"); err == nil {
		t.Fatal("RepoFile read outside the repository")
	}
}

func TestMiniBuildContext(t *testing.T) {
	cfg := config.Default()
	cfg.Data.MiniTasks = 5
	rc, err := OpenMiniBuildContext(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	s := miniSuite(t, cfg.Data.MiniSeed, 5)
	tr := tar.NewReader(rc)
	files := map[string]*tar.Header{}
	var dockerfile string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = h
		if h.Name == "Dockerfile" {
			b, _ := io.ReadAll(tr)
			dockerfile = string(b)
		}
	}
	for _, want := range []string{"FROM " + MiniBaseImage + "\n", "COPY --chown=1000:1000 repos/ /repos/", MiniDigestLabel + `="` + s.Digest(), "USER swetui"} {
		if !strings.Contains(dockerfile, want) {
			t.Fatalf("Dockerfile lacks %q:\n%s", want, dockerfile)
		}
	}
	for _, tk := range s.Tasks {
		for _, p := range []string{tk.BugFile, ".git/HEAD", ".git/index", ".git/refs/heads/main"} {
			h, ok := files["repos/"+tk.Instance.InstanceID+"/"+p]
			if !ok {
				t.Fatalf("context lacks %s of %s", p, tk.Instance.InstanceID)
			}
			if h.Uid != 1000 || h.Gid != 1000 {
				t.Fatalf("%s owned by %d:%d", h.Name, h.Uid, h.Gid)
			}
		}
	}
}

func TestUnifiedDiff(t *testing.T) {
	tests := []struct {
		name, old, new, want string
	}{
		{"middle", "a\nb\nc\nd\ne\nf\ng\nh\n", "a\nb\nc\nd\nE\nf\ng\nh\n",
			"diff --git a/f.py b/f.py\n--- a/f.py\n+++ b/f.py\n@@ -2,7 +2,7 @@\n b\n c\n d\n-e\n+E\n f\n g\n h\n"},
		{"append", "a\nb\n", "a\nb\nc\n", "diff --git a/f.py b/f.py\n--- a/f.py\n+++ b/f.py\n@@ -1,2 +1,3 @@\n a\n b\n+c\n"},
		{"one line", "a\n", "b\n", "diff --git a/f.py b/f.py\n--- a/f.py\n+++ b/f.py\n@@ -1 +1 @@\n-a\n+b\n"},
		{"same", "a\n", "a\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := UnifiedDiff("f.py", tt.old, tt.new); got != tt.want {
				t.Fatalf("got\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

func TestPyRepr(t *testing.T) {
	tests := []struct {
		v    any
		want string
	}{
		{nil, "None"}, {true, "True"}, {3, "3"}, {-2, "-2"}, {2.5, "2.5"}, {4.0, "4.0"}, {"it's", `"it's"`},
		{`a\b`, `'a\\b'`}, {[]any{1, "x", []any{}}, "[1, 'x', []]"}, {dict{"b": 2, "a": 1}, "{'a': 1, 'b': 2}"},
	}
	for _, tt := range tests {
		if got := pyRepr(tt.v); got != tt.want {
			t.Errorf("pyRepr(%#v) = %s, want %s", tt.v, got, tt.want)
		}
	}
}

func TestLoadMini(t *testing.T) {
	cfg := config.Default()
	cfg.Data.MiniTasks = 60
	train, err := Load(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Data.Split = SplitTest
	test, err := Load(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(train)+len(test) != 60 || len(test) == 0 {
		t.Fatalf("train %d + test %d", len(train), len(test))
	}
	for _, in := range train {
		for _, x := range test {
			if x.InstanceID == in.InstanceID {
				t.Fatalf("%s in both splits", in.InstanceID)
			}
		}
	}
}

func BenchmarkGenerateMini(b *testing.B) {
	for b.Loop() {
		miniSuite(b, 1, 300)
	}
}

func BenchmarkMaterializeMini(b *testing.B) {
	s := miniSuite(b, 1, 300)
	for b.Loop() {
		if _, err := s.Materialize(context.Background(), b.TempDir()); err != nil {
			b.Fatal(err)
		}
	}
}
