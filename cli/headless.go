package cli

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/ui"
)

// printEvents is the headless console: one line per step, phase change,
// checkpoint, warning or stop, until the run's Stopped (or the channel
// closes). Completions and container logs are left to rollouts.jsonl and the
// TUI.
func printEvents(w io.Writer, events <-chan event.Event, start time.Time) {
	for ev := range events {
		if line := eventLine(ev, time.Since(start)); line != "" {
			fmt.Fprintln(w, line)
		}
		if _, ok := ev.(event.Stopped); ok {
			return
		}
	}
}

func eventLine(ev event.Event, elapsed time.Duration) string {
	ts := fmt.Sprintf("[%s]", formatElapsed(elapsed))
	switch e := ev.(type) {
	case event.RunInfo:
		return fmt.Sprintf("%s run %q: phase %s (auto %v), G=%d, max %d steps, out %s, %s", ts, e.Name, e.Phase, e.Auto, e.GroupSize, e.MaxSteps, e.OutDir, ui.RunWhere(e))
	case event.StageChanged:
		if e.Progress > 0 && e.Progress < 1 {
			return "" // the warm start's steps say it (SFTStep)
		}
		if e.Detail == "" {
			return fmt.Sprintf("%s stage %s", ts, e.Stage)
		}
		return fmt.Sprintf("%s stage %s %s", ts, e.Stage, e.Detail)
	case event.SFTStep:
		if tenth := max(1, e.Steps/10); e.Step%tenth != 0 && e.Step != e.Steps && e.Step != e.Resumed+1 {
			return "" // every tenth of the warm start is enough for a log
		}
		line := fmt.Sprintf("%s sft step %d/%d loss %.3f", ts, e.Step, e.Steps, e.Loss)
		if e.HeldoutOK {
			line += fmt.Sprintf(" held-out %.3f", e.Heldout)
		}
		if done := e.Step - e.Resumed; done > 0 && e.Elapsed > 0 {
			rate := float64(done) / e.Elapsed.Seconds()
			line += fmt.Sprintf(" (%.2f steps/s, %s left)", rate, formatElapsed(time.Duration(float64(e.Steps-e.Step)/rate*float64(time.Second))))
		}
		return line
	case event.StepFinished:
		m := e.Metrics
		gate := ""
		if m.VerifierSpared+m.VerifierAudits > 0 {
			gate = fmt.Sprintf(" spared %d audited %d missed %d", m.VerifierSpared, m.VerifierAudits, m.VerifierMisses)
		}
		return fmt.Sprintf("%s step %d %-10s reward %.3f (max %.2f) valid %.2f applied %.2f resolved %.2f kl %.4f loss %+.4f zero-std %.2f infra %d%s  %.1fs",
			ts, e.Step, e.Phase, m.RewardMean, m.RewardMax, m.SyntaxRate, m.ApplyRate, m.ResolvedRate, m.KL, m.Loss, m.FracZeroStd, m.InfraFailures, gate,
			e.Duration.Seconds())
	case event.GPUs:
		// Totals since the start: a log reader takes the differences.
		var parts []string
		for _, g := range e.Shares {
			id, _, _ := strings.Cut(g.Device, " ")
			part := fmt.Sprintf("%s %d sampled, sample %.1fs, train %.1fs, collective %.1fs", id, g.Samples,
				g.Sample.Seconds(), g.Train.Seconds(), g.Collective.Seconds())
			if g.MemTotal > 0 {
				part += fmt.Sprintf(", %.1f/%.1f GiB", float64(g.MemUsed)/(1<<30), float64(g.MemTotal)/(1<<30))
			}
			parts = append(parts, part)
		}
		return fmt.Sprintf("%s gpus after step %d: %s", ts, e.Step, strings.Join(parts, "; "))
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

// messagePrinter is an event.Publisher that prints the messages it gets
// (a pool's hosts, retries and masked evaluations) as the headless console
// does, and drops the rest; safe for concurrent use.
type messagePrinter struct {
	mu    sync.Mutex
	w     io.Writer
	start time.Time
}

func (p *messagePrinter) Publish(ev event.Event) {
	if m, ok := ev.(event.Message); ok {
		p.mu.Lock()
		defer p.mu.Unlock()
		fmt.Fprintln(p.w, eventLine(m, time.Since(p.start)))
	}
}

func formatElapsed(d time.Duration) string {
	d = d.Round(time.Second)
	return fmt.Sprintf("%02d:%02d:%02d", int(d.Hours()), int(d.Minutes())%60, int(d.Seconds())%60)
}
