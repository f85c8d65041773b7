package train

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/swetui/swetui/event"
)

// errStopped and errStalled are the causes a run is cancelled with.
var (
	errStopped = errors.New("stopped by operator")
	errStalled = errors.New("watchdog")
)

func stopReason(ctx context.Context) string {
	switch context.Cause(ctx) {
	case errStopped:
		return "stopped"
	case errStalled:
		return "watchdog: no progress"
	}
	return "interrupted"
}

// watchdog warns at half of watchdog.stall_s without progress and stops the
// run at stall_s, so a stuck evaluation or sampler never hangs silently.
func (t *Trainer) watchdog(ctx context.Context, stall time.Duration, cancel context.CancelCauseFunc) {
	tick := time.NewTicker(min(stall/8, 5*time.Second))
	defer tick.Stop()
	warned := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if t.idle.Load() {
			warned = false
			continue
		}
		quiet := time.Since(time.Unix(0, t.progress.Load()))
		switch {
		case quiet >= stall:
			t.warn(event.Error, fmt.Sprintf("watchdog: no progress for %s (watchdog.stall_s); stopping", quiet.Round(time.Second)))
			cancel(errStalled)
			return
		case quiet >= stall/2 && !warned:
			warned = true
			t.warn(event.Warn, fmt.Sprintf("watchdog: no progress for %s; the run stops at %s", quiet.Round(time.Second), stall))
		case quiet < stall/2:
			warned = false
		}
	}
}

// checkBarren warns after an epoch in which no group was trainable and
// stops after watchdog.barren_epochs of them: the policy cannot change, so
// the run would only burn time.
func (t *Trainer) checkBarren() error {
	if t.lastTrainable > 0 {
		t.barren = 0
		return nil
	}
	t.barren++
	perEpoch := max(1, (len(t.d.Tasks)+t.cfg.GRPO.PromptsPerStep-1)/t.cfg.GRPO.PromptsPerStep)
	switch t.barren {
	case perEpoch:
		t.warn(event.Warn, fmt.Sprintf("a whole epoch (%d steps) had nothing trainable: every group's rewards were equal in phase %s; consider an easier phase or a warmer start", perEpoch, t.st.Curriculum.Phase))
	case t.cfg.Watchdog.BarrenEpochs * perEpoch:
		return fmt.Errorf("train: %d epochs in a row had nothing trainable (all rewards equal within every group in phase %s): stopping (watchdog.barren_epochs)", t.cfg.Watchdog.BarrenEpochs, t.st.Curriculum.Phase)
	}
	return nil
}
