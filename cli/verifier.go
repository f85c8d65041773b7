package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/swetui/swetui/app"
	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
)

type verifierOptions struct {
	Config config.Config
	Runs   []string
	Out    string
	Steps  int
}

// newVerifierOptions reads `swetui verifier train RUN_DIR... --ckpt C`:
// the run folders and overrides in any order around the flags.
func newVerifierOptions(env Env, args []string) (verifierOptions, error) {
	fs := newFlags(env, "verifier")
	load := configFlag(fs, env)
	ckpt := fs.String("ckpt", "", "checkpoint the verifier starts from: a run's policy or its warm start (default model.init_ckpt)")
	out := fs.String("out", "verifier", "folder to write the verifier's checkpoint and verifier.json to")
	steps := fs.Int("steps", 300, "optimiser steps (sft.batch_size examples each, at sft.lr)")
	if len(args) == 0 || args[0] != "train" {
		if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
			return verifierOptions{}, err
		}
		return verifierOptions{}, UsageErrorf("verifier: want `verifier train RUN_DIR... --ckpt C`")
	}
	runs, overrides, err := parseAround(fs, args[1:])
	if err != nil {
		return verifierOptions{}, err
	}
	if len(runs) == 0 {
		return verifierOptions{}, UsageErrorf("verifier train: name at least one run folder whose docker-phase verdicts it learns from")
	}
	if *ckpt != "" {
		overrides = append(overrides, "model.init_ckpt="+*ckpt)
	}
	cfg, err := load(overrides)
	if err != nil {
		return verifierOptions{}, err
	}
	return verifierOptions{Config: cfg, Runs: runs, Out: *out, Steps: *steps}, nil
}

// verifierRun implements `swetui verifier train`: a verifier of the runs'
// docker verdicts, fine-tuned from a checkpoint, and its held-out measures.
func verifierRun(ctx context.Context, env Env, o verifierOptions) error {
	bar := newProgress(env, o.Steps)
	rep, err := app.TrainVerifier(ctx, o.Config, o.Runs, o.Out, o.Steps, func(ev event.Event) {
		if _, ok := ev.(event.SFTStep); ok {
			bar.step()
		}
	})
	bar.done()
	if err != nil {
		return err
	}
	t := rep.Threshold
	fmt.Fprintf(env.Stdout, "verifier: %d docker verdicts (%d resolved) of %d runs; trained on %d tasks' (%d examples, balanced), measured on %d held-out tasks' %d (%d resolved)\n",
		rep.Examples, rep.Resolved, len(rep.Runs), rep.TrainTasks, rep.Train, rep.HeldTasks, rep.Heldout, rep.HeldoutPositives)
	fmt.Fprintf(env.Stdout, "held out: AUC %.3f (the baseline of applied and size: %.3f), among the applied %.3f (%.3f); ECE %.3f, %.3f at the fitted temperature %.2f; at %.2f precision %.2f, recall %.2f\n",
		rep.AUC, rep.BaselineAUC, rep.AppliedAUC, rep.BaselineAppliedAUC, rep.ECE, rep.ECEFitted, rep.Temperature, t.At, t.Precision, t.Recall)
	fmt.Fprintf(env.Stdout, "checkpoint: %s (measures in %s)\n", o.Out, app.VerifierFile)
	return nil
}
