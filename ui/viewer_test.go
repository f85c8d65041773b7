package ui

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/exp/golden"

	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/history"
)

// writeRun records evs' completions in dir as a run records them
// (history.Sinks).
func writeRun(t *testing.T, dir string, evs []event.Event) {
	t.Helper()
	s, err := history.OpenSinks(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if c, ok := ev.(event.CompletionScored); ok {
			if err := s.Rollout(c); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// agentFixture is a GRPO step in agent mode as the real pipeline recorded
// it (rollouts.jsonl of two trajectories of one task: the scripted expert's,
// submitted, and one that ran into the turn limit), written by
// `go test ./cli -run TestAgentRolloutsKeepTheirTurns -args -agent-fixture
// $PWD/ui/testdata/agent-run`.
func agentFixture(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "agent-run", history.RolloutsFile))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// agentRunEvents is the agent fixture as the console receives it: a step
// of its two trajectories.
func agentRunEvents(t *testing.T) []event.Event {
	t.Helper()
	evs := []event.Event{event.RunInfo{Name: "agent-run", OutDir: "runs/agent-run", MaxSteps: 10, Phase: "docker", GroupSize: 2, Started: t0},
		event.StageChanged{Stage: "grpo"}, event.StepStarted{Step: 1, Phase: "docker", Time: t0}}
	for _, l := range strings.Split(strings.TrimSpace(string(agentFixture(t))), "\n") {
		var c event.CompletionScored
		if err := json.Unmarshal([]byte(l), &c); err != nil {
			t.Fatal(err)
		}
		evs = append(evs, c)
	}
	return append(evs, event.StepFinished{Step: 1, Phase: "docker", Version: 1, Duration: 16 * time.Second,
		Metrics: event.Metrics{RewardMean: 0.5, RewardMax: 1, RewardStd: 0.707, SyntaxRate: 0.5, ApplyRate: 0.5, ResolvedRate: 0.5,
			AgentSubmitted: 0.5, AgentTurnLimit: 0.5, AgentTurns: 8.5}})
}

// TestGoldenAgent: the live console over a step in agent mode, the Group
// pane listing its trajectories (their ends and turns) and `c` one
// trajectory's turns, drawn from them.
func TestGoldenAgent(t *testing.T) {
	cases := []struct {
		name string
		keys []string
	}{
		{"running", nil},
		{"zoom_group", []string{"enter"}},
		{"trajectory", []string{"tab", "enter", "c"}},
		{"trajectory_unfinished", []string{"j", "tab", "enter", "c"}},
	}
	for _, c := range cases {
		for _, size := range [][2]int{{80, 24}, {200, 50}} {
			t.Run(fmt.Sprintf("%dx%d_%s", size[0], size[1], c.name), func(t *testing.T) {
				m := newTestModel(&fakeCtrl{}, size[0], size[1])
				feed(m, agentRunEvents(t)...)
				press(m, c.keys...)
				view := m.View()
				checkFrame(t, view, size[0], size[1])
				golden.RequireEqual(t, []byte(view))
			})
		}
	}
}

// singleShotRun is three steps of groupEvents' single-shot completions.
func singleShotRun() []event.Event {
	var evs []event.Event
	for s := 1; s <= 3; s++ {
		evs = append(evs, groupEvents(s)...)
	}
	return evs
}

// gatedRun is five steps of a run behind a verifier gate (gatedEvents'
// completions): the fifth step's audits are misses the verifier was sure
// of.
func gatedRun() []event.Event {
	var evs []event.Event
	for _, ev := range gatedEvents(5) {
		if c, ok := ev.(event.CompletionScored); ok {
			evs = append(evs, c)
		}
	}
	return evs
}

// newTestViewer opens the viewer at w x h over a run folder named "run"
// (the header shows the folder: a temporary one's name would differ each
// time), filled by fill. The test works in the folder's parent until back
// is called (golden files are found from the package's folder).
func newTestViewer(t *testing.T, fill func(dir string), w, h int) (v *Viewer, back func()) {
	t.Helper()
	pkg, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir())
	back = func() {
		if err := os.Chdir(pkg); err != nil {
			t.Fatal(err)
		}
	}
	fill("run")
	v, err = NewViewer(ViewOptions{Dir: "run"})
	if err != nil {
		t.Fatal(err)
	}
	v.Update(tea.WindowSizeMsg{Width: w, Height: h})
	return v, back
}

func pressViewer(v *Viewer, ks ...string) {
	for _, k := range ks {
		v.Update(keyMsg(k))
	}
}

// typeFilter types a filter at the / prompt and applies it.
func typeFilter(v *Viewer, expr string) {
	pressViewer(v, "/")
	for _, r := range expr {
		k := tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{r}}
		if r == ' ' {
			k.Type = tea.KeySpace // as the terminal sends it: with its rune
		}
		v.Update(k)
	}
	pressViewer(v, "enter")
}

