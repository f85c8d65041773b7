package agent

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/internal/kubetest"
	"github.com/swetui/swetui/prompt"
	"github.com/swetui/swetui/reward"
	"github.com/swetui/swetui/sandbox"
	// The k8s:// scheme of the pool's hosts.
	_ "github.com/swetui/swetui/sandbox/kube"
	"github.com/swetui/swetui/task"
)

// A host kind the scripted agents play on: the local Docker Engine, or the
// test cluster of .ci/k8s (make cluster-up).
type host struct {
	name string
	net  string // ls /sys/class/net inside: the test cluster's CNI gives a Pod a dead-end eth0
	// pids says whether the host enforces sandbox.pids_limit (a Pod's is
	// its node's podPidsLimit).
	pids bool
}

var (
	dockerHost = host{name: "docker", net: "lo\n", pids: true}
	k8sHost    = host{name: "k8s", net: "eth0\nlo\n"}
)

// dockerWorld is world on the local Docker Engine.
func dockerWorld(t *testing.T) ([]task.Instance, *sandbox.Pool, *reward.Scorer) {
	return world(t, dockerHost)
}

// world is the embedded suite's tasks, a pool on h (the suite's image
// pushed to the cluster's registry for k8s) and the reward engine over
// it: skipped without Docker or the cluster (failing under CI=true) or
// with -short.
func world(t *testing.T, h host) ([]task.Instance, *sandbox.Pool, *reward.Scorer) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs containers")
	}
	ctx := context.Background()
	d, err := sandbox.Connect(ctx, "")
	if errors.Is(err, sandbox.ErrUnreachable) && os.Getenv("CI") != "true" {
		t.Skipf("Docker Engine unreachable: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	cfg := config.Default()
	cfg.Data.MiniTasks, cfg.Data.Split = 20, task.SplitAll
	insts, err := task.Load(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := sandbox.Missing(ctx, d2(t), []string{cfg.Sandbox.Image}); err != nil || len(m) > 0 {
		t.Fatalf("image %s missing (%v): run make setup", cfg.Sandbox.Image, err)
	}
	opts := sandbox.FromConfig(cfg, "agent-test-"+sandbox.NewNonce()[:6])
	if h.name == k8sHost.name {
		c := kubetest.Up(t)
		c.Push(t, cfg.Sandbox.Image)
		opts.Hosts = []string{c.Host()}
		opts.Kubernetes = config.Kubernetes{Registry: c.Registry, ImagePullPolicy: "IfNotPresent"}
		// The node's 2 CPUs hold a session and a grading Pod at once.
		opts.Limits.CPUs, opts.Limits.MemoryMB = 0.5, 1024
	}
	pool, err := sandbox.NewPool(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	sc := reward.NewScorer(cfg.Reward, &reward.PoolEvaluator{Pool: pool})
	sc.Applier = nil // the docker phase decides, in its fresh container
	t.Cleanup(func() {
		sc.Close()
		if err := pool.Close(context.Background()); err != nil {
			t.Errorf("close pool: %v", err)
		}
	})
	return insts, pool, sc
}

func d2(t *testing.T) sandbox.Docker {
	d, err := sandbox.Connect(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// heredoc is a shell command writing text to path; what follows it goes
// on the next line.
func heredoc(path, text string) string {
	if !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	return fmt.Sprintf("cat > %s <<'SWETUI_EOF'\n%sSWETUI_EOF", path, text)
}

// pidsLimited says whether a session of pool on in's image holds fewer
// than 300 processes, in a session of its own: a Pod's pids limit is its
// node's (podPidsLimit), which the container's own cgroup does not show.
func pidsLimited(t *testing.T, pool *sandbox.Pool, in *task.Instance) bool {
	t.Helper()
	s, err := OpenTask(context.Background(), pool, in, SessionOptions{Life: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, err := s.Exec(context.Background(), "i=0; while [ $i -lt 300 ]; do sleep 60 & i=$((i+1)); done; echo unlimited",
		sandbox.ExecOptions{Timeout: 30 * time.Second})
	t.Logf("pids probe: exit %d %q %v", res.ExitCode, strings.TrimSpace(res.Output), err)
	return err == nil && !strings.Contains(res.Output, "unlimited")
}

const forkBomb = "```bash\nbomb() { bomb | bomb & }; bomb; sleep 60\n```"

// Scripted agents in real sessions, graded by the reward pipeline in fresh
// sandboxes on their diffs alone: the gold fix resolves; doing nothing,
// forcing passes with a conftest, editing the tests, a symlink out of the
// tree, a fork bomb, filling the disk, sleeping past the timeout and
// reaching for the network all earn only what their diff earns. On the
// local Docker Engine and on the test cluster.
func TestScriptedAgentsAreGradedOnTheirDiff(t *testing.T) {
	for _, h := range []host{dockerHost, k8sHost} {
		t.Run(h.name, func(t *testing.T) { scriptedAgentsAreGradedOnTheirDiff(t, h) })
	}
}

func scriptedAgentsAreGradedOnTheirDiff(t *testing.T, h host) {
	insts, pool, sc := world(t, h)
	tok := testTokenizer(t)
	chat := prompt.ChatFormat{}
	in := &insts[0]
	testFile := task.PatchFiles(in.TestPatch)[0].Path()
	gold := []string{"```bash\n" + heredoc("/tmp/fix.patch", in.Patch) + "\ngit apply /tmp/fix.patch && echo applied\n```",
		"```bash\npython3 -m pytest -q -p no:cacheprovider " + strings.Join(in.TestDirectives, " ") + " 2>&1 | tail -n 2\n```", "SUBMIT"}
	l := limits()
	l.CommandTimeout = 5 * time.Second
	l.MaxNewTokens, l.Context = 16384, 65536 // the test's tokenizer is small: the gold patch is many tokens
	for _, tt := range []struct {
		name     string
		replies  []string
		resolved bool
		check    func(t *testing.T, tr Trajectory, v event.Verdict)
	}{
		{"gold fix", gold, true, func(t *testing.T, tr Trajectory, v event.Verdict) {
			if !strings.Contains(tr.Turns[0].Observation, "applied") || !strings.Contains(tr.Diff, task.PatchFiles(in.Patch)[0].Path()) {
				t.Errorf("turn 1 %q, diff %q", tr.Turns[0].Observation, tr.Diff)
			}
		}},
		{"nothing", []string{"SUBMIT"}, false, func(t *testing.T, tr Trajectory, v event.Verdict) {
			if tr.Diff != "" || v.Reward != 0 {
				t.Errorf("diff %q reward %v", tr.Diff, v.Reward)
			}
		}},
		{"a conftest that forces passes", []string{"```bash\n" + heredoc("conftest.py", "import pytest\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n    out = yield\n    r = out.get_result()\n    r.outcome = 'passed'\n") + "\n```", "SUBMIT"}, false, nil},
		{"the tests edited to pass", []string{"```bash\n" + heredoc(testFile, "def test_nothing():\n    assert True\n") + "\n```", "SUBMIT"}, false, nil},
		{"a symlink out of the tree", []string{"```bash\nln -s /etc/passwd leak.txt && ls -l leak.txt\n```", "SUBMIT"}, false, func(t *testing.T, tr Trajectory, v event.Verdict) {
			if len(v.Hacks) == 0 {
				t.Errorf("no hack flag for a symlink out of the tree: %+v", v)
			}
		}},
		{"sleep past the timeout", []string{"```bash\nsleep 600\n```", "SUBMIT"}, false, func(t *testing.T, tr Trajectory, v event.Verdict) {
			if !tr.Turns[0].TimedOut || !strings.Contains(tr.Turns[0].Observation, "killed after 5s") {
				t.Errorf("turn 1: %+v", tr.Turns[0])
			}
		}},
		{"the network", []string{"```bash\nls /sys/class/net; grep -c . /proc/net/route; cat /etc/resolv.conf 2>&1 | head -n 1\n```", "SUBMIT"}, false, func(t *testing.T, tr Trajectory, v event.Verdict) {
			if !strings.HasPrefix(tr.Turns[0].Observation, "exit code 0\n"+h.net+"1\n") {
				t.Errorf("the network from inside: %q", tr.Turns[0].Observation)
			}
		}},
		{"a fork bomb", []string{forkBomb, "SUBMIT"}, false, nil},
		{"a full disk", []string{"```bash\ndd if=/dev/zero of=big.bin bs=1M count=4000 2>&1 | tail -n 1\n```", "SUBMIT"}, false, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			if tt.replies[0] == forkBomb && !h.pids && !pidsLimited(t, pool, in) {
				// Held by memory alone, a bomb once took 8000 of the
				// machine's pids and minutes to die after its Pod was deleted.
				t.Skip("the node sets no pids limit (podPidsLimit): a fork bomb would be bounded by the machine's pids alone")
			}
			s, err := OpenTask(ctx, pool, in, SessionOptions{Life: 30 * time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			text, err := chat.RenderAgentPrompt(in.ProblemStatement, in.WorkdirOrDefault(), nil)
			if err != nil {
				t.Fatal(err)
			}
			tr, err := Episode{Session: s, Sampler: &scripted{tok: tok, chat: chat, replies: tt.replies}, Tok: tok, Chat: chat,
				Limits: l, BaseCommit: in.BaseCommit}.Run(ctx, tok.Encode(text))
			if err != nil {
				t.Fatal(err)
			}
			vs, err := sc.ScoreDiffs(ctx, in, []string{tr.Diff}, config.PhaseDocker)
			if err != nil {
				t.Fatal(err)
			}
			v := vs[0]
			t.Logf("%s: end %s (%s), %d turns, diff %d bytes, reward %.2f resolved %v hacks %v infra %q", tt.name, tr.End, tr.Detail,
				len(tr.Turns), len(tr.Diff), v.Reward, v.Resolved, v.Hacks, v.InfraCause)
			if v.Infra || v.Resolved != tt.resolved || (tt.resolved && v.Reward != 1) {
				t.Errorf("resolved %v reward %v infra %v (%s), want resolved %v", v.Resolved, v.Reward, v.Infra, v.InfraCause, tt.resolved)
			}
			if tt.check != nil {
				tt.check(t, tr, v)
			}
		})
	}
}

// The scripted expert's trajectories, played in real sessions, resolve
// their tasks in every variety it draws, and end submitted.
func TestExpertTrajectoriesResolve(t *testing.T) {
	insts, pool, sc := dockerWorld(t)
	tok := testTokenizer(t)
	chat := prompt.ChatFormat{}
	l := limits()
	l.MaxNewTokens, l.Context, l.CommandTimeout = 16384, 1<<17, 30*time.Second
	ctx := context.Background()
	for i, in := range insts[:4] {
		r := rand.New(rand.NewPCG(uint64(i), 7))
		replies := ExpertReplies(&in, r)
		s, err := OpenTask(ctx, pool, &in, SessionOptions{Life: 30 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		text, _ := chat.RenderAgentPrompt(in.ProblemStatement, in.WorkdirOrDefault(), nil)
		tr, err := Episode{Session: s, Sampler: &Scripted{Tok: tok, Chat: chat, Replies: replies}, Tok: tok, Chat: chat, Limits: l,
			BaseCommit: in.BaseCommit}.Run(ctx, tok.Encode(text))
		s.Close()
		if err != nil {
			t.Fatal(err)
		}
		vs, err := sc.ScoreDiffs(ctx, &in, []string{tr.Diff}, config.PhaseDocker)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d turns, %s, resolved %v", in.InstanceID, len(tr.Turns), tr.End, vs[0].Resolved)
		if tr.End != event.EndSubmitted || !vs[0].Resolved {
			rec := event.Trajectory{End: tr.End, Detail: tr.Detail}
			for _, turn := range tr.Turns {
				rec.Turns = append(rec.Turns, event.Turn(turn))
			}
			t.Errorf("%s: end %s, resolved %v:\n%s", in.InstanceID, tr.End, vs[0].Resolved, rec.Text())
		}
	}
}

// TestApplyFixIsLenient: the expert's way to apply a patch takes one that
// `git apply` refuses but the harness would apply (a context line off, as
// the policy writes them), and leaves neither rejects nor backups in the
// diff, which then resolves the task.
func TestApplyFixIsLenient(t *testing.T) {
	insts, pool, sc := dockerWorld(t)
	in := insts[0]
	ctx := context.Background()
	off := offContext(in.Patch)
	if off == in.Patch {
		t.Fatalf("%s: the gold patch has no context line to put off:\n%s", in.InstanceID, in.Patch)
	}
	s, err := OpenTask(ctx, pool, &in, SessionOptions{Life: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	run := func(cmd string) sandbox.ExecResult {
		t.Helper()
		res, err := s.Exec(ctx, cmd, sandbox.ExecOptions{Timeout: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := run(heredoc("/tmp/fix.patch", off) + "\ngit apply --check /tmp/fix.patch"); res.ExitCode == 0 {
		t.Fatalf("git apply takes the patch with a context line off; the test shows nothing:\n%s", off)
	}
	if res := run(ApplyFix); res.ExitCode != 0 || !strings.Contains(res.Output, "1 file changed") {
		t.Fatalf("ApplyFix: exit %d: %s", res.ExitCode, res.Output)
	}
	diff, err := s.Diff(ctx, in.BaseCommit, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if files := task.Paths(task.PatchFiles(diff)); len(files) != 1 {
		t.Errorf("the diff changes %q, want the fixed file alone:\n%s", files, diff)
	}
	vs, err := sc.ScoreDiffs(ctx, &in, []string{diff}, config.PhaseDocker)
	if err != nil || !vs[0].Resolved {
		t.Errorf("the leniently applied fix does not resolve %s (%v): %+v", in.InstanceID, err, vs)
	}
}

// offContext is patch with the first context line of its first hunk
// changed, so that it no longer matches the file exactly.
func offContext(patch string) string {
	lines := strings.SplitAfter(patch, "\n")
	inHunk := false
	for i, l := range lines {
		if strings.HasPrefix(l, "@@") {
			inHunk = true
			continue
		}
		if inHunk && strings.HasPrefix(l, " ") && strings.TrimSpace(l) != "" {
			lines[i] = " # off" + l[1:]
			return strings.Join(lines, "")
		}
	}
	return patch
}
