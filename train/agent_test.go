package train

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/history"
	"github.com/swetui/swetui/rollout"
	"github.com/swetui/swetui/task"
)

// recordingPolicy samples fixed replies (three tokens, the last its stop)
// and records what Backward is given.
type recordingPolicy struct {
	mu      sync.Mutex
	next    int
	version int
	seqs    []Sequence
	cot     [][]float64
}

func (p *recordingPolicy) Sample(_ context.Context, _ []int, n int, _ SampleOptions) ([]Sample, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Sample, n)
	for i := range out {
		p.next++
		out[i] = Sample{Tokens: []int{100 + p.next, 200 + p.next, 2}, Logprobs: []float64{-0.5, -0.25, -0.125}}
	}
	return out, nil
}

func (p *recordingPolicy) Logprobs(_ context.Context, seqs []Sequence) ([][]float64, error) {
	out := make([][]float64, len(seqs))
	for i, s := range seqs {
		out[i] = make([]float64, len(s.Completion))
	}
	return out, nil
}

func (p *recordingPolicy) Backward(_ context.Context, seqs []Sequence, cot [][]float64) ([][]float64, float64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seqs, p.cot = append(p.seqs, seqs...), append(p.cot, cot...)
	lp, _ := p.Logprobs(context.Background(), seqs)
	return lp, 0, nil
}

func (p *recordingPolicy) Step() (float64, float64) { p.version++; return 1, 1e-3 }
func (p *recordingPolicy) Version() int             { return p.version }

// scriptedAgent plays each trajectory two turns, sampling through the
// trainer and adding an observation of three tokens after each reply;
// trajectory i ends and is graded as ends[i] and rewards[i].
type scriptedAgent struct {
	ends    []event.End
	rewards []float64
	played  []played
}

// played is a trajectory as scriptedAgent played it: the prompt's tokens
// and everything after, which the policy sampled.
type played struct {
	tokens    []int
	sampled   []bool
	promptLen int
	agent     *event.Trajectory
}

func (a *scriptedAgent) Play(ctx context.Context, inst *task.Instance, g int, phase string, s rollout.Sampler) (*rollout.Group, error) {
	prompt := []int{1, 2, 3}
	gr := &rollout.Group{Prompt: prompt, Graded: true}
	for i := range g {
		p := played{tokens: slices.Clone(prompt), sampled: make([]bool, len(prompt)), promptLen: len(prompt),
			agent: &event.Trajectory{End: a.ends[i], Turns: []event.Turn{
				{Reply: "```bash\nls\n```", Command: "ls", Observation: "exit code 0\nsetup.py", ReplyTokens: 3, ObsTokens: 3},
				{Reply: "SUBMIT", ReplyTokens: 3}}}}
		logprobs := make([]float64, len(prompt))
		for turn := range 2 {
			smp, _, err := s.SampleTurn(ctx, p.tokens, rollout.SampleOptions{MaxNewTokens: 16})
			if err != nil {
				return nil, err
			}
			p.tokens = append(p.tokens, smp.Tokens...)
			logprobs = append(logprobs, smp.Logprobs...)
			for range smp.Tokens {
				p.sampled = append(p.sampled, true)
			}
			if turn == 0 {
				p.tokens = append(p.tokens, 7, 8, 9)
				logprobs = append(logprobs, 0, 0, 0)
				p.sampled = append(p.sampled, false, false, false)
			}
		}
		n := p.promptLen
		gr.Rollouts = append(gr.Rollouts, rollout.Rollout{Sample: rollout.Sample{Tokens: p.tokens[n:], Logprobs: logprobs[n:], Truncated: a.ends[i] != "submitted"},
			Mask: p.sampled[n:], Finished: a.ends[i] == "submitted", Agent: p.agent,
			Verdict: event.Verdict{InstanceID: inst.InstanceID, Phase: phase, Reward: a.rewards[i], SyntaxOK: true}})
		a.played = append(a.played, p)
	}
	return gr, nil
}

func (a *scriptedAgent) Grade(context.Context, *task.Instance, *rollout.Group, string) error {
	return nil
}
func (a *scriptedAgent) Together() bool { return true }

