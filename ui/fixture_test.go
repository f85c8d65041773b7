package ui

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"
	"github.com/muesli/termenv"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/reward"
)

func TestMain(m *testing.M) {
	// Goldens are plain text: the ASCII profile drops every colour, which is
	// also what NO_COLOR gets.
	lipgloss.SetColorProfile(termenv.Ascii)
	m.Run()
}

var t0 = time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)

// call is one recorded controller call.
type call struct {
	Method string
	Arg    string
}

// fakeCtrl records the controls the console sends.
type fakeCtrl struct {
	mu    sync.Mutex
	calls []call
}

func (f *fakeCtrl) rec(m, a string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call{m, a})
}

func (f *fakeCtrl) Pause()              { f.rec("Pause", "") }
func (f *fakeCtrl) Resume()             { f.rec("Resume", "") }
func (f *fakeCtrl) SetPhase(p string)   { f.rec("SetPhase", p) }
func (f *fakeCtrl) SetAuto(on bool)     { f.rec("SetAuto", fmt.Sprint(on)) }
func (f *fakeCtrl) SaveNow()            { f.rec("SaveNow", "") }
func (f *fakeCtrl) Stop()               { f.rec("Stop", "") }
func (f *fakeCtrl) Replay(id, c string) { f.rec("Replay", id+"|"+c) }

func (f *fakeCtrl) Calls() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]call(nil), f.calls...)
}

// newTestModel is a console at w x h on a fixed clock with no channel.
func newTestModel(ctrl Controller, w, h int) *Model {
	m := New(ctrl, nil, Options{})
	m.st.now = func() time.Time { return t0.Add(time.Hour) }
	m.st.created = t0
	m.resize(w, h)
	return m
}

// feed applies events as one batch, as the pump would deliver them.
func feed(m *Model, evs ...event.Event) { m.Update(eventsMsg{events: evs}) }

const sampleDiff = `diff --git a/calc/ops.py b/calc/ops.py
index 3b18e51..a9c2f4d 100644
--- a/calc/ops.py
+++ b/calc/ops.py
@@ -10,6 +10,6 @@ def divide(a, b):
     """Divide a by b."""
     if b == 0:
-        return 0
+        raise ZeroDivisionError("b is zero")
     return a / b
 
 def mod(a, b):
`

