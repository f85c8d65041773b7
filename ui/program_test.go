package ui

import (
	"bytes"
	"context"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/exp/teatest"
	"github.com/muesli/termenv"
	"github.com/swetui/swetui/event"
)

// ackCtrl is a fake trainer's control side: it records each call and
// acknowledges it with the event the real trainer sends, asynchronously.
type ackCtrl struct {
	fakeCtrl
	ch chan event.Event
}

func (a *ackCtrl) send(ev event.Event) { go func() { a.ch <- ev }() }

func (a *ackCtrl) Pause()  { a.rec("Pause", ""); a.send(event.Paused{Step: 1}) }
func (a *ackCtrl) Resume() { a.rec("Resume", ""); a.send(event.Resumed{Step: 1}) }
func (a *ackCtrl) SetPhase(p string) {
	a.rec("SetPhase", p)
	a.send(event.PhaseChanged{Step: 1, From: "syntax", To: p})
}
func (a *ackCtrl) SaveNow() {
	a.rec("SaveNow", "")
	a.send(event.CheckpointSaved{Step: 1, Path: "runs/t/ckpt-000001"})
}
func (a *ackCtrl) Stop() {
	a.rec("Stop", "")
	a.send(event.Stopped{Step: 1, Reason: "stopped by the operator"})
}

func waitFor(t *testing.T, tm *teatest.TestModel, text string) {
	t.Helper()
	teatest.WaitFor(t, tm.Output(), func(b []byte) bool { return bytes.Contains(b, []byte(text)) },
		teatest.WithDuration(5*time.Second), teatest.WithCheckInterval(10*time.Millisecond))
}

// TestProgram drives the console as a real tea.Program with the real pump,
// as tmux would: keys in, the trainer's acknowledgements on the channel, the
// state words on screen, and a clean quit once Stopped arrives.
func TestProgram(t *testing.T) {
	ch := make(chan event.Event, 64)
	ctrl := &ackCtrl{ch: ch}
	m := New(ctrl, ch, Options{UI: uiOpts(20, 1000, 1000)})
	tm := teatest.NewTestModel(t, m, teatest.WithInitialTermSize(80, 24))
	for _, ev := range runEvents(5) {
		ch <- ev
	}
	ch <- event.StepFinished{Step: 6, Version: 6}
	waitFor(t, tm, "RUNNING")

	tm.Type("p")
	waitFor(t, tm, "PAUSED")
	tm.Type("3")
	waitFor(t, tm, "DOCKER")
	tm.Type("s")
	waitFor(t, tm, "ckpt-000001")
	tm.Type(" ")
	waitFor(t, tm, "RUNNING")
	tm.Type("q")
	tm.WaitFinished(t, teatest.WithFinalTimeout(5*time.Second))

	final := tm.FinalModel(t).(*Model)
	if !final.st.stopped || final.st.stop.Reason != "stopped by the operator" {
		t.Fatalf("final state %s, %+v", final.st.runState(), final.st.stop)
	}
	want := []call{{"Pause", ""}, {"SetPhase", "docker"}, {"SaveNow", ""}, {"Resume", ""}, {"Stop", ""}}
	if got := ctrl.Calls(); !reflect.DeepEqual(got, want) {
		t.Fatalf("calls %v, want %v", got, want)
	}
}

// TestRunQuit: Run returns nil when the operator quits; Stop was called
// once, whether the key came before the run started or after.
func TestRunQuit(t *testing.T) {
	ch := make(chan event.Event, 64)
	ch <- event.RunInfo{Name: "t", MaxSteps: 10}
	ctrl := &ackCtrl{ch: ch}
	errc := make(chan error, 1)
	go func() {
		errc <- Run(context.Background(), ctrl, ch, Options{Input: strings.NewReader("q"), Output: io.Discard})
	}()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after q")
	}
	if got := ctrl.Calls(); !reflect.DeepEqual(got, []call{{"Stop", ""}}) {
		t.Fatalf("calls %v", got)
	}
}

// TestRunCancelled: cancelling ctx ends Run with ctx's error, and a run
// that was going is told to stop; NO_COLOR drops colour.
func TestRunCancelled(t *testing.T) {
	defer lipgloss.SetColorProfile(termenv.Ascii)
	lipgloss.SetColorProfile(termenv.ANSI256)
	t.Setenv("NO_COLOR", "1")

	ch := make(chan event.Event, 1)
	ch <- event.RunInfo{Name: "t", MaxSteps: 10}
	ctrl := &fakeCtrl{}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(500*time.Millisecond, cancel)
	in, _ := io.Pipe() // a terminal that types nothing
	err := Run(ctx, ctrl, ch, Options{Input: in, Output: io.Discard})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v, want context.Canceled", err)
	}
	if got := ctrl.Calls(); !reflect.DeepEqual(got, []call{{"Stop", ""}}) {
		t.Fatalf("calls %v, want one Stop", got)
	}
	if lipgloss.ColorProfile() != termenv.Ascii {
		t.Fatal("NO_COLOR did not select the ASCII profile")
	}
}