// A GRPO step in agent mode trains on each finished trajectory's tokens
// exactly as played: the prompt and everything after it, the observation
// tokens with a cotangent of 0; the unfinished one is left out
// (agent.unfinished=mask); the end reasons are the step's metrics.
func TestAgentModeTrainsOnTheExactTrajectories(t *testing.T) {
	cfg := testConfig(t, "rollout.mode=agent", "agent.unfinished=mask", "agent.group_size=4", "grpo.prompts_per_step=1", "run.max_steps=1",
		"grpo.dynamic_sampling=false", "grpo.loss_agg=token-mean")
	pol := &recordingPolicy{}
	ag := &scriptedAgent{ends: []event.End{"submitted", "submitted", "turn_limit", "submitted"}, rewards: []float64{1, 0, 1, 0.5}}
	tr := New(cfg, Deps{Policy: pol, Tokenizer: digitTokenizer{}, Tasks: fakeTasks(3), Rollouts: ag, DockerOK: true})
	evs := drain(tr)
	if err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	var m event.Metrics
	var scored []event.CompletionScored
	for _, ev := range <-evs {
		switch ev := ev.(type) {
		case event.StepFinished:
			m = ev.Metrics
		case event.CompletionScored:
			scored = append(scored, ev)
		}
	}
	// Each completion carries its trajectory's turns, to the console and to
	// rollouts.jsonl; its text is not kept twice.
	ix, err := history.Open(cfg.Run.OutDir)
	if err != nil || len(scored) != 4 || len(ix.Entries) != 4 {
		t.Fatalf("%d completions published, %d recorded (%v)", len(scored), len(ix.Entries), err)
	}
	for i, c := range scored {
		if c.Agent != ag.played[i].agent || c.Completion != "" {
			t.Errorf("completion %d: trajectory %+v, text %q; want the played one's turns", i, c.Agent, c.Completion)
		}
		line, err := history.Read(cfg.Run.OutDir, ix.Entries[i])
		if err != nil || !reflect.DeepEqual(line.Agent, ag.played[i].agent) {
			t.Errorf("rollouts.jsonl line %d: %+v (%v), want %+v", i, line.Agent, err, ag.played[i].agent)
		}
	}
	if len(pol.seqs) != 3 {
		t.Fatalf("%d sequences trained, want the 3 finished trajectories", len(pol.seqs))
	}
	finished := []played{ag.played[0], ag.played[1], ag.played[3]}
	for i, s := range pol.seqs {
		r := finished[i]
		if got := append(slices.Clone(s.Prompt), s.Completion...); !slices.Equal(got, r.tokens) {
			t.Errorf("sequence %d: %v, want the trajectory %v", i, got, r.tokens)
		}
		for j, c := range pol.cot[i] {
			sampled := r.sampled[r.promptLen+j]
			if !sampled && c != 0 {
				t.Errorf("sequence %d token %d (an observation) has cotangent %v", i, j, c)
			}
			if sampled && c == 0 && i != 2 { // the 0.5 reward is the group's mean of the valid: advantage 0
				t.Errorf("sequence %d token %d (sampled) has no cotangent", i, j)
			}
		}
	}
	if m.AgentSubmitted != 0.75 || m.AgentTurnLimit != 0.25 || m.AgentTurns != 2 {
		t.Errorf("metrics: submitted %v turn limit %v turns %v", m.AgentSubmitted, m.AgentTurnLimit, m.AgentTurns)
	}
	if m.Tokens != 3*6 {
		t.Errorf("%d loss tokens, want the 6 sampled of each of 3 trajectories", m.Tokens)
	}
}

// An unfinished trajectory earns what its diff earns (agent.unfinished =
// graded), nothing (zero), or is left out of the loss (mask); an
// infrastructure failure is masked whatever the setting.
func TestUnfinishedTrajectoriesRewards(t *testing.T) {
	for _, tt := range []struct {
		unfinished  string
		wantRewards []float64
		wantValid   []bool
	}{
		{"graded", []float64{1, 0.7, 0.5}, []bool{true, true, false}},
		{"zero", []float64{1, 0, 0.5}, []bool{true, true, false}},
		{"mask", []float64{1, 0.7, 0.5}, []bool{true, false, false}},
	} {
		t.Run(tt.unfinished, func(t *testing.T) {
			cfg := testConfig(t, "rollout.mode=agent", "agent.unfinished="+tt.unfinished)
			tr := New(cfg, Deps{Policy: &recordingPolicy{}, Tokenizer: digitTokenizer{}, Tasks: fakeTasks(3), Rollouts: &scriptedAgent{}, DockerOK: true})
			gr := &group{unsubmitted: []bool{false, true, false}, samples: make([]Sample, 3),
				verdicts: []event.Verdict{{Reward: 1}, {Reward: 0.7}, {Reward: 0.5, Infra: true}}}
			rewards, valid, _ := tr.shapedRewards(gr)
			if !slices.Equal(rewards, tt.wantRewards) || !slices.Equal(valid, tt.wantValid) {
				t.Errorf("rewards %v valid %v, want %v %v", rewards, valid, tt.wantRewards, tt.wantValid)
			}
		})
	}
}

// barrierAgent's Rollouts return only once n calls are in at once, or
// fail after a while: the step played its groups one after another.
type barrierAgent struct {
	scriptedAgent
	n       int
	mu      sync.Mutex
	in      int
	arrived chan struct{}
}

