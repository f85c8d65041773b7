package train

import (
	"context"
	"fmt"
	"time"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/task"
)

// The operator's controls. Each method returns at once: it queues a function
// that the loop runs between steps (applyControls), and the loop
// acknowledges it with an event.

func (t *Trainer) send(f func()) {
	select {
	case t.ctrl <- f:
	default: // a flood of key presses: drop rather than block the console
	}
}

// Pause holds the loop after the step in flight.
func (t *Trainer) Pause() {
	t.send(func() { t.paused = true; t.publish(event.Paused{Step: t.st.Step}) })
}

// Resume continues a paused loop.
func (t *Trainer) Resume() {
	t.send(func() { t.paused = false; t.publish(event.Resumed{Step: t.st.Step}) })
}

// SetPhase switches the curriculum phase from the next step on.
func (t *Trainer) SetPhase(phase string) {
	t.send(func() {
		from := t.st.Curriculum.Phase
		if phase == from {
			return
		}
		if phase == config.PhaseDocker && !t.d.DockerOK {
			t.warn(event.Warn, "docker phase unavailable: the Docker daemon is not reachable (start it, then restart swetui)")
			return
		}
		if err := t.st.Curriculum.Set(phase, t.st.Step); err != nil {
			t.warn(event.Warn, err.Error())
			return
		}
		t.publish(event.PhaseChanged{Step: t.st.Step, From: from, To: phase, Reason: "set by operator"})
		if t.inWarmup {
			t.warn(event.Info, fmt.Sprintf("phase %s takes effect when GRPO starts, after the warm start", phase))
		}
	})
}

// SetAuto turns the auto-curriculum on or off.
func (t *Trainer) SetAuto(on bool) {
	t.send(func() {
		t.st.Curriculum.Auto = on
		t.publish(event.AutoChanged{Auto: on})
		if t.inWarmup {
			t.warn(event.Info, fmt.Sprintf("auto-curriculum %s takes effect when GRPO starts, after the warm start", onOff(on)))
		}
	})
}

// SaveNow writes a checkpoint after the step in flight (during the warm
// start, the warm start's own).
func (t *Trainer) SaveNow() {
	t.send(func() {
		if err := t.saveNow(context.Background()); err != nil {
			t.warn(event.Error, err.Error())
		}
	})
}

// Stop ends the run within a bounded time: the step in flight is abandoned
// (its containers are killed through the cancelled context) and the last
// completed step is checkpointed.
func (t *Trainer) Stop() {
	t.send(func() { t.stop = true })
	if c := t.loadCancel(); c != nil {
		c(errStopped)
	}
}

// Replay re-scores one completion of a task in the current phase; the
// verdict arrives as a CompletionScored with Step -1.
func (t *Trainer) Replay(instanceID, completion string) {
	t.send(func() {
		for _, inst := range t.d.Tasks {
			if inst.InstanceID == instanceID {
				go t.replay(inst, completion, t.st.Curriculum.Phase)
				return
			}
		}
		t.warn(event.Warn, "replay: unknown instance "+instanceID)
	})
}

func (t *Trainer) replay(inst *task.Instance, completion, phase string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(t.cfg.Sandbox.TimeoutS+30)*time.Second)
	defer cancel()
	vs, err := t.d.Scorer.Score(ctx, inst, []string{completion}, phase)
	if err != nil || len(vs) != 1 {
		t.warn(event.Error, fmt.Sprintf("replay %s: %v", inst.InstanceID, err))
		return
	}
	t.publish(event.CompletionScored{Step: -1, Completion: completion, Verdict: vs[0], IssueText: inst.ProblemStatement})
}

// applyControls runs pending control functions; while paused it waits for
// one without spinning.
func (t *Trainer) applyControls(ctx context.Context) {
	for {
		select {
		case f := <-t.ctrl:
			f()
			continue
		default:
		}
		if !t.paused || t.stop {
			t.idle.Store(false)
			t.progress.Store(time.Now().UnixNano())
			return
		}
		t.idle.Store(true)
		select {
		case f := <-t.ctrl:
			f()
		case <-ctx.Done():
			return
		}
	}
}

func (t *Trainer) storeCancel(c context.CancelCauseFunc) {
	t.cancelMu.Lock()
	t.cancelRun = c
	t.cancelMu.Unlock()
}

func (t *Trainer) loadCancel() context.CancelCauseFunc {
	t.cancelMu.Lock()
	defer t.cancelMu.Unlock()
	return t.cancelRun
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}
