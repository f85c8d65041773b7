package cli

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/swetui/swetui/app"
	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/train"
)

// sftOptions are `swetui sft`'s inputs.
type sftOptions struct {
	Config config.Config
	// Export, when set, also writes the checkpoint and its provenance there
	// as the shipped warm start (make warmstart).
	Export string
}

func newSFTOptions(env Env, args []string) (sftOptions, error) {
	fs := newFlags(env, "sft")
	load := configFlag(fs, env)
	export := fs.String("export", "", "also write the checkpoint with its provenance to this folder, as the shipped warm start (make warmstart)")
	cfg, _, err := parseAndLoad(fs, load, args)
	return sftOptions{Config: cfg, Export: *export}, err
}

// sftRun implements `swetui sft`: the supervised warm start on the training
// split's gold patches, with a progress line and the loss curve, writing the
// checkpoint GRPO starts from (sft.out, default <run.out_dir>/sft).
func sftRun(ctx context.Context, env Env, o sftOptions) error {
	cfg := o.Config
	cfg.SFT.Shipped = false      // this command trains one
	commit := app.GitCommit(ctx) // the code this run is built from, not what the tree holds when it ends
	if err := os.MkdirAll(cfg.Run.OutDir, 0o755); err != nil {
		return fmt.Errorf("sft: %w", err)
	}
	ws, m, on, err := app.OpenSFT(ctx, cfg)
	if err != nil {
		return fmt.Errorf("sft: %w", err)
	}
	defer on.Close()
	fmt.Fprintf(env.Stderr, "sft: the warm start trains on %s\n", on.Device)
	if n := app.ContextNote(m); n != "" {
		fmt.Fprintf(env.Stderr, "sft: %s\n", n)
	}
	if on.Plan != "" {
		fmt.Fprintf(env.Stderr, "memory plan:\n%s", on.Plan)
	}
	start := time.Now()
	bar := newProgress(env, cfg.SFT.Steps)
	var lastLine time.Time
	res, err := ws.SFTCommand(ctx, on, func(ev event.Event) {
		switch ev := ev.(type) {
		case event.SFTStep:
			bar.step()
			// Off a terminal (a log file, nohup) a line every half minute,
			// and each held-out measurement, instead of the bar.
			if !env.IsTerminal && (time.Since(lastLine) >= 30*time.Second || ev.HeldoutOK || ev.Step == ev.Steps) {
				lastLine = time.Now()
				fmt.Fprintln(env.Stderr, sftProgressLine(ev))
			}
		case event.Message:
			fmt.Fprintln(env.Stderr, ev.Text)
		}
	}, func(text string) { fmt.Fprintf(env.Stderr, "sft: %s\n", text) })
	bar.done()
	if err != nil {
		return fmt.Errorf("sft: %w", err)
	}
	fmt.Fprintf(env.Stdout, "sft: %d steps on %d examples (%d of them synthetic fixes; %d gold patches longer than sample.max_new_tokens skipped) in %s\n",
		len(res.Losses), res.Used, res.Synthetic, res.Skipped.TooLong, time.Since(start).Round(time.Second))
	fmt.Fprintf(env.Stdout, "loss: %s\n", lossCurve(res.Losses, 10))
	if len(res.Heldout) > 0 {
		fmt.Fprintf(env.Stdout, "held-out loss (gold replies of the test split, never trained on): %s\n", heldoutCurve(res.Heldout))
	}
	fmt.Fprintf(env.Stdout, "checkpoint: %s\n", ws.SFTDir())
	if o.Export != "" {
		if err := ws.ExportWarmStart(ctx, res, commit, o.Export); err != nil {
			return fmt.Errorf("sft: %w", err)
		}
		fmt.Fprintf(env.Stdout, "shipped warm start: %s\n", o.Export)
	}
	return nil
}

// sftProgressLine is one warm-start step as a log line: the step, its
// loss, the held-out loss when measured, the pace and what is left.
func sftProgressLine(ev event.SFTStep) string {
	line := fmt.Sprintf("sft: step %d/%d · loss %.3f", ev.Step, ev.Steps, ev.Loss)
	if ev.HeldoutOK {
		line += fmt.Sprintf(" · held-out %.3f", ev.Heldout)
	}
	if done := ev.Step - ev.Resumed; done > 0 && ev.Elapsed > 0 {
		per := ev.Elapsed / time.Duration(done)
		line += fmt.Sprintf(" · %.1f s a step", per.Seconds())
		if left := ev.Steps - ev.Step; left > 0 {
			line += fmt.Sprintf(" · about %s left", (per * time.Duration(left)).Round(time.Second))
		}
	}
	return line
}

// lossCurve prints the loss at n evenly spaced steps.
func lossCurve(losses []float64, n int) string {
	out := ""
	for i := 0; i < n && len(losses) > 0; i++ {
		j := i * (len(losses) - 1) / max(1, n-1)
		out += fmt.Sprintf("%d:%.3f ", j+1, losses[j])
	}
	return out
}

// heldoutCurve prints every held-out measurement.
func heldoutCurve(points []train.LossPoint) string {
	out := ""
	for _, p := range points {
		out += fmt.Sprintf("%d:%.3f ", p.Step, p.NLL)
	}
	return out
}