func (a *barrierAgent) Play(ctx context.Context, inst *task.Instance, g int, phase string, s rollout.Sampler) (*rollout.Group, error) {
	a.mu.Lock()
	a.in++
	if a.in == a.n {
		close(a.arrived)
	}
	a.mu.Unlock()
	select {
	case <-a.arrived:
	case <-time.After(10 * time.Second):
		return nil, fmt.Errorf("%s waited alone: the step's groups do not play at once", inst.InstanceID)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.scriptedAgent.Play(ctx, inst, g, phase, s)
}

// An agent step's groups play at once (their turns are decoded together),
// and are trained in the order their tasks were drawn.
func TestAgentGroupsPlayAtOnce(t *testing.T) {
	run := func(ag Rollouts) []string {
		cfg := testConfig(t, "rollout.mode=agent", "agent.group_size=2", "grpo.prompts_per_step=3", "run.max_steps=1",
			"grpo.dynamic_sampling=false")
		tr := New(cfg, Deps{Policy: &recordingPolicy{}, Tokenizer: digitTokenizer{}, Tasks: fakeTasks(5), Rollouts: ag, DockerOK: true})
		evs := drain(tr)
		if err := tr.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		var order []string
		for _, ev := range <-evs {
			if c, ok := ev.(event.CompletionScored); ok {
				order = append(order, c.Verdict.InstanceID)
			}
		}
		return order
	}
	ends, rewards := []event.End{"submitted", "submitted"}, []float64{1, 0}
	got := run(&barrierAgent{scriptedAgent: scriptedAgent{ends: ends, rewards: rewards}, n: 3, arrived: make(chan struct{})})
	// The same seed's tasks, drawn in order: as an agent that plays alone.
	want := run(&scriptedAgent{ends: ends, rewards: rewards})
	if len(got) != 6 || !slices.Equal(got, want) {
		t.Errorf("completions of %v, want %v (the tasks in the order drawn)", got, want)
	}
}

// TestUnfinishedShownAsTrained (issue 45, item 10): what the console and
// rollouts.jsonl show of an unfinished trajectory is what trained on it:
// under agent.unfinished = zero its trained reward, 0, beside the graded
// one; under mask, that it was left out; under graded, the graded reward
// alone.
func TestUnfinishedShownAsTrained(t *testing.T) {
	for _, tt := range []struct {
		unfinished string
		trained    *float64 // the unfinished one's
		masked     bool
	}{
		{"zero", new(float64), false},
		{"mask", nil, true},
		{"graded", nil, false},
	} {
		t.Run(tt.unfinished, func(t *testing.T) {
			cfg := testConfig(t, "rollout.mode=agent", "agent.unfinished="+tt.unfinished, "agent.group_size=2",
				"grpo.prompts_per_step=1", "run.max_steps=1", "grpo.dynamic_sampling=false")
			ag := &scriptedAgent{ends: []event.End{"submitted", "turn_limit"}, rewards: []float64{1, 1}}
			tr := New(cfg, Deps{Policy: &recordingPolicy{}, Tokenizer: digitTokenizer{}, Tasks: fakeTasks(3), Rollouts: ag, DockerOK: true})
			evs := drain(tr)
			if err := tr.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			var scored []event.CompletionScored
			for _, ev := range <-evs {
				if c, ok := ev.(event.CompletionScored); ok {
					scored = append(scored, c)
				}
			}
			ix, err := history.Open(cfg.Run.OutDir)
			if err != nil || len(scored) != 2 || len(ix.Entries) != 2 {
				t.Fatalf("%d completions published, %d recorded (%v)", len(scored), len(ix.Entries), err)
			}
			for i, c := range scored {
				line, err := history.Read(cfg.Run.OutDir, ix.Entries[i])
				if err != nil {
					t.Fatal(err)
				}
				wantTrained, wantMasked := (*float64)(nil), false
				if i == 1 {
					wantTrained, wantMasked = tt.trained, tt.masked
				}
				for where, got := range map[string]event.CompletionScored{"published": c, "rollouts.jsonl": line} {
					if !reflect.DeepEqual(got.Trained, wantTrained) || got.Masked != wantMasked || got.Verdict.Reward != 1 {
						t.Errorf("%s completion %d: trained %v masked %v graded %v, want %v %v 1", where, i,
							fmtPtr(got.Trained), got.Masked, got.Verdict.Reward, fmtPtr(wantTrained), wantMasked)
					}
				}
			}
			// The advantages follow the trained rewards: 1 against 0 under zero.
			if tt.unfinished == "zero" && !(scored[0].Advantage > 0 && scored[1].Advantage < 0) {
				t.Errorf("advantages %v %v, want the submitted one above the unfinished one", scored[0].Advantage, scored[1].Advantage)
			}
		})
	}
}

func fmtPtr(p *float64) string {
	if p == nil {
		return "nil"
	}
	return fmt.Sprint(*p)
}
