package ui

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/charmbracelet/x/exp/golden"

	"github.com/swetui/swetui/event"
)

// Two sessions' ids as Docker gives them.
var liveSessions = [...]string{"5c0e9d2a7b4f1e3c8d6a0b9f2e4c7a1d3b5e8f0a2c4d6e8f1a3b5c7d9e0f2a4b",
	"9f3b7e1c5a2d8f4b6e0c3a9d7f1b5e2c8a4d6f0b3e9c1a7d5f2b8e4c6a0d3f9b"}

// liveEvents is a second step of the agent fixture in flight: its two
// trajectories played again, each in a session of its own, the first to
// its turn upTo[0], the second to upTo[1] (a trajectory played to its last
// turn is told of its end too, with its diff's size), told to the console
// as the run tells it (event.PlayedTurn), turn by turn in turns; the pool
// grades the first one's diff once it has ended.
func liveEvents(t *testing.T, upTo ...int) []event.Event {
	t.Helper()
	var trs []event.CompletionScored
	for _, ev := range agentRunEvents(t) {
		if c, ok := ev.(event.CompletionScored); ok {
			trs = append(trs, c)
		}
	}
	if len(trs) != len(liveSessions) {
		t.Fatalf("the agent fixture has %d trajectories, want %d", len(trs), len(liveSessions))
	}
	evs := []event.Event{event.StepStarted{Step: 2, Phase: "docker", Time: t0.Add(59 * time.Minute)}}
	ended := make([]bool, len(trs))
	for n := 1; n <= max(upTo[0], upTo[1]); n++ {
		for i, c := range trs {
			turns := c.Agent.Turns
			if n > upTo[i] || n > len(turns) {
				continue
			}
			evs = append(evs, event.PlayedTurn(liveSessions[i], c.Verdict.InstanceID, n, turns[n-1], n == len(turns) && c.Agent.Finished()))
			if n == len(turns) {
				ended[i] = true
				evs = append(evs, event.TurnPlayed{Session: liveSessions[i], InstanceID: c.Verdict.InstanceID, Turn: n, End: c.Agent.End,
					Detail: c.Agent.Detail, DiffBytes: len(c.Verdict.Patch)})
			}
		}
	}
	pool := event.PoolState{Done: 2, Sessions: 2, Workers: []event.WorkerState{
		{ID: 0, Host: "local", Status: "idle", Since: t0}, {ID: 1, Host: "local", Status: "idle", Since: t0}}}
	if ended[0] {
		id := trs[0].Verdict.InstanceID
		pool.Workers[0] = event.WorkerState{ID: 0, Host: "local", Busy: true, InstanceID: id, EvalID: "eval-7c1f0a9e",
			ContainerID: "e41b7d09c3a2f6581d4e7b0c9a3f2e6d5b8c1a0f7e4d3b2c9a8f6e5d4c3b2a10", Since: t0.Add(time.Hour - 3*time.Second),
			Status: "running"}
		evs = append(evs, event.LogBatch{EvalID: "eval-7c1f0a9e", Worker: 0, InstanceID: id, Lines: []string{
			"+ git apply --verbose /tmp/patch.diff", "Checking patch juniper/report.py...", "Applied patch juniper/report.py cleanly.",
			"tests/test_report.py::test_count_late_counts_boundary PASSED"}})
	}
	return append(evs, pool)
}

// TestGoldenLive: in agent mode the Containers pane shows the trajectories
// in flight beneath its workers, each one's newest turn (its command's
// first line, exit code and output's head) or its end, until the next step
// starts (testdata/TestGoldenLive/*.golden; go test ./ui -run TestGolden
// -update rewrites them).
func TestGoldenLive(t *testing.T) {
	cases := []struct {
		name string
		upTo [2]int
		zoom bool
	}{
		{"playing_and_ended", [2]int{99, 1}, false}, // the first submitted, graded; the second at its first command
		{"zoom_containers", [2]int{5, 4}, true},     // a heredoc's first line; a reply without a command
	}
	for _, c := range cases {
		for _, size := range [][2]int{{80, 24}, {200, 50}} {
			t.Run(fmt.Sprintf("%dx%d_%s", size[0], size[1], c.name), func(t *testing.T) {
				m := newTestModel(&fakeCtrl{}, size[0], size[1])
				feed(m, agentRunEvents(t)...)
				feed(m, liveEvents(t, c.upTo[:]...)...)
				if c.zoom {
					focusOn(t, m, "Containers")
					press(m, "enter")
				}
				view := m.View()
				checkFrame(t, view, size[0], size[1])
				golden.RequireEqual(t, []byte(view))
			})
		}
	}
}

