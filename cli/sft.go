package cli

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/train"
)

// sftRun implements `swetui sft`: the supervised warm start on the training
// split's gold patches, with a progress line and the loss curve, writing the
// checkpoint GRPO starts from (sft.out, default <run.out_dir>/sft).
func sftRun(ctx context.Context, env Env, cfg config.Config) error {
	if err := os.MkdirAll(cfg.Run.OutDir, 0o755); err != nil {
		return fmt.Errorf("sft: %w", err)
	}
	ws, err := openWorkspace(ctx, cfg, "train")
	if err != nil {
		return fmt.Errorf("sft: %w", err)
	}
	m, err := ws.newModel()
	if err != nil {
		return fmt.Errorf("sft: %w", err)
	}
	pol, err := ws.newPolicy(m, cfg.SFT.LR, cfg.SFT.Steps)
	if err != nil {
		return fmt.Errorf("sft: %w", err)
	}
	start := time.Now()
	bar := newProgress(env, cfg.SFT.Steps)
	res, err := ws.sft(ctx, pol, ws.sftDir(), 0, train.WarmupHooks{Publish: func(ev event.Event) {
		if _, ok := ev.(event.SFTStep); ok {
			bar.step()
		}
	}})
	bar.done()
	if err != nil {
		return fmt.Errorf("sft: %w", err)
	}
	fmt.Fprintf(env.Stdout, "sft: %d steps on %d examples (%d of them synthetic fixes; %d gold patches longer than sample.max_new_tokens skipped) in %s\n",
		len(res.Losses), res.Used, res.Synthetic, res.Skipped, time.Since(start).Round(time.Second))
	fmt.Fprintf(env.Stdout, "loss: %s\n", lossCurve(res.Losses, 10))
	if len(res.Heldout) > 0 {
		fmt.Fprintf(env.Stdout, "held-out loss (gold replies of the test split, never trained on): %s\n", heldoutCurve(res.Heldout))
	}
	fmt.Fprintf(env.Stdout, "checkpoint: %s\n", ws.sftDir())
	return nil
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
