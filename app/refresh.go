package app

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/history"
	"github.com/swetui/swetui/model"
	"github.com/swetui/swetui/model/cuda"
)

// VerifierSteps are the optimiser steps a verifier trains (swetui
// verifier train's default, and each refresh).
const VerifierSteps = 300

// refresher retrains the gate's verifier every `every` steps
// (reward.verifier_refresh_steps): it hears each step's end on the run's
// event stream (stepTap) and starts a retraining in the background unless
// one is running (trainRefresh: on the CPU, or on the run's GPU between
// the run's work); once trained, the new verifier takes the gate's place.
// A step never waits for it.
type refresher struct {
	every int
	gate  *Gate
	// train makes the verifier of step (TrainVerifier and OpenVerifier,
	// or a test's).
	train func(ctx context.Context, step int) (PatchVerifier, string, error)
	say   func(event.Level, string)
	ctx   context.Context
	busy  atomic.Bool
	wg    sync.WaitGroup
	last  PatchVerifier // the newest refresh's, closed when the next replaces it
}

// stepEnded starts a refresh at every `every`-th step.
func (r *refresher) stepEnded(step int) {
	if r.every <= 0 || step%r.every != 0 || !r.busy.CompareAndSwap(false, true) {
		return
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer r.busy.Store(false)
		begin := time.Now()
		v, what, err := r.train(r.ctx, step)
		if err != nil {
			if r.ctx.Err() == nil {
				r.say(event.Warn, fmt.Sprintf("verifier refresh at step %d: %v (the gate keeps the verifier it has)", step, err))
			}
			return
		}
		r.gate.Swap(v)
		r.closeLast()
		r.last = v
		r.say(event.Info, fmt.Sprintf("verifier refreshed from the run's verdicts at step %d in %s: %s", step, time.Since(begin).Round(time.Second), what))
	}()
}

// close waits for a refresh under way (its context ends with the run)
// and frees the newest refresh's verifier.
func (r *refresher) close() {
	r.wg.Wait()
	r.closeLast()
}

func (r *refresher) closeLast() {
	if c, ok := r.last.(interface{ Close() }); ok {
		c.Close()
	}
	r.last = nil
}

// stepTap hears each step's end on the way to the run's events.
type stepTap struct {
	event.Publisher
	stepEnded func(int)
}

func (t stepTap) Publish(ev event.Event) {
	if sf, ok := ev.(event.StepFinished); ok {
		t.stepEnded(sf.Step)
	}
	t.Publisher.Publish(ev)
}

// trainRefresh is a refresher's train for a run: the verifier of the
// run's verdicts so far, from reward.verifier's checkpoint, in steps
// optimiser steps, into the run's verifier/step-N, opened for the gate. A
// run on the CPU retrains on the CPU beside it; a run on GPUs retrains on
// its first GPU (verifierDevice), yielding it (cuda.WithYield): each of the
// refresh's device calls waits until the run's have left the GPU idle, so
// it trains while a step waits on containers and between steps, and a
// step's call never waits on it. The refreshed verifier is opened on that
// GPU as the run's own work: the gate's scoring is on a step's path.
func trainRefresh(cfg config.Config, steps int) func(ctx context.Context, step int) (PatchVerifier, string, error) {
	return func(ctx context.Context, step int) (PatchVerifier, string, error) {
		c := cfg
		c.Model.Device, c.Model.InitCkpt = verifierDevice(cfg.Model.Device), cfg.Reward.Verifier
		trainCtx := ctx
		if c.Model.Device != "cpu" {
			trainCtx = cuda.WithYield(ctx)
		}
		out := history.RunDir(cfg.Run.OutDir).Verifier(step)
		rep, err := TrainVerifier(trainCtx, c, []string{cfg.Run.OutDir}, out, steps, nil)
		if err != nil {
			return nil, "", err
		}
		// A few verdicts train a verifier no better than a coin (measured: 138
		// verdicts, held-out AUC 0.31): such a one never takes the gate.
		if !(rep.AUC > 0.5) {
			return nil, "", fmt.Errorf("its held-out AUC is %.3f on %d verdicts (%s), no better than chance", rep.AUC, rep.Examples, out)
		}
		v, err := OpenVerifier(ctx, c, out)
		if err != nil {
			return nil, "", err
		}
		return v, fmt.Sprintf("%d verdicts on %s, held-out AUC %.3f (%s)", rep.Examples, rep.Device, rep.AUC, out), nil
	}
}

// verifierDevice is where a run's verifier scores and retrains: the CPU
// for a CPU run, else the run's first GPU (one: the verifier is small
// work beside the run and needs no all-reduce).
func verifierDevice(device string) string {
	kind, ords, all, err := cuda.ParseDevices(device)
	switch {
	case err != nil || kind != "cuda":
		return "cpu"
	case all || len(ords) == 0:
		return "cuda:0"
	}
	return fmt.Sprintf("cuda:%d", ords[0])
}

// refreshBeside is what a run's verifier refresh (reward.verifier and
// reward.verifier_refresh_steps) will hold on the run's first GPU beside
// the run, for the run's memory plan: the verifier's model trained as
// TrainVerifier trains it (the run's LoRA shape and micro-batches); nil
// without a refresh, or when reward.verifier is not a model folder (the
// gate's opening says so first).
func refreshBeside(c config.Config, act cuda.DType, lora *model.LoRAConfig) *cuda.Workload {
	if c.Reward.Verifier == "" || c.Reward.VerifierRefreshSteps <= 0 {
		return nil
	}
	mc, _, err := planShape(c, c.Reward.Verifier)
	if err != nil {
		return nil
	}
	mc.Context = c.Model.Context
	return &cuda.Workload{Cfg: mc, Act: act, LoRA: lora, MicroTokens: c.Model.MicroTokens, Recompute: c.Model.Recompute == "on"}
}

// refreshBesideWhat names refreshBeside's line of a plan.
const refreshBesideWhat = "the verifier's refresh (reward.verifier_refresh_steps)"
