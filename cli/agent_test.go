package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/swetui/swetui/agent"
	"github.com/swetui/swetui/app"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/history"
	"github.com/swetui/swetui/prompt"
	"github.com/swetui/swetui/task"
	"github.com/swetui/swetui/train"
	"github.com/swetui/swetui/warmstart"
)

// TestRunInAgentMode: `swetui run rollout.mode=agent` plays its
// trajectories in real sessions and records them: each a rollout with its
// turns and end, the end reasons in metrics.jsonl, no container left; in
// the synchronous loop and in the async one (sampling from a snapshot
// while the last step trains).
func TestRunInAgentMode(t *testing.T) {
	d := serveDocker(t)
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	for _, tc := range []struct {
		name  string
		steps int
		args  []string
	}{
		{"sync", 1, nil},
		{"async", 2, []string{"grpo.async.enabled=true", "grpo.is_correction=truncated"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := t.TempDir()
			name := "agent-test-" + tc.name
			code, stdout, stderr := runCLI(t, append([]string{"run", "--headless", "run.out_dir=" + out, "run.name=" + name, "rollout.mode=agent",
				fmt.Sprintf("run.max_steps=%d", tc.steps), "agent.group_size=2", "grpo.prompts_per_step=1", "grpo.dynamic_sampling=false",
				"agent.turns=2", "curriculum.auto=false", "run.sft_first=false"}, tc.args...)...)
			if code != ExitOK {
				t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
			}
			if !strings.Contains(stdout, "agent mode: each rollout works in its own session") {
				t.Errorf("the run does not say it is in agent mode:\n%s", stdout)
			}
			rollouts, err := os.ReadFile(filepath.Join(out, "rollouts.jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(string(rollouts), "\n"); n != 2*tc.steps || !strings.Contains(string(rollouts), `"agent":{"end":"turn_limit","turns":[{"reply":`) {
				t.Errorf("%d rollouts, want %d trajectories with their turns:\n%.2000s", n, 2*tc.steps, rollouts)
			}
			metrics, err := os.ReadFile(filepath.Join(out, "metrics.jsonl"))
			if err != nil || !strings.Contains(string(metrics), `"agent/turns"`) || strings.Count(string(metrics), "\n") != tc.steps {
				t.Errorf("metrics.jsonl has not %d steps with agent metrics (%v):\n%s", tc.steps, err, metrics)
			}
			if left := runContainers(t, d, name); len(left) > 0 {
				t.Errorf("%d containers of the run left", len(left))
			}
		})
	}
}

// TestEvalInAgentMode: `swetui eval rollout.mode=agent` plays a trajectory a
// task with the checkpoint, writes its diff as the prediction and the
// trajectory beside it, and scores the predictions.
func TestEvalInAgentMode(t *testing.T) {
	serveDocker(t)
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	dir := t.TempDir()
	prov, ok, err := warmstart.Shipped()
	if err != nil {
		t.Fatal(err) // a shipped warm start that does not load is a failure, not a reason to skip
	}
	if !ok {
		t.Skip("this build ships no warm start")
	}
	ckpt := filepath.Join(dir, "sft")
	if err := warmstart.WriteTo(ckpt, prov); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, in := range miniTasks(t) {
		if in.Split == task.SplitTest && len(ids) < 2 {
			ids = append(ids, fmt.Sprintf("%q", in.InstanceID))
		}
	}
	out := filepath.Join(dir, "preds.jsonl")
	code, stdout, stderr := runCLI(t, "eval", "--ckpt", ckpt, "--split", "test", "--out", out, "--phase", "docker", "rollout.mode=agent",
		"agent.eval_turns=2", "data.include=["+strings.Join(ids, ",")+"]")
	if code != ExitOK {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "trajectories in agent mode (") {
		t.Errorf("no agent summary:\n%s", stdout)
	}
	trajs, err := os.ReadFile(filepath.Join(dir, "preds.trajectories.jsonl"))
	if err != nil || strings.Count(string(trajs), "\n") == 0 || !strings.Contains(string(trajs), `"turns":[`) {
		t.Errorf("trajectories (%v):\n%.1000s", err, trajs)
	}
	if _, err := os.Stat(filepath.Join(dir, "preds.report.json")); err != nil {
		t.Errorf("no score report: %v", err)
	}
}

// TestAgentWarmStart: `swetui sft rollout.mode=agent` plays the scripted
// expert's trajectories in real sessions and trains on their replies, the
// observations masked: the loss falls; a context too small for any
// trajectory is said.
func TestAgentWarmStart(t *testing.T) {
	serveDocker(t)
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	out := t.TempDir()
	code, stdout, stderr := runCLI(t, "sft", "rollout.mode=agent", "sft.steps=20", "data.train_limit=4", "sft.batch_size=1", "sft.heldout_every=0",
		"sft.lr=3e-3", "run.out_dir="+out)
	if code != ExitOK {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "agent warm start: 4 expert trajectories played in sessions") {
		t.Errorf("no expert trajectories said:\n%s", stderr)
	}
	m := regexp.MustCompile(`loss: 1:(\d+\.\d+) .* 20:(\d+\.\d+)`).FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("no loss curve:\n%s", stdout)
	}
	first, _ := strconv.ParseFloat(m[1], 64)
	last, _ := strconv.ParseFloat(m[2], 64)
	if last > first*0.7 {
		t.Errorf("the agent warm start's loss %v -> %v: it did not learn", first, last)
	}
	code, _, stderr = runCLI(t, "sft", "rollout.mode=agent", "agent.context=1024", "sft.steps=2", "data.train_limit=1", "run.out_dir="+t.TempDir())
	if code != ExitFailure || !strings.Contains(stderr, "raise agent.context") {
		t.Errorf("a 1024-token context: exit %d\n%s", code, stderr)
	}
}