// runEvents is a deterministic run of steps finished steps (two tasks of
// four completions each), a pool of two workers with streamed logs, and a
// step steps+1 in flight.
func runEvents(steps int) []event.Event {
	evs := []event.Event{
		event.RunInfo{Name: "mini-grpo", OutDir: "runs/mini-grpo", MaxSteps: 200, Phase: "apply-only", Auto: true,
			Build: "openblas", Hosts: []string{"unix:///var/run/docker.sock", "ssh://gpu-box"}, GroupSize: 4, Started: t0},
		event.StageChanged{Stage: "sft", Progress: 0.5, Detail: "warm start on gold patches"},
		event.StageChanged{Stage: "grpo", Progress: 0, Detail: "syntax→docker curriculum"},
	}
	for s := 1; s <= steps; s++ {
		evs = append(evs, event.StepStarted{Step: s, Phase: "apply-only", Time: t0.Add(time.Duration(s) * 10 * time.Second)})
		evs = append(evs, groupEvents(s)...)
		x := float64(s)
		evs = append(evs, event.StepFinished{Step: s, Phase: "apply-only", Version: s, Duration: 10 * time.Second,
			Metrics: event.Metrics{
				RewardMean: 0.3 + 0.2*math.Sin(x/7) + x/1000, RewardMax: 0.8 + 0.1*math.Cos(x/5),
				SyntaxRate: math.Min(1, 0.5+x/60), ApplyRate: math.Min(1, 0.2+x/100), ResolvedRate: math.Min(1, x/400),
				KL: 0.01 + 0.005*math.Sin(x/3), Loss: 0.5 - x/500 + 0.05*math.Cos(x/2), StepSeconds: 10 + math.Sin(x),
			}})
	}
	evs = append(evs, event.StepStarted{Step: steps + 1, Phase: "apply-only"})
	evs = append(evs, event.CheckpointSaved{Step: steps, Path: fmt.Sprintf("runs/mini-grpo/ckpt-%06d", steps)},
		event.Message{Level: event.Warn, Text: "worker 1: container start took 12.0s", Time: t0.Add(50 * time.Minute)},
		event.PoolState{Queue: 3, Done: 8 * steps, P50: 4100 * time.Millisecond, P95: 9800 * time.Millisecond,
			Timeouts: 1, InfraFailures: 2, Retries: 3, Hosts: []event.HostState{
				{Endpoint: "unix:///var/run/docker.sock", Up: true, Active: 1, Since: t0},
				{Endpoint: "ssh://gpu-box", Up: false, Err: "dial tcp 10.0.0.7:22: connect: connection refused",
					Since: t0.Add(50 * time.Minute), RetryAt: t0.Add(time.Hour + 20*time.Second)},
			}, Workers: []event.WorkerState{
				{ID: 0, Host: "local", Busy: true, InstanceID: "mini__calc-12", ContainerID: "3f2a1b9c0d12e4f5",
					EvalID: "e-0042", Since: t0.Add(time.Hour - 12*time.Second), Status: "running tests"},
				{ID: 1, Host: "local", Busy: false, InstanceID: "mini__strings-7", ContainerID: "9ab0c1d2e3f4",
					EvalID: "e-0041", Status: "done: 3/3 passed"},
			}})
	for i := 0; i < 60; i++ {
		evs = append(evs, event.LogBatch{EvalID: "e-0042", Worker: 0, InstanceID: "mini__calc-12",
			Lines: []string{fmt.Sprintf("tests/test_ops.py::test_case_%02d PASSED", i)}})
	}
	evs = append(evs, event.LogBatch{EvalID: "e-0041", Worker: 1, InstanceID: "mini__strings-7",
		Lines: []string{"+ git apply --verbose /tmp/patch.diff", "Applied patch calc/ops.py cleanly.", "3 passed in 0.41s"}})
	return evs
}

// sftEvents is a run in its warm start: RunInfo, the sft stage, and done of
// steps warm-start steps (a held-out loss every tenth, 2 s a step).
func sftEvents(done, steps int) []event.Event {
	evs := []event.Event{
		event.RunInfo{Name: "mini-grpo", OutDir: "runs/mini-grpo", MaxSteps: 200, Phase: "syntax", Auto: true,
			Build: "openblas", Hosts: []string{"unix:///var/run/docker.sock"}, GroupSize: 4, Started: t0},
		event.StageChanged{Stage: "sft"},
	}
	for s := 1; s <= done; s++ {
		x := float64(s)
		e := event.SFTStep{Step: s, Steps: steps, Loss: 0.4 + 3/(1+x/8) + 0.1*math.Sin(x), LR: 2e-3,
			Elapsed: time.Duration(s) * 2 * time.Second}
		if s%10 == 0 {
			e.Heldout, e.HeldoutOK = 1.2+2/(1+x/20), true
		}
		evs = append(evs, e, event.StageChanged{Stage: "sft", Progress: x / float64(steps),
			Detail: fmt.Sprintf("step %d/%d loss %.3f", s, steps, e.Loss)})
	}
	return evs
}

