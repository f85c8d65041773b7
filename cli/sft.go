package cli

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/swetui/swetui/app"
	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/model"
	"github.com/swetui/swetui/task"
	"github.com/swetui/swetui/train"
	"github.com/swetui/swetui/warmstart"
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
	cfg.SFT.Shipped = false  // this command trains one
	commit := gitCommit(ctx) // the code this run is built from, not what the tree holds when it ends
	if err := os.MkdirAll(cfg.Run.OutDir, 0o755); err != nil {
		return fmt.Errorf("sft: %w", err)
	}
	ws, err := app.Open(ctx, cfg, "train")
	if err != nil {
		return fmt.Errorf("sft: %w", err)
	}
	m, err := ws.NewModel()
	if err != nil {
		return fmt.Errorf("sft: %w", err)
	}
	pol, err := ws.NewPolicy(m, cfg.SFT.LR, cfg.SFT.Steps)
	if err != nil {
		return fmt.Errorf("sft: %w", err)
	}
	if err := ws.WithLoRA(pol); err != nil {
		return fmt.Errorf("sft: %w", err)
	}
	on, err := ws.OpenPolicy(ctx, pol, nil)
	if err != nil {
		return fmt.Errorf("sft: %w", err)
	}
	defer on.Close()
	fmt.Fprintf(env.Stderr, "sft: the warm start trains on %s\n", on.Device)
	if n := app.ContextNote(m); n != "" {
		fmt.Fprintf(env.Stderr, "sft: %s\n", n)
	}
	if on.Dev != nil {
		fmt.Fprintf(env.Stderr, "memory plan:\n%s", ws.Plan)
	}
	// An earlier `swetui sft` of the same schedule from the same model that
	// was stopped continues where it was saved.
	partial := ws.PartialSFTDir()
	state := app.PartialState{Steps: cfg.SFT.Steps, Init: cfg.Model.InitCkpt}
	if st, ok, err := app.ReadPartialSFT(partial); err != nil {
		return fmt.Errorf("sft: %w", err)
	} else if ok && st.Steps == state.Steps && st.Init == state.Init && st.Step < st.Steps {
		if err := on.Store.Load(ctx, partial); err != nil {
			return fmt.Errorf("sft: %w (remove %s to start the warm start afresh)", err, partial)
		}
		state.Step = st.Step
		fmt.Fprintf(env.Stderr, "sft: continuing from step %d of %d (%s)\n", st.Step, st.Steps, partial)
	}
	saved := state.Step
	savePartial := func(ctx context.Context) error {
		if state.Step == saved {
			return nil
		}
		if err := app.SavePartialSFT(ctx, on.Store, partial, state); err != nil {
			return err
		}
		saved = state.Step
		return nil
	}
	start := time.Now()
	bar := newProgress(env, cfg.SFT.Steps)
	var lastLine time.Time
	res, err := ws.SFT(ctx, on, ws.SFTDir(), state.Step, train.WarmupHooks{AfterStep: func(ctx context.Context, ev event.SFTStep) error {
		state.Step = ev.Step
		if every := cfg.SFT.SaveEvery; every > 0 && ev.Step%every == 0 && ev.Step < ev.Steps {
			if err := savePartial(ctx); err != nil { // a full disk costs the save, not the warm start
				fmt.Fprintf(env.Stderr, "sft: %v\n", err)
			}
		}
		return nil
	}, Publish: func(ev event.Event) {
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
	}})
	bar.done()
	if err != nil {
		// Stopped (Ctrl-C, a signal) or failed: keep the steps it made.
		if state.Step > saved && state.Step < cfg.SFT.Steps {
			if serr := savePartial(context.WithoutCancel(ctx)); serr != nil {
				return fmt.Errorf("sft: %w (and %v)", err, serr)
			}
			return fmt.Errorf("sft: %w (step %d of %d saved in %s: the same command continues it)", err, state.Step, cfg.SFT.Steps, partial)
		}
		return fmt.Errorf("sft: %w", err)
	}
	if err := os.RemoveAll(partial); err != nil {
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
		if err := exportWarmStart(ctx, ws, res, commit, o.Export); err != nil {
			return fmt.Errorf("sft: %w", err)
		}
		fmt.Fprintf(env.Stdout, "shipped warm start: %s\n", o.Export)
	}
	return nil
}

// exportWarmStart writes the finished warm start as the shipped one, with
// what it was made from.
func exportWarmStart(ctx context.Context, ws *app.Workspace, res train.SFTResult, commit, dst string) error {
	if ws.Cfg.Data.Source != task.MiniSource {
		return fmt.Errorf("--export: the shipped warm start is for the embedded suite (data.source = %q), not %q", task.MiniSource, ws.Cfg.Data.Source)
	}
	texts, err := ws.TokenizerTexts(ctx)
	if err != nil {
		return err
	}
	if ws.Cfg.Rollout.Mode == config.RolloutAgent {
		// Agent mode's goes on from the single-shot one: a run takes it
		// only while that one is what it went on from.
		if _, ok, err := warmstart.SingleWeightsSum(ws.Cfg.Model.InitCkpt); err != nil || !ok {
			return fmt.Errorf("--export in agent mode: model.init_ckpt must be the shipped single-shot warm start (warmstart/shipped), not %q (%v)",
				ws.Cfg.Model.InitCkpt, err)
		}
		if texts, err = ws.AgentWarmStartTexts(ctx, texts); err != nil {
			return err
		}
	}
	p := warmstart.Provenance{Recipe: warmstart.RecipeOf(ws.Cfg), SFTSteps: ws.Cfg.SFT.Steps, InputsHash: warmstart.InputsHash(texts),
		Commit: commit, Build: model.BLASName()}
	for _, in := range ws.Tasks {
		p.TrainInstances = append(p.TrainInstances, in.InstanceID)
	}
	if n := len(res.Losses); n > 0 {
		p.FinalLoss = res.Losses[n-1]
	}
	if n := len(res.Heldout); n > 0 {
		p.HeldoutLoss = res.Heldout[n-1].NLL
	}
	return warmstart.Export(ws.SFTDir(), dst, p)
}

// gitCommit is the checkout's commit, marked dirty when it has changes; ""
// outside a git checkout.
func gitCommit(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, "git", "describe", "--always", "--dirty", "--abbrev=12").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
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
