package train

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/task"
)

func TestEdgeWeight(t *testing.T) {
	for _, tt := range []struct{ p, floor, want float64 }{
		{0.5, 0.05, 1},               // the edge: 0.05 + 0.95·4·¼
		{0, 0.05, 0.05},              // never passed
		{1, 0.05, 0.05},              // always passed
		{0.25, 0.05, 0.7625},         // 0.05 + 0.95·4·0.25·0.75 = 0.05 + 0.7125
		{0.9, 0.1, 0.1 + 0.9*4*0.09}, // 0.1 + 0.9·0.36 = 0.424
	} {
		if got := EdgeWeight(tt.p, tt.floor); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("EdgeWeight(%v, %v) = %v, want %v", tt.p, tt.floor, got, tt.want)
		}
	}
}

func verdicts(applied ...bool) []event.Verdict {
	out := make([]event.Verdict, len(applied))
	for i, a := range applied {
		out[i] = event.Verdict{SyntaxOK: true, Applied: a}
	}
	return out
}

func TestTaskPoolObserveKeepsAnEMAPerPhase(t *testing.T) {
	var p TaskPool
	p.Observe("apply-only", "a", verdicts(true, false, false, false)) // 1/4
	p.Observe("apply-only", "a", verdicts(true, true, true, false))   // 0.5·0.25 + 0.5·0.75
	infra := append(verdicts(true, false), event.Verdict{Infra: true, Applied: true})
	p.Observe("apply-only", "b", infra) // 1/2: the infra failure does not count
	p.Observe("syntax", "a", verdicts(true, true))
	want := map[string]map[string]float64{"apply-only": {"a": 0.5, "b": 0.5}, "syntax": {"a": 1}}
	if !reflect.DeepEqual(p.PassRate, want) {
		t.Fatalf("pass rates %v, want %v", p.PassRate, want)
	}
}

func TestTaskPoolDrawFollowsTheWeights(t *testing.T) {
	tasks := fakeTasks(3)
	p := TaskPool{PassRate: map[string]map[string]float64{"docker": {"t0": 0, "t1": 0.5}}}
	// Weights t0 0.05, t1 1, t2 (unseen) 1: total 2.05.
	for _, tt := range []struct {
		u       float64
		exclude map[string]bool
		want    string
	}{
		{0.01, nil, "t0"},                        // 0.0205 < 0.05
		{0.5, nil, "t1"},                         // 1.025 - 0.05 = 0.975 < 1
		{0.99, nil, "t2"},                        // 2.0295 - 1.05 = 0.9795
		{0.5, map[string]bool{"t1": true}, "t2"}, // total 1.05: 0.525 - 0.05 = 0.475 in t2
		{0.3, map[string]bool{"t0": true, "t1": true, "t2": true}, "t0"}, // nothing left: plain uniform
	} {
		if got := p.Draw(tasks, "docker", 0.05, tt.u, tt.exclude).InstanceID; got != tt.want {
			t.Errorf("Draw(u=%v, exclude %v) = %s, want %s", tt.u, tt.exclude, got, tt.want)
		}
	}
	// In a phase with no history every task weighs the same.
	if got := p.Draw(tasks, "syntax", 0.05, 0.7, nil).InstanceID; got != "t2" {
		t.Errorf("uniform draw at 0.7 = %s, want t2", got)
	}
}

// perTaskReward scores by task: tasks in constant get the same reward for
// every completion (no variance), the others reward completion "3".
type perTaskReward struct{ constant map[string]bool }

func (s perTaskReward) Score(ctx context.Context, inst *task.Instance, completions []string, phase string) ([]event.Verdict, error) {
	out := make([]event.Verdict, len(completions))
	for i, c := range completions {
		switch {
		case s.constant[inst.InstanceID]:
			out[i] = event.Verdict{Reward: 0.3, SyntaxOK: true}
		case c == "3":
			out[i] = event.Verdict{Reward: 1, SyntaxOK: true, Applied: true}
		default:
			out[i] = event.Verdict{SyntaxOK: true}
		}
		out[i].InstanceID = inst.InstanceID
	}
	return out, nil
}

// stepGroups collects, per step, each group's completions and whether any
// of them had a non-zero advantage.
func stepGroups(evs []event.Event) (sizes map[int]map[int]int, varied map[int]map[int]bool, metrics map[int]event.Metrics) {
	sizes, varied, metrics = map[int]map[int]int{}, map[int]map[int]bool{}, map[int]event.Metrics{}
	for _, ev := range evs {
		switch e := ev.(type) {
		case event.CompletionScored:
			if sizes[e.Step] == nil {
				sizes[e.Step], varied[e.Step] = map[int]int{}, map[int]bool{}
			}
			sizes[e.Step][e.Group]++
			varied[e.Step][e.Group] = varied[e.Step][e.Group] || e.Advantage != 0
		case event.StepFinished:
			metrics[e.Step] = e.Metrics
		}
	}
	return sizes, varied, metrics
}

