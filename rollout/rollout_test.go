package rollout

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/swetui/swetui/agent"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/model"
	"github.com/swetui/swetui/prompt"
	"github.com/swetui/swetui/sandbox"
	"github.com/swetui/swetui/task"
)

const fix = "```diff\ndiff --git a/a.py b/a.py\n--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n```"

func testTokenizer(t *testing.T) *model.Tokenizer {
	t.Helper()
	tok, err := model.TrainBPE(context.Background(), slices.Values([]string{fix, "```bash\nls\n```", "SUBMIT", "the issue"}), 300, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

type fixedPrompter struct{}

func (fixedPrompter) Prompt(context.Context, *task.Instance) (string, error) { return "the issue", nil }

// replySampler draws replies from a table, in turn, and says each draw's
// weight version from versions (the last repeats).
type replySampler struct {
	tok      *model.Tokenizer
	replies  []string
	versions []int
	mu       sync.Mutex
	n        int
}

func (s *replySampler) next() (Sample, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, v := s.replies[min(s.n, len(s.replies)-1)], s.versions[min(s.n, len(s.versions)-1)]
	s.n++
	ids := s.tok.Encode(r + prompt.ChatFormat{}.EndOfTurn())
	return Sample{Tokens: ids, Logprobs: make([]float64, len(ids))}, v
}

func (s *replySampler) Sample(_ context.Context, _ []int, n int, _ SampleOptions) ([]Sample, int, error) {
	out := make([]Sample, n)
	v := 0
	for i := range out {
		out[i], v = s.next()
	}
	return out, v, nil
}

func (s *replySampler) SampleTurn(context.Context, []int, SampleOptions) (Sample, int, error) {
	smp, v := s.next()
	return smp, v, nil
}

// countingScorer grades every diff it is given reward 1 when it is
// non-empty, and counts its calls.
type countingScorer struct {
	mu    sync.Mutex
	calls int
	extra int // verdicts beyond one a completion
}

func (s *countingScorer) Score(_ context.Context, inst *task.Instance, cs []string, phase string) ([]event.Verdict, error) {
	s.mu.Lock()
	s.calls++
	s.mu.Unlock()
	out := make([]event.Verdict, len(cs)+s.extra)
	for i := range cs {
		out[i] = event.Verdict{InstanceID: inst.InstanceID, Phase: phase, SyntaxOK: strings.Contains(cs[i], "diff --git")}
	}
	return out, nil
}

func (s *countingScorer) ScoreDiffs(ctx context.Context, inst *task.Instance, diffs []string, phase string) ([]event.Verdict, error) {
	vs, err := s.Score(ctx, inst, diffs, phase)
	for i := range vs {
		if vs[i].SyntaxOK {
			vs[i].Reward = 1
		}
	}
	return vs, err
}

// Single draws the group in one call, keeps each reply's text and the diff
// it holds, and leaves grading to Grade, which takes one verdict a reply.
func TestSinglePlaysThenGrades(t *testing.T) {
	tok := testTokenizer(t)
	sc := &countingScorer{}
	p := &Single{Prompter: fixedPrompter{}, Tok: tok, Scorer: sc, Context: 4096, Opts: SampleOptions{MaxNewTokens: 64}}
	in := &task.Instance{InstanceID: "mini__calc-1"}
	gr, err := p.Play(context.Background(), in, 2, "syntax", &replySampler{tok: tok, replies: []string{fix, "no idea"}, versions: []int{7}})
	if err != nil {
		t.Fatal(err)
	}
	if gr.Graded || sc.calls != 0 || gr.Version != 7 || !slices.Equal(gr.Prompt, tok.Encode("the issue")) || len(gr.Rollouts) != 2 {
		t.Fatalf("played: graded %v, %d scorer calls, version %d, prompt %v, %d rollouts", gr.Graded, sc.calls, gr.Version, gr.Prompt, len(gr.Rollouts))
	}
	for i, r := range gr.Rollouts {
		if !r.Finished || r.Mask != nil || r.Agent != nil {
			t.Errorf("reply %d: finished %v mask %v agent %v, want a finished reply", i, r.Finished, r.Mask, r.Agent)
		}
	}
	if r := gr.Rollouts[0]; r.Text != fix || !strings.HasPrefix(r.Diff, "diff --git a/a.py") {
		t.Errorf("reply 0: text %q diff %q", r.Text, r.Diff)
	}
	if r := gr.Rollouts[1]; r.Text != "no idea" || r.Diff != "" {
		t.Errorf("reply 1: text %q diff %q", r.Text, r.Diff)
	}
	if err := p.Grade(context.Background(), in, gr, "syntax"); err != nil || !gr.Graded || sc.calls != 1 {
		t.Fatalf("grade: %v, graded %v, %d calls", err, gr.Graded, sc.calls)
	}
	if !gr.Rollouts[0].Verdict.SyntaxOK || gr.Rollouts[1].Verdict.SyntaxOK || gr.Rollouts[0].Verdict.Phase != "syntax" {
		t.Errorf("verdicts %+v %+v", gr.Rollouts[0].Verdict, gr.Rollouts[1].Verdict)
	}
	if err := p.Grade(context.Background(), in, gr, "syntax"); err != nil || sc.calls != 1 {
		t.Errorf("a graded group graded again: %v, %d calls", err, sc.calls)
	}
	gr.Graded, sc.extra = false, 1
	if err := p.Grade(context.Background(), in, gr, "syntax"); err == nil || !strings.Contains(err.Error(), "3 verdicts for 2 completions") {
		t.Errorf("a scorer's wrong count: %v", err)
	}
}

// failingOpener opens no session.
type failingOpener struct{}

func (failingOpener) OpenSession(context.Context, sandbox.Spec) (sandbox.Session, error) {
	return nil, errors.New("daemon gone")
}

// tableOpener opens a tableSession whose every command succeeds.
type tableOpener struct{}

func (tableOpener) OpenSession(context.Context, sandbox.Spec) (sandbox.Session, error) {
	return tableSession{}, nil
}

func testAgent(t *testing.T, o agent.Opener, sc DiffScorer) *Agent {
	return &Agent{Opener: o, Prompter: fixedPrompter{}, Tok: testTokenizer(t), Scorer: sc,
		Limits: agent.Limits{Turns: 4, CommandTimeout: time.Minute, ObservationChars: 1000, Context: 4096, MaxNewTokens: 64, MaxDiffBytes: 1 << 20}}
}

// One rule for a session that does not open, wherever a trajectory plays:
// the sandbox's failure, ended container with Infra set, its verdict an
// infrastructure failure (masked), its diff never graded; a cancelled
// context is the caller's error.
func TestAgentFailedOpenIsInfrastructure(t *testing.T) {
	sc := &countingScorer{}
	a := testAgent(t, failingOpener{}, sc)
	in := &task.Instance{InstanceID: "mini__calc-1"}
	gr, err := a.Play(context.Background(), in, 2, "docker", &replySampler{tok: a.Tok.(*model.Tokenizer), replies: []string{"SUBMIT"}, versions: []int{0}})
	if err != nil {
		t.Fatal(err)
	}
	if !gr.Graded || len(gr.Rollouts) != 2 || sc.calls != 0 {
		t.Fatalf("graded %v, %d rollouts, %d scorer calls", gr.Graded, len(gr.Rollouts), sc.calls)
	}
	for i, r := range gr.Rollouts {
		if r.Agent == nil || r.Agent.End != event.EndContainer || !strings.Contains(r.Agent.Detail, "daemon gone") || r.Finished ||
			!r.Verdict.Infra || len(r.Tokens) != 0 || r.Mask == nil {
			t.Errorf("rollout %d: %+v", i, r)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := a.Trajectory(ctx, in, nil, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled open: %v, want the context's error", err)
	}
}

// A trajectory's rollout is what follows the prompt, its replies masked
// in and observations out, graded as it ends; the group's version is the
// oldest any turn drew from.
func TestAgentPlaysAndGrades(t *testing.T) {
	sc := &countingScorer{}
	a := testAgent(t, tableOpener{}, sc)
	tok := a.Tok.(*model.Tokenizer)
	in := &task.Instance{InstanceID: "mini__calc-1"}
	s := &replySampler{tok: tok, replies: []string{"```bash\nls\n```", "SUBMIT"}, versions: []int{5, 4, 6}}
	gr, err := a.Play(context.Background(), in, 1, "docker", s)
	if err != nil {
		t.Fatal(err)
	}
	r := gr.Rollouts[0]
	if gr.Version != 4 || !r.Finished || r.Truncated || r.Agent.End != event.EndSubmitted || len(r.Agent.Turns) != 2 {
		t.Fatalf("version %d, finished %v, end %s, %d turns", gr.Version, r.Finished, r.Agent.End, len(r.Agent.Turns))
	}
	want, _ := a.Prompt(context.Background(), in) // the issue in the chat's agent prompt
	if len(want) == 0 || !slices.Equal(gr.Prompt, want) || len(r.Mask) != len(r.Tokens) || len(r.Logprobs) != len(r.Tokens) {
		t.Fatalf("prompt %v; %d tokens, %d mask, %d logprobs", gr.Prompt, len(r.Tokens), len(r.Mask), len(r.Logprobs))
	}
	sampled, observed := 0, 0
	for _, m := range r.Mask {
		if m {
			sampled++
		} else {
			observed++
		}
	}
	if sampled == 0 || observed == 0 {
		t.Errorf("%d sampled and %d observed tokens, want both", sampled, observed)
	}
	if sc.calls != 1 || r.Verdict.Reward != 1 || r.Diff != "diff --git a/a.py b/a.py\n" {
		t.Errorf("%d scorer calls, verdict %+v, diff %q", sc.calls, r.Verdict, r.Diff)
	}
}
