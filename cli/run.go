package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/model"
	"github.com/swetui/swetui/policy"
	"github.com/swetui/swetui/train"
	"github.com/swetui/swetui/ui"
)

// runOptions are `swetui run`'s inputs.
type runOptions struct {
	Config   config.Config
	Headless bool     // the line printer even on a terminal
	Args     []string // as given: the exit summary's resume command repeats them
}

func newRunOptions(env Env, args []string) (runOptions, error) {
	fs := newFlags(env, "run")
	load := configFlag(fs, env)
	headless := fs.Bool("headless", false, "run without the console: one line per step on stdout")
	cfg, _, err := parseAndLoad(fs, load, args)
	return runOptions{Config: cfg, Headless: *headless, Args: args}, err
}

// runRun implements `swetui run`: the training console, or its headless
// printer when stdout is not a terminal or --headless is given.
func runRun(ctx context.Context, env Env, o runOptions) error {
	cfg := o.Config
	if cfg.Run.Name == "" {
		cfg.Run.Name = time.Now().Format("run-20060102-150405")
	}
	if err := os.MkdirAll(cfg.Run.OutDir, 0o755); err != nil {
		return fmt.Errorf("run: %w", err)
	}
	ws, err := openWorkspace(ctx, cfg, "train")
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	shippedNote, err := ws.useShippedWarmStart()
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}

	// One bus carries the run's events: the trainer's, and the pool's logs,
	// state and host health straight from the sandbox.
	bus := event.NewBus()
	defer bus.Close()
	sub := bus.Subscribe(train.EventBuffer)
	// events.jsonl and the exit summary read their own subscription.
	recordSub := bus.Subscribe(train.EventBuffer)
	recorded := make(chan runSummary, 1)
	go func() {
		sum, err := recordEvents(cfg.Run.OutDir, recordSub.Events(), time.Now())
		if err != nil {
			fmt.Fprintf(env.Stderr, "swetui run: %v\n", err)
		}
		recorded <- sum
	}()
	scorer, pool, dockerErr := ws.rewards(ctx, cfg.Run.Name, bus) // containers carry swetui.run=<run.name>
	defer scorer.Close()
	defer closePool(ctx, pool)
	if dockerErr != nil && cfg.Curriculum.Phase == config.PhaseDocker {
		return fmt.Errorf("run: curriculum.phase=docker needs Docker: %w", dockerErr)
	}

	m, err := ws.newModel()
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	pol, err := ws.newPolicy(m, cfg.Optim.LR, cfg.Run.MaxSteps)
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	if err := ws.withLoRA(pol); err != nil {
		return fmt.Errorf("run: %w", err)
	}
	deps := train.Deps{Policy: pol, Tokenizer: ws.tok, Scorer: scorer,
		Prompter: ws.prompter, Chat: ws.chat, Tasks: ws.tasks, Store: pol, Events: bus, DockerOK: dockerErr == nil,
		BLAS: model.BLASName(), Hosts: hostsOf(cfg)}
	// Without a KL term (grpo.kl_coef = 0) no reference is kept: no copy of
	// the weights, none in checkpoints.
	var ref *policy.ModelReference
	if cfg.GRPO.KLCoef > 0 {
		// With LoRA the frozen base is the reference; a layout streamed to
		// the device is read again for it there: neither copies on the host.
		refModel := pol.Base()
		if pol.LoRA() == nil && m.HasWeights() {
			refModel = m.Clone()
		}
		ref = &policy.ModelReference{Model: refModel, Temp: cfg.Sample.Temperature}
		pol.Ref, deps.Reference = ref, ref
	}
	// On a GPU the policy and reference live on the device, and the warm
	// start trains there too (sftStage.dev).
	on, err := ws.openPolicy(ctx, pol, ref)
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	defer on.Close()
	upload := func() error { return nil }
	planNote := ""
	if dp := on.Dev; dp != nil {
		deps.Policy, deps.Store = dp, dp
		if dp.Ref != nil {
			deps.Reference = dp.Ref
		}
		deps.BLAS += " · warm start and GRPO on " + on.Device
		planNote = fmt.Sprintf("memory plan on %s:\n%s", on.Device, ws.plan)
		upload = func() error {
			// The warmed-up weights, and GRPO's own fresh AdamW moments.
			if err := dp.P.Load(pol.Model, dp.P.Optim); err != nil {
				return err
			}
			if dp.Ref == nil {
				return nil
			}
			return dp.Ref.R.Engine.Upload(pol.Model)
		}
	}
	if cfg.Run.SFTFirst && cfg.Model.InitCkpt == "" {
		stage, err := newSFTStage(ws, pol, ref)
		if err != nil {
			return fmt.Errorf("run: %w", err)
		}
		stage.after = upload
		if on.Dev != nil {
			stage.dev, stage.where = on.Dev, on.Device
		}
		deps.Warmup = stage
	}
	if l := pol.LoRA(); l != nil {
		deps.BLAS += fmt.Sprintf(" · LoRA rank %d", l.Cfg.Rank)
	}
	tr := train.New(cfg, deps)

	done := make(chan error, 1)
	go func() { done <- tr.Run(ctx) }()
	if shippedNote != "" {
		bus.Publish(event.Message{Level: event.Info, Time: time.Now(), Text: shippedNote})
	}
	if n := contextNote(m); n != "" {
		bus.Publish(event.Message{Level: event.Warn, Time: time.Now(), Text: n})
	}
	if l := pol.LoRA(); l != nil {
		bus.Publish(event.Message{Level: event.Info, Time: time.Now(), Text: loraNote(l, pol.Model.NumParams())})
	}
	if planNote != "" {
		bus.Publish(event.Message{Level: event.Info, Time: time.Now(), Text: planNote})
	}
	if dockerErr != nil {
		bus.Publish(event.Message{Level: event.Warn, Time: time.Now(),
			Text: fmt.Sprintf("docker phase unavailable: %v; syntax and apply-only still run", dockerErr)})
	} else if n := pool.Reaped(); n > 0 {
		bus.Publish(event.Message{Level: event.Info, Time: time.Now(), Text: fmt.Sprintf("reaped %d containers left by earlier runs", n)})
	}

	if env.IsTerminal && !o.Headless {
		tok := ws.tok // names the tokens of the history's completions (v)
		uiErr := ui.Run(ctx, tr, sub.Events(), ui.Options{UI: cfg.UI, Drops: sub.Dropped, Input: env.Stdin, Output: env.Stdout,
			Decode: func(id int) string { return tok.Decode([]int{id}) }})
		tr.Stop()
		sub.Close() // nobody watches any more: the bus drops for no one
		err = <-done
		if uiErr != nil && !errors.Is(uiErr, context.Canceled) {
			err = errors.Join(err, fmt.Errorf("console: %w", uiErr))
		}
	} else {
		printed := make(chan struct{})
		go func() { defer close(printed); printEvents(env.Stdout, sub.Events(), time.Now()) }()
		err = <-done
		<-printed // Stopped is the last event: the printer has the whole run
	}
	bus.Close()
	printRunSummary(env.Stdout, <-recorded, cfg.Run.OutDir, resumeCommand(o.Args))
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	return nil
}

// resumeCommand is the command line that continues this run: the same one
// without a run.resume that would not (run.resume = auto picks the newest
// checkpoint, or the saved warm start).
func resumeCommand(args []string) string {
	parts := []string{"swetui", "run"}
	dropped := false
	for _, a := range args {
		if strings.HasPrefix(a, "run.resume=") { // never or an old path would not resume this run
			dropped = true
			continue
		}
		if strings.ContainsAny(a, " \t\"'$`\\[]{}*?;&|<>()") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		parts = append(parts, a)
	}
	if dropped {
		parts = append(parts, "run.resume=auto")
	}
	return strings.Join(parts, " ")
}

func hostsOf(cfg config.Config) []string {
	if len(cfg.Sandbox.Hosts) > 0 {
		return cfg.Sandbox.Hosts
	}
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		return []string{h}
	}
	return []string{"unix:///var/run/docker.sock"}
}
