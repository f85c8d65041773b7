package task

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/swetui/swetui/config"
)

// TestMiniTasksRunInContainer runs tasks of the embedded suite for real, with
// python3 -m pytest as the swetui user in the base image, with no network:
// with the test patch applied to base_commit every FAIL_TO_PASS test fails
// and every PASS_TO_PASS test passes; with the gold patch too, all pass.
// A sample covering every bug family runs by default; SWETUI_MINI_FULL=1
// runs the whole suite (a few minutes on two cores).
func TestMiniTasksRunInContainer(t *testing.T) {
	requireDockerBase(t)
	cfg := config.Default()
	s := miniSuite(t, cfg.Data.MiniSeed, cfg.Data.MiniTasks)
	full := os.Getenv("SWETUI_MINI_FULL") == "1"
	var sample []MiniTask
	if full {
		sample = s.Tasks
	} else {
		// One task of each family, the first met.
		per := map[string]int{}
		for _, tk := range s.Tasks {
			if per[tk.Family] < 1 {
				per[tk.Family]++
				sample = append(sample, tk)
			}
		}
	}

	root := t.TempDir()
	src, pdir := filepath.Join(root, "src"), filepath.Join(root, "p")
	// Only the sample's repositories.
	paths, err := (&MiniSuite{Seed: s.Seed, Tasks: sample}).Materialize(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, tk := range sample {
		in := tk.Instance
		d := filepath.Join(pdir, in.InstanceID)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		cmd, err := in.TestCommand()
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(src, paths[in.InstanceID])
		for name, content := range map[string]string{"test.patch": in.TestPatch, "gold.patch": in.Patch, "cmd": cmd, "repo": rel} {
			if err := os.WriteFile(filepath.Join(d, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		ids = append(ids, in.InstanceID)
	}
	script := `set -u
one() {
  id=$1; w=/tmp/w/$id; out=/tmp/out/$id
  if ! { cp -r /src/$(cat /p/$id/repo) $w && cd $w; }; then echo "@@copy-failed" > $out; return; fi
  { git apply /p/$id/test.patch || echo "@@apply-test-failed"
    echo "@@base"; sh -c "$(cat /p/$id/cmd)" 2>&1
    git apply /p/$id/gold.patch || echo "@@apply-gold-failed"
    echo "@@gold"; sh -c "$(cat /p/$id/cmd)" 2>&1
    echo "@@status"; git status --porcelain --untracked-files=no
  } > $out
}
export -f one
mkdir -p /tmp/w /tmp/out
xargs -P 2 -n 1 bash -c 'one "$0"' < /p/ids
for id in $(cat /p/ids); do echo "@@task $id"; cat /tmp/out/$id; done
`
	os.WriteFile(filepath.Join(pdir, "run.sh"), []byte(script), 0o644)
	os.WriteFile(filepath.Join(pdir, "ids"), []byte(strings.Join(ids, "\n")+"\n"), 0o644)
	for _, d := range []string{root, src, pdir} {
		os.Chmod(d, 0o755) // readable by the container's uid 1000
	}

	name := fmt.Sprintf("swetui-task-test-%d", time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	// The client is killed on timeout; remove the container itself too.
	defer exec.Command("docker", "rm", "-f", name).Run()
	start := time.Now()
	out, err := exec.CommandContext(ctx, "docker", "run", "--rm", "--name", name, "--label", "swetui.managed=true",
		"--network", "none", "--user", "1000:1000", "-v", src+":/src:ro", "-v", pdir+":/p:ro",
		MiniBaseImage, "bash", "/p/run.sh").CombinedOutput()
	if err != nil {
		t.Fatalf("docker run: %v\n%s", err, tail(string(out), 3000))
	}
	logs := splitTaskLogs(string(out))
	bad := 0
	for _, tk := range sample {
		if problems := checkTaskLog(tk.Instance, logs[tk.Instance.InstanceID]); len(problems) > 0 {
			bad++
			t.Errorf("%s (%s): %s\n%s", tk.Instance.InstanceID, tk.Family, strings.Join(problems, "; "),
				tail(logs[tk.Instance.InstanceID], 2500))
		}
	}
	t.Logf("%d/%d tasks behave (F2P fail at base, P2P pass, all pass with gold) in %v", len(sample)-bad, len(sample),
		time.Since(start).Round(time.Second))
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

func splitTaskLogs(out string) map[string]string {
	logs := map[string]string{}
	var id string
	var b strings.Builder
	flush := func() {
		if id != "" {
			logs[id] = b.String()
		}
		b.Reset()
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "@@task "); ok {
			flush()
			id = rest
			continue
		}
		b.WriteString(sc.Text() + "\n")
	}
	flush()
	return logs
}

// pytestStatuses reads pytest -rA's short summary lines.
func pytestStatuses(log string) map[string]string {
	st := map[string]string{}
	for _, line := range strings.Split(log, "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && (f[0] == "PASSED" || f[0] == "FAILED" || f[0] == "ERROR") {
			st[f[1]] = f[0]
		}
	}
	return st
}

func checkTaskLog(in Instance, log string) []string {
	var problems []string
	if log == "" {
		return []string{"no output"}
	}
	for _, marker := range []string{"@@copy-failed", "@@apply-test-failed", "@@apply-gold-failed"} {
		if strings.Contains(log, marker) {
			problems = append(problems, marker[2:])
		}
	}
	base, rest, ok1 := strings.Cut(log, "@@gold")
	gold, status, ok2 := strings.Cut(rest, "@@status")
	if !ok1 || !ok2 {
		return append(problems, "markers missing")
	}
	bs, gs := pytestStatuses(base), pytestStatuses(gold)
	for _, id := range in.FailToPass {
		if bs[id] != "FAILED" {
			problems = append(problems, fmt.Sprintf("base: %s is %q, want FAILED", id, bs[id]))
		}
		if gs[id] != "PASSED" {
			problems = append(problems, fmt.Sprintf("gold: %s is %q, want PASSED", id, gs[id]))
		}
	}
	for _, id := range in.PassToPass {
		if bs[id] != "PASSED" {
			problems = append(problems, fmt.Sprintf("base: %s is %q, want PASSED", id, bs[id]))
		}
		if gs[id] != "PASSED" {
			problems = append(problems, fmt.Sprintf("gold: %s is %q, want PASSED", id, gs[id]))
		}
	}
	if n := len(in.FailToPass) + len(in.PassToPass); len(gs) != n {
		problems = append(problems, fmt.Sprintf("gold run reports %d tests, the instance lists %d", len(gs), n))
	}
	// Only the two patched files may differ from base_commit: tests left no
	// stray tracked changes.
	if changed := strings.Count(strings.TrimSpace(status), "\n") + 1; strings.TrimSpace(status) != "" && changed != 2 {
		problems = append(problems, "unexpected changes: "+strings.TrimSpace(status))
	}
	return problems
}

// TestMiniImageBuilds builds the suite's image from MiniBuildContext (five
// tasks) with the legacy builder the sandbox uses, and checks a repository
// inside it as the image's default user: clean checkout at base_commit,
// tests collected.
func TestMiniImageBuilds(t *testing.T) {
	requireDockerBase(t)
	cfg := config.Default()
	cfg.Data.MiniTasks = 5
	tag := fmt.Sprintf("swetui/mini-test:%d", time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rc, err := OpenMiniBuildContext(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	build := exec.CommandContext(ctx, "docker", "build", "--network", "none", "-t", tag, "-")
	build.Env = append(os.Environ(), "DOCKER_BUILDKIT=0")
	build.Stdin = rc
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("docker build: %v\n%s", err, tail(string(out), 3000))
	}
	defer exec.Command("docker", "image", "rm", "-f", tag).Run()

	s := miniSuite(t, cfg.Data.MiniSeed, 5)
	in := s.Tasks[3].Instance
	name := strings.ReplaceAll(strings.TrimPrefix(tag, "swetui/"), ":", "-")
	defer exec.Command("docker", "rm", "-f", name).Run()
	check := fmt.Sprintf(`cd %s && id -un && git rev-parse HEAD && git status --porcelain && echo clean && %s --collect-only -q %s | tail -1`,
		in.Workdir, MiniTestCmd, in.TestDirectives[0])
	out, err := exec.CommandContext(ctx, "docker", "run", "--rm", "--name", name, "--network", "none", tag, "bash", "-c", check).CombinedOutput()
	if err != nil {
		t.Fatalf("docker run: %v\n%s", err, out)
	}
	want := fmt.Sprintf("swetui\n%s\nclean\n%d tests collected", in.BaseCommit, len(in.PassToPass))
	if !strings.HasPrefix(string(out), want) {
		t.Fatalf("in the image:\n%s\nwant\n%s", out, want)
	}
	labels, err := exec.Command("docker", "image", "inspect", "-f", "{{index .Config.Labels \""+MiniDigestLabel+"\"}}", tag).Output()
	if err != nil || strings.TrimSpace(string(labels)) != s.Digest() {
		t.Fatalf("label %s = %q (%v), want %s", MiniDigestLabel, labels, err, s.Digest())
	}
}

// requireDockerBase skips a container test with -short, or where there is no
// Docker CLI or no base image to build on (make setup builds it).
func requireDockerBase(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("short")
	}
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("docker CLI not installed")
	}
	if err := exec.Command("docker", "image", "inspect", MiniBaseImage).Run(); err != nil {
		t.Skipf("base image %s not built (.ci/base-image.sh)", MiniBaseImage)
	}
}