func TestDynamicSamplingFillsTheStepWithVariedGroups(t *testing.T) {
	scorer := perTaskReward{constant: map[string]bool{"t0": true, "t1": true, "t2": true}}
	async := []string{"grpo.async.enabled=true", "grpo.is_correction=truncated", "grpo.async.max_trajectory_age_steps=0"}
	for _, tt := range []struct {
		name    string
		dynamic bool
		extra   []string
	}{{"sync", false, nil}, {"sync dynamic", true, nil}, {"async dynamic", true, async}} {
		dynamic := tt.dynamic
		cfg := testConfig(t, append([]string{"run.max_steps=12", "grpo.group_size=4", "grpo.max_groups=6",
			"grpo.dynamic_sampling=" + map[bool]string{false: "false", true: "true"}[dynamic]}, tt.extra...)...)
		pol := newBandit(6, 0.5, 3)
		tr := newTestTrainer(cfg, pol, scorer)
		evs := drain(tr)
		if err := tr.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		sizes, varied, metrics := stepGroups(<-evs)
		for step := 1; step <= 12; step++ {
			m, n := metrics[step], len(sizes[step])
			nVaried := 0
			for _, v := range varied[step] {
				if v {
					nVaried++
				}
			}
			if m.Groups != n || m.ExtraSamples != 4*max(0, n-2) {
				t.Fatalf("%s step %d: metrics say %d groups, %d extra samples; saw %d groups of 4", tt.name, step, m.Groups, m.ExtraSamples, n)
			}
			if !dynamic && n != 2 {
				t.Fatalf("without dynamic sampling step %d drew %d groups, want 2", step, n)
			}
			// Dynamic: stop once two groups vary, or at max_groups.
			if dynamic && !(nVaried == 2 || n == 6) {
				t.Fatalf("%s step %d: %d groups drawn, %d with variance; want 2 varied or 6 drawn", tt.name, step, n, nVaried)
			}
			if dynamic && nVaried == 2 && !varied[step][n-1] {
				t.Fatalf("%s step %d drew past its second varied group", tt.name, step)
			}
		}
	}
}

func TestGroupSizeFollowsThePhase(t *testing.T) {
	cfg := testConfig(t, "run.max_steps=2", "grpo.group_size=8", "grpo.group_size_by_phase.syntax=3")
	tr := newTestTrainer(cfg, newBandit(6, 0.5, 3), rewardOf3)
	evs := drain(tr)
	if err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	sizes, _, _ := stepGroups(<-evs)
	for step, groups := range sizes {
		for g, n := range groups {
			if n != 3 {
				t.Fatalf("step %d group %d has %d completions, want 3 (group_size_by_phase.syntax)", step, g, n)
			}
		}
	}
}

func TestPassRateSamplerResumesTheSameTrajectory(t *testing.T) {
	scorer := perTaskReward{constant: map[string]bool{"t0": true}}
	over := []string{"curriculum.task_sampler=pass-rate", "grpo.kl_coef=0", "grpo.dynamic_sampling=true"}
	straightCfg := testConfig(t, append(over, "run.max_steps=12")...)
	straight := newBandit(6, 0.5, 11)
	tr := newTestTrainer(straightCfg, straight, scorer)
	drain(tr)
	if err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	legCfg := testConfig(t, append(over, "run.max_steps=5")...)
	tr = newTestTrainer(legCfg, newBandit(6, 0.5, 11), scorer)
	drain(tr)
	if err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	var saved struct {
		Pool TaskPool `json:"task_pool"`
	}
	data, err := os.ReadFile(filepath.Join(legCfg.Run.OutDir, "checkpoints", "step-00000005", stateFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &saved); err != nil || len(saved.Pool.PassRate["syntax"]) == 0 {
		t.Fatalf("state.json holds no pass rates (err %v): %.300s", err, data)
	}
	legCfg.Run.MaxSteps = 12
	second := newBandit(6, 0.5, 999)
	tr = newTestTrainer(legCfg, second, scorer)
	drain(tr)
	if err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(straight.Theta, second.Theta) {
		t.Fatalf("resumed θ %v != uninterrupted θ %v", second.Theta, straight.Theta)
	}
	a := readLines(t, filepath.Join(straightCfg.Run.OutDir, "rollouts.jsonl"))
	b := readLines(t, filepath.Join(legCfg.Run.OutDir, "rollouts.jsonl"))
	if len(a) != len(b) || strings.Join(ids(t, a), ",") != strings.Join(ids(t, b), ",") {
		t.Fatalf("resumed run drew other tasks:\n%v\n%v", ids(t, a), ids(t, b))
	}
}

func ids(t *testing.T, lines []string) []string {
	var out []string
	for _, l := range lines {
		var r struct {
			Verdict struct {
				ID string `json:"instance_id"`
			} `json:"verdict"`
		}
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r.Verdict.ID)
	}
	return out
}
