package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/swetui/swetui/event"
)

// printEvents is the headless console: one line per step, phase change,
// checkpoint, warning or stop, until the event channel closes. Completions and
// container logs are left to rollouts.jsonl and the TUI.
func printEvents(w io.Writer, events <-chan event.Event, start time.Time) {
	for ev := range events {
		if line := eventLine(ev, time.Since(start)); line != "" {
			fmt.Fprintln(w, line)
		}
	}
}

func eventLine(ev event.Event, elapsed time.Duration) string {
	ts := fmt.Sprintf("[%s]", formatElapsed(elapsed))
	switch e := ev.(type) {
	case event.RunInfo:
		return fmt.Sprintf("%s run %q: phase %s (auto %v), G=%d, max %d steps, out %s, blas %s", ts, e.Name, e.Phase, e.Auto, e.GroupSize, e.MaxSteps, e.OutDir, e.BLAS)
	case event.StageChanged:
		if e.Stage == "sft" && e.Progress < 1 && int(e.Progress*100)%10 != 0 {
			return "" // every tenth of the warm start is enough for a log
		}
		if e.Detail == "" {
			return fmt.Sprintf("%s stage %s", ts, e.Stage)
		}
		return fmt.Sprintf("%s stage %s %3.0f%% %s", ts, e.Stage, 100*e.Progress, e.Detail)
	case event.StepFinished:
		m := e.Metrics
		return fmt.Sprintf("%s step %d %-10s reward %.3f (max %.2f) valid %.2f applied %.2f resolved %.2f kl %.4f loss %+.4f zero-std %.2f infra %d  %.1fs",
			ts, e.Step, e.Phase, m.RewardMean, m.RewardMax, m.SyntaxRate, m.ApplyRate, m.ResolvedRate, m.KL, m.Loss, m.FracZeroStd, m.InfraFailures, e.Duration.Seconds())
	case event.PhaseChanged:
		how := "operator"
		if e.Auto {
			how = "auto"
		}
		return fmt.Sprintf("%s phase %s -> %s at step %d (%s: %s)", ts, e.From, e.To, e.Step, how, e.Reason)
	case event.AutoChanged:
		return fmt.Sprintf("%s auto-curriculum %v", ts, e.Auto)
	case event.Paused:
		return fmt.Sprintf("%s paused after step %d", ts, e.Step)
	case event.Resumed:
		return fmt.Sprintf("%s resumed at step %d", ts, e.Step)
	case event.CheckpointSaved:
		return fmt.Sprintf("%s checkpoint step %d -> %s", ts, e.Step, e.Path)
	case event.Message:
		return fmt.Sprintf("%s %s: %s", ts, e.Level, e.Text)
	case event.Stopped:
		if e.Err != nil {
			return fmt.Sprintf("%s stopped at step %d: %s: %v", ts, e.Step, e.Reason, e.Err)
		}
		return fmt.Sprintf("%s stopped at step %d: %s", ts, e.Step, e.Reason)
	}
	return ""
}

func formatElapsed(d time.Duration) string {
	d = d.Round(time.Second)
	return fmt.Sprintf("%02d:%02d:%02d", int(d.Hours()), int(d.Minutes())%60, int(d.Seconds())%60)
}