// The console follows each trajectory by its session: a turn replaces its
// row, an ended one is drawn after those playing (the newest end first)
// until the next step starts, one playing stays while it plays in each
// step, and the set is bounded (an ended one gives way first, else the one
// that played least recently).
func TestLiveTrajectories(t *testing.T) {
	turn := func(s string, n int) event.Event {
		return event.PlayedTurn(s, "mini__calc-1", n, event.Turn{Command: "ls", Observation: "exit code 0\na.py\n"}, false)
	}
	end := func(s string, n int) event.Event {
		return event.TurnPlayed{Session: s, InstanceID: "mini__calc-1", Turn: n, End: "turn_limit"}
	}
	full := func() []event.Event { // keptLive trajectories at their first turn
		var evs []event.Event
		for i := range keptLive {
			evs = append(evs, turn(fmt.Sprint("s", i), 1))
		}
		return evs
	}
	fullRows := func(drop string, add ...string) []string {
		var rows []string
		for i := range keptLive {
			if s := fmt.Sprint("s", i); s != drop {
				rows = append(rows, s+":1")
			}
		}
		return append(rows, add...)
	}
	for _, tt := range []struct {
		name string
		evs  []event.Event
		want []string // session:turn[:end], in the order drawn
	}{
		{"a turn replaces its trajectory's row", []event.Event{turn("a", 1), turn("b", 1), turn("a", 2)}, []string{"a:2", "b:1"}},
		{"an ended one is drawn after those playing", []event.Event{turn("a", 1), turn("b", 1), end("a", 1)}, []string{"b:1", "a:1:turn_limit"}},
		{"the newest end first", []event.Event{turn("a", 1), turn("b", 1), turn("c", 1), end("a", 1), end("b", 1)},
			[]string{"c:1", "b:1:turn_limit", "a:1:turn_limit"}},
		{"the next step clears the ended ones", []event.Event{turn("a", 1), end("a", 1), turn("b", 3), event.StepStarted{Step: 2}}, []string{"b:3"}},
		{"one that played in the step stays", []event.Event{event.StepStarted{Step: 1}, turn("a", 1), event.StepStarted{Step: 2},
			turn("b", 1), event.StepStarted{Step: 3}}, []string{"b:1"}},
		{"one that played nothing in a step goes", []event.Event{turn("a", 1), event.StepStarted{Step: 2}, event.StepStarted{Step: 3}}, nil},
		{"a stopped run clears them", []event.Event{turn("a", 1), event.Stopped{Step: 1}}, nil},
		{"a full set drops an ended one first", append(full(), end("s3", 1), turn("new", 1)), fullRows("s3", "new:1")},
		{"else the one that played least recently", append(full(), turn("s0", 1), turn("new", 1)), append([]string{"s0:1"}, fullRows("s0", "new:1")[1:]...)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := newTestModel(&fakeCtrl{}, 200, 50)
			feed(m, tt.evs...)
			rows, _ := m.st.live.shown()
			var got []string
			for _, r := range rows {
				g := fmt.Sprintf("%s:%d", r.Session, r.Turn)
				if r.End != "" {
					g += ":" + string(r.End)
				}
				got = append(got, g)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("rows %q, want %q", got, tt.want)
			}
		})
	}
}

// Once the trajectory ended and the next step starts the pane is as it was
// before any turn, and a
// turn from a publisher that did not cut it holds no more than one cut.
func TestLiveTrajectoriesLeaveNothing(t *testing.T) {
	m := newTestModel(&fakeCtrl{}, 200, 50)
	feed(m, agentRunEvents(t)...)
	feed(m, event.StepStarted{Step: 2, Phase: "docker"})
	before := m.View()
	huge := strings.Repeat("y\n", 50000)
	feed(m, event.TurnPlayed{Session: "a", InstanceID: "mini__calc-1", Turn: 1, Command: "yes | head -50000", Output: huge})
	rows, _ := m.st.live.shown()
	if len(rows) != 1 {
		t.Fatalf("%d rows, want 1", len(rows))
	}
	if n := len(rows[0].Output); n > event.TurnHeadBytes {
		t.Errorf("the output kept is %d bytes", n)
	}
	if m.View() == before {
		t.Fatal("a trajectory in flight is not shown")
	}
	feed(m, event.TurnPlayed{Session: "a", InstanceID: "mini__calc-1", Turn: 2, End: "submitted"})
	feed(m, event.StepStarted{Step: 2, Phase: "docker"})
	if after := m.View(); after != before {
		t.Errorf("after the step cleared its trajectories:\n%s\nwant\n%s", after, before)
	}
}