// TestViewerGolden draws `swetui view`'s screens over a run folder and
// compares with testdata/TestViewerGolden/*.golden (-update rewrites them).
func TestViewerGolden(t *testing.T) {
	singleShot := func(dir string) { writeRun(t, dir, singleShotRun()) }
	gated := func(dir string) { writeRun(t, dir, gatedRun()) }
	fixture := agentFixture(t)
	agentRun := func(dir string) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, history.RolloutsFile), fixture, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name string
		fill func(dir string)
		keys func(v *Viewer)
	}{
		{"list", singleShot, func(v *Viewer) {}},
		{"list_filtered", singleShot, func(v *Viewer) { typeFilter(v, "outcome=applied sort=-reward") }},
		{"completion", singleShot, func(v *Viewer) { pressViewer(v, "enter") }},
		{"list_verifier", gated, func(v *Viewer) {}},
		{"list_verifier_disagree", gated, func(v *Viewer) { typeFilter(v, "verifier=disagree") }},
		{"completion_verifier", gated, func(v *Viewer) { typeFilter(v, "verifier=disagree"); pressViewer(v, "enter") }},
		{"completion_raw", singleShot, func(v *Viewer) { pressViewer(v, "enter", "c") }},
		{"agent_list", agentRun, func(v *Viewer) {}},
		{"agent_list_unfinished", agentRun, func(v *Viewer) { typeFilter(v, "end=unfinished turns>=5") }},
		{"agent_list_command", agentRun, func(v *Viewer) { typeFilter(v, `cmd="git apply"`) }},
		{"agent_completion", agentRun, func(v *Viewer) { pressViewer(v, "enter") }},
		{"agent_completion_end", agentRun, func(v *Viewer) { pressViewer(v, "enter", "pgdown", "pgdown", "pgdown", "pgdown", "pgdown") }},
		{"agent_replies", agentRun, func(v *Viewer) { pressViewer(v, "enter", "c") }},
		{"agent_unfinished", agentRun, func(v *Viewer) { pressViewer(v, "enter", "n") }},
	}
	for _, c := range cases {
		for _, size := range [][2]int{{80, 24}, {120, 30}} {
			t.Run(fmt.Sprintf("%dx%d_%s", size[0], size[1], c.name), func(t *testing.T) {
				v, back := newTestViewer(t, c.fill, size[0], size[1])
				c.keys(v)
				view := v.View()
				back()
				checkFrame(t, view, size[0], size[1])
				golden.RequireEqual(t, []byte(view))
			})
		}
	}
}

// Replaying a trajectory scores its graded diff again, as a reply holding
// it: its turns are not a completion the scorer could read.
func TestReplayTrajectory(t *testing.T) {
	ctrl := &fakeCtrl{}
	m := newTestModel(ctrl, 200, 50)
	evs := agentRunEvents(t)
	feed(m, evs...)
	press(m, "r")
	c := evs[3].(event.CompletionScored)
	want := []call{{"Replay", c.Verdict.InstanceID + "|```diff\n" + strings.TrimRight(c.Verdict.Patch, "\n") + "\n```\n"}}
	if got := ctrl.Calls(); len(got) != 1 || got[0] != want[0] || c.Verdict.Patch == "" {
		t.Errorf("replay calls %q, want %q", got, want)
	}
}