// groupEvents is step s's eight scored completions.
func groupEvents(s int) []event.Event {
	var evs []event.Event
	for g := 0; g < 2; g++ {
		id := []string{"mini__calc-12", "mini__strings-7"}[g]
		for i := 0; i < 4; i++ {
			completion := "I will fix the division.\n```diff\n" + sampleDiff + "```\n"
			if i == 3 {
				completion = "I will fix the division by returning early." // no diff
			}
			// The patch comes out of the completion through the real
			// extractor, as in a run: the fixture cannot show a diff the
			// pipeline would not.
			ex := reward.Extract(completion)
			b := event.Verdict{InstanceID: id, Phase: "apply-only", SyntaxOK: ex.Valid(), Form: ex.Form, Patch: ex.Diff,
				NonEmpty: true, Applied: i < 2, ApplyMethod: "git apply", F2PTotal: 1, P2PTotal: 3}
			if i == 0 {
				b.F2PPassed, b.P2PPassed, b.Resolved, b.Reward = 1, 3, true, 1
			} else if i == 1 {
				b.P2PPassed, b.Reward = 2, 0.3
			}
			if i == 3 {
				b.SyntaxError = "no diff found"
			}
			c := event.CompletionScored{Step: s, Group: g, Index: i, Verdict: b,
				Advantage: b.Reward - 0.325, Tokens: 120 + 17*i, Truncated: i == 3, Version: s - 1,
				Completion: completion,
				IssueText:  "divide(a, 0) returns 0 instead of raising ZeroDivisionError.\n\nSteps to reproduce:\n\n    >>> divide(1, 0)\n    0\n\nExpected: ZeroDivisionError.",
			}
			if g == 1 && i == 2 {
				c.Verdict.Hacks = []string{"touches-tests"}
			}
			if g == 1 && i == 1 {
				c.Verdict.Infra, c.Verdict.InfraCause = true, "container failed to start"
			}
			evs = append(evs, c)
		}
	}
	return evs
}

// lines of a view, for assertions.
func screen(m *Model) string { return m.View() }

func contains(t *testing.T, view, want string) {
	t.Helper()
	if !strings.Contains(view, want) {
		t.Errorf("view lacks %q:\n%s", want, view)
	}
}

// checkFrame asserts that a view is exactly h lines of exactly w cells, drawn
// only with runes that every terminal draws as wide as the console counts
// them: the layout never spills or wraps, whatever the content.
func checkFrame(t *testing.T, view string, w, h int) {
	t.Helper()
	lines := strings.Split(view, "\n")
	if len(lines) != h {
		t.Fatalf("view has %d lines, want %d", len(lines), h)
	}
	for i, l := range lines {
		if n := ansi.StringWidth(l); n != w {
			t.Fatalf("line %d is %d cells wide, want %d: %q", i, n, w, l)
		}
		for _, r := range ansi.Strip(l) {
			if !safeRune(r) && r != utf8.RuneError {
				t.Fatalf("line %d draws %U, whose width terminals disagree on: %q", i, r, l)
			}
		}
	}
}

// gatedEvents is runEvents of a run in the docker phase behind a verifier
// gate (reward.verifier), as app.Gate marks its verdicts: every applied
// patch scored, the unresolved one spared (its apply-only verdict), and in
// every fifth step an audited one the grader resolved (a miss the
// verifier was sure of). Only applied patches carry a score.
func gatedEvents(steps int) []event.Event {
	evs := runEvents(steps)
	score := func(x float64) *float64 { return &x }
	for i, ev := range evs {
		switch e := ev.(type) {
		case event.RunInfo:
			e.Phase, e.Auto = "docker", false
			evs[i] = e
		case event.StepStarted:
			e.Phase = "docker"
			evs[i] = e
		case event.CompletionScored:
			e.Verdict.Phase = "docker"
			if e.Verdict.Applied && !e.Verdict.Infra {
				switch {
				case e.Index == 0 && e.Step%5 == 0:
					e.Verdict.VerifierScore, e.Verdict.Gate = score(0.04), event.GateAudited
				case e.Index == 0:
					e.Verdict.VerifierScore = score(0.93)
				default:
					e.Verdict.VerifierScore, e.Verdict.Gate = score(0.06), event.GateSpared
					e.Verdict.F2PPassed, e.Verdict.P2PPassed = 0, 0 // its apply-only verdict
				}
			}
			evs[i] = e
		case event.StepFinished:
			e.Phase = "docker"
			e.Metrics.VerifierSpared = 1
			if e.Step%5 == 0 {
				e.Metrics.VerifierAudits, e.Metrics.VerifierMisses = 2, 2
			}
			evs[i] = e
		}
	}
	return evs
}
