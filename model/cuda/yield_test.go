package cuda

import (
	"context"
	"testing"
	"time"
)

// work.idle: nothing under way and the last call ended quiet ago.
func TestWorkIdle(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, tt := range []struct {
		name  string
		busy  int
		since time.Duration // now - the last call's end
		idle  bool
	}{
		{"a call under way", 1, time.Second, false},
		{"two under way", 2, time.Second, false},
		{"ended 10ms ago", 0, 10 * time.Millisecond, false},
		{"ended 50ms ago", 0, 50 * time.Millisecond, true},
		{"ended long ago", 0, time.Hour, true},
	} {
		w := &work{busy: tt.busy, last: t0}
		if got := w.idle(t0.Add(tt.since), 50*time.Millisecond); got != tt.idle {
			t.Errorf("%s: idle %v, want %v", tt.name, got, tt.idle)
		}
	}
	w := &work{}
	w.enter()
	if w.idle(time.Now().Add(time.Hour), time.Millisecond) {
		t.Error("idle while a call is under way")
	}
	w.leave(t0)
	if !w.idle(t0.Add(time.Second), time.Millisecond) || w.idle(t0, time.Millisecond) {
		t.Error("leave: the last call's end not taken")
	}
}

// On the emulated GPU: a yielding handle's call waits while the run's
// handle on the same GPU works and starts once it has been idle; the
// run's calls never wait for the yielding handle's.
func TestYieldingHandleWaitsForTheRun(t *testing.T) {
	libs := emulatorLibs(t)
	run := openCUDAAt(t, []string{libs})
	bg, err := OpenCUDA(WithYield(context.Background()), 0, &Loader{ConfigDirs: []string{libs}})
	if err != nil {
		t.Fatal(err)
	}
	defer bg.Close()
	if run.yield || !bg.yield {
		t.Fatalf("yield: the run's %v, the job's %v", run.yield, bg.yield)
	}

	release, inRun := make(chan struct{}), make(chan struct{})
	go run.Do(func() error { close(inRun); <-release; return nil })
	<-inRun
	ran := make(chan time.Time, 1)
	go bg.Do(func() error { ran <- time.Now(); return nil })
	select {
	case <-ran:
		t.Fatal("the yielding handle's call ran while the run's was under way")
	case <-time.After(300 * time.Millisecond):
	}
	released := time.Now()
	close(release)
	select {
	case at := <-ran:
		if at.Sub(released) < yieldQuiet {
			t.Errorf("it ran %v after the run's call ended, before the GPU was quiet for %v", at.Sub(released), yieldQuiet)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the yielding handle's call never ran once the run was idle")
	}

	// The run never waits for the job: a run's call goes through while the
	// job's is under way.
	time.Sleep(2 * yieldQuiet)
	hold, inJob := make(chan struct{}), make(chan struct{})
	go bg.Do(func() error { close(inJob); <-hold; return nil })
	<-inJob
	done := make(chan error, 1)
	go func() { done <- run.Do(func() error { return nil }) }()
	select {
	case err := <-done:
		if err != nil {
			t.Error(err)
		}
	case <-time.After(5 * time.Second):
		t.Error("the run's call waited for the yielding handle's")
	}
	close(hold)
}
