package train

import (
	"context"
	"fmt"
	"time"

	"github.com/swetui/swetui/event"
)

// Warmup is the supervised warm start a fresh run begins with (the "sft"
// stage). The trainer runs it as a stage of its own: the watchdog counts its
// steps, the operator's pause holds it between steps, a save request saves
// it, and its metrics go to metrics.jsonl and TensorBoard under sft/*.
type Warmup interface {
	// Run trains (or loads) the warm start, calling h.AfterStep after every
	// step. A warm start cut short must be resumable by the next Run.
	Run(ctx context.Context, h WarmupHooks) error
	// Save writes the warm start's resumable state now (a save request, a
	// stop).
	Save(ctx context.Context) error
	// Done is how many steps an earlier, interrupted warm start finished
	// (all of them when one completed); 0 when there is none.
	Done() int
}

// WarmupHooks connect a warm start to the run around it.
type WarmupHooks struct {
	Publish func(event.Event)
	// AfterStep records a finished step and applies the operator's controls
	// (a pause waits here); its error (the run was stopped) ends the warm
	// start.
	AfterStep func(ctx context.Context, ev event.SFTStep) error
}

// warmup runs the warm-start stage. On a stop it saves what it has, so the
// next run continues it.
func (t *Trainer) warmup(ctx context.Context) error {
	t.publish(event.StageChanged{Stage: "sft"})
	t.inWarmup = true
	defer func() { t.inWarmup = false }()
	err := t.d.Warmup.Run(ctx, WarmupHooks{Publish: t.publish, AfterStep: t.afterSFTStep})
	if err != nil && ctx.Err() != nil {
		// Stopped or stalled mid-way: keep the steps done.
		saveCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if serr := t.d.Warmup.Save(saveCtx); serr != nil {
			t.warn(event.Error, fmt.Sprintf("save the warm start: %v", serr))
		}
		return err
	}
	return err
}

// afterSFTStep is the warm start's step boundary: the step's metrics are
// written, the watchdog sees progress, controls apply.
func (t *Trainer) afterSFTStep(ctx context.Context, ev event.SFTStep) error {
	t.progress.Store(time.Now().UnixNano())
	if err := t.sinks.SFTMetrics(ev); err != nil {
		return err
	}
	t.applyControls(ctx)
	if t.stop {
		return fmt.Errorf("warm start: %w", context.Cause(ctx))
	}
	return ctx.Err()
}

// saveNow is what a save request does in the current stage.
func (t *Trainer) saveNow(ctx context.Context) error {
	if t.inWarmup {
		if err := t.d.Warmup.Save(ctx); err != nil {
			return err
		}
		t.warn(event.Info, "warm start saved; GRPO checkpoints start with the first GRPO step")
		return nil
	}
	return t.save(ctx)
}