var agentFixture = flag.String("agent-fixture", "", "TestAgentRolloutsKeepTheirTurns copies the run's rollouts.jsonl into this folder "+
	"(../ui/testdata/agent-run: the fixture of the viewer's golden files)")

// scriptedPolicy is a train.Policy whose replies are scripts, encoded as
// sampling ends them: a trajectory's first reply starts the next script in
// turn, and each later one is that script's next reply, found by the
// replies its context holds (a trajectory is the exact tokens sampled).
// Past its replies it submits. It learns nothing.
type scriptedPolicy struct {
	mu      sync.Mutex
	scripts [][][]int
	submit  []int
	prompt  int // the prompt's length: the first context is a prompt
	started int
	version int
}

func newScriptedPolicy(ws *app.Workspace, scripts ...[]string) *scriptedPolicy {
	enc := func(reply string) []int { return ws.Tok.Encode(reply + ws.Chat.EndOfTurn()) }
	p := &scriptedPolicy{submit: enc(prompt.SubmitWord)}
	for _, s := range scripts {
		var replies [][]int
		for _, r := range s {
			replies = append(replies, enc(r))
		}
		p.scripts = append(p.scripts, replies)
	}
	return p
}

func (p *scriptedPolicy) Sample(_ context.Context, ctx []int, n int, o train.SampleOptions) ([]train.Sample, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.prompt == 0 {
		p.prompt = len(ctx)
	}
	rest := ctx[p.prompt:]
	reply := p.submit
	if len(rest) == 0 {
		reply = p.scripts[p.started%len(p.scripts)][0]
		p.started++
	}
	for _, s := range p.scripts {
		if len(rest) == 0 || !slices.Equal(rest[:min(len(s[0]), len(rest))], s[0]) {
			continue
		}
		// The script's replies so far, in order: the next one is the reply.
		pos, j := 0, 0
		for ; j < len(s); j++ {
			i := indexOf(rest[pos:], s[j])
			if i < 0 {
				break
			}
			pos += i + len(s[j])
		}
		if j < len(s) {
			reply = s[j]
		}
	}
	truncated := len(reply) > o.MaxNewTokens
	if truncated {
		reply = reply[:o.MaxNewTokens]
	}
	out := make([]train.Sample, n)
	for i := range out {
		out[i] = train.Sample{Tokens: slices.Clone(reply), Logprobs: make([]float64, len(reply)), Truncated: truncated}
	}
	return out, nil
}

func indexOf(s, sub []int) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if slices.Equal(s[i:i+len(sub)], sub) {
			return i
		}
	}
	return -1
}

func (p *scriptedPolicy) Logprobs(_ context.Context, seqs []train.Sequence) ([][]float64, error) {
	out := make([][]float64, len(seqs))
	for i, s := range seqs {
		out[i] = make([]float64, len(s.Completion))
	}
	return out, nil
}

func (p *scriptedPolicy) Backward(ctx context.Context, seqs []train.Sequence, _ [][]float64) ([][]float64, float64, error) {
	lp, err := p.Logprobs(ctx, seqs)
	return lp, 0, err
}

func (p *scriptedPolicy) Step() (float64, float64) { p.version++; return 0, 1e-6 }
func (p *scriptedPolicy) Version() int             { return p.version }

// TestAgentRolloutsKeepTheirTurns: a GRPO step in agent mode through the
// real trainer, app's rollouts in real sessions and the real scorer, with a
// scripted policy (the agent warm start's expert, and one that fails a
// command and then says nothing runnable): rollouts.jsonl keeps every turn
// (command, exit code, time, output size, observation, token counts) and
// the end, `swetui view`'s filters pick them by end, turns and command, and
// its list says them.
func TestAgentRolloutsKeepTheirTurns(t *testing.T) {
	d := serveDocker(t)
	var expert []string
	out, run, _ := scriptedAgentRun(t, "agent-turns", func(_ *task.Instance, e []string) [][]string {
		expert = e
		lost := []string{"Let me open the module.\n```bash\ncat -n no/such/file.py\n```", "```bash\ngit status --short\n```"}
		for len(lost) < 10 {
			lost = append(lost, "I am not sure what to run.")
		}
		return [][]string{e, lost}
	}, "agent.turns=10")
	// Every turn is in rollouts.jsonl, as data.
	b, err := os.ReadFile(filepath.Join(out, history.RolloutsFile))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d rollouts, want 2 trajectories", len(lines))
	}
	byEnd := map[event.End]int{}
	var got [2]event.CompletionScored
	for i, l := range lines {
		if err := json.Unmarshal([]byte(l), &got[i]); err != nil {
			t.Fatal(err)
		}
		c := got[i]
		if c.Agent == nil || c.Completion != "" {
			t.Fatalf("rollout %d keeps no turns (text %q):\n%.1000s", i, c.Completion, l)
		}
		byEnd[c.Agent.End] = i
		for j, turn := range c.Agent.Turns {
			if turn.ReplyTokens <= 0 {
				t.Errorf("rollout %d turn %d: %d reply tokens", i, j+1, turn.ReplyTokens)
			}
			if turn.Command == "" {
				continue
			}
			// The exit code kept is the one the policy was told.
			if want := fmt.Sprintf("exit code %d\n", turn.ExitCode); !strings.HasPrefix(turn.Observation, want) || turn.ObsTokens <= 0 || turn.Duration <= 0 {
				t.Errorf("rollout %d turn %d: exit %d, %v, %d observation tokens: %q", i, j+1, turn.ExitCode, turn.Duration, turn.ObsTokens, turn.Observation)
			}
		}
	}
	si, ok := byEnd["submitted"]
	li, ok2 := byEnd["turn_limit"]
	if !ok || !ok2 {
		t.Fatalf("ends %v, want submitted and turn_limit", byEnd)
	}
	sub, lim := got[si].Agent, got[li].Agent
	var wantCmds, gotCmds []string
	for _, r := range expert {
		wantCmds = append(wantCmds, agent.ParseReply(r).Command)
	}
	for _, turn := range sub.Turns {
		gotCmds = append(gotCmds, turn.Command)
	}
	if !slices.Equal(gotCmds, wantCmds) {
		t.Errorf("the expert's commands %q, want %q", gotCmds, wantCmds)
	}
	for _, turn := range sub.Turns {
		if strings.Contains(turn.Command, agent.ApplyFix) && (turn.ExitCode != 0 || turn.OutputBytes == 0) {
			t.Errorf("the fix: exit %d, %d bytes: %q", turn.ExitCode, turn.OutputBytes, turn.Observation)
		}
	}
	if !got[si].Verdict.Resolved {
		t.Errorf("the expert's diff does not resolve the task: %+v", got[si].Verdict)
	}
	if len(lim.Turns) != 10 || lim.Turns[0].ExitCode != 1 || !strings.Contains(lim.Turns[0].Observation, "No such file") ||
		lim.Turns[1].Command != "git status --short" || lim.Turns[1].ExitCode != 0 || lim.Turns[2].Command != "" {
		t.Errorf("the lost trajectory: %+v", lim)
	}

	// The index and the filters read them.
	ix, err := history.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	if e := ix.Entries[si]; e.EndName() != "submitted" || int(e.Turns) != len(sub.Turns) {
		t.Errorf("the expert's entry: %s, %d turns", e.EndName(), e.Turns)
	}
	for _, tt := range []struct {
		filter string
		want   []int
	}{
		{"end=submitted", []int{si}},
		{"end=unfinished", []int{li}},
		{"end=turn_limit turns>=10", []int{li}},
		{fmt.Sprintf("turns<=%d", len(sub.Turns)), []int{si}},
		{`cmd="patch -p1"`, []int{si}},
		{"cmd=no/such/file", []int{li}},
		{"cmd=GIT", []int{0, 1}},
		{`text="no/such/file.py: No such file"`, []int{li}},
	} {
		f, err := history.ParseFilter(tt.filter)
		if err != nil {
			t.Fatal(err)
		}
		if sel, err := ix.SelectIn(out, f); err != nil || !slices.Equal(sel, tt.want) {
			t.Errorf("%s: %v (%v), want %v", tt.filter, sel, err, tt.want)
		}
	}
	code, stdout, stderr := runCLI(t, "view", out, "--list", "--filter", "end=submitted")
	if want := fmt.Sprintf(" end submitted turns %d\n", len(sub.Turns)); code != ExitOK || !strings.Contains(stdout, want) || strings.Count(stdout, "\n") != 2 {
		t.Errorf("view --list --filter end=submitted: exit %d, want a line with %q:\n%s%s", code, want, stdout, stderr)
	}
	metrics, err := os.ReadFile(filepath.Join(out, history.MetricsFile))
	if err != nil || !strings.Contains(string(metrics), `"agent/submitted":0.5`) {
		t.Errorf("metrics.jsonl (%v):\n%s", err, metrics)
	}
	// A container whose removal is under way when the run returns may
	// still be listed for a moment on a loaded host: gone within 10 s.
	left := runContainers(t, d, run)
	for wait := time.Now().Add(10 * time.Second); len(left) > 0 && time.Now().Before(wait); left = runContainers(t, d, run) {
		time.Sleep(250 * time.Millisecond)
	}
	if len(left) > 0 {
		t.Errorf("%d containers of the run left: %v %v", len(left), left[0].Names, left[0].State)
	}
	if *agentFixture != "" {
		if err := os.WriteFile(filepath.Join(*agentFixture, history.RolloutsFile), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
