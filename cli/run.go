package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/swetui/swetui/app"
	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/history"
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
	ws, err := app.Open(ctx, cfg, "train")
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
	recorded := make(chan history.RunSummary, 1)
	go func() {
		start := time.Now()
		sum, err := history.RecordEvents(history.RunDir(cfg.Run.OutDir), recordSub.Events(),
			func(ev event.Event) string { return eventLine(ev, time.Since(start)) })
		if err != nil {
			fmt.Fprintf(env.Stderr, "swetui run: %v\n", err)
		}
		recorded <- sum
	}()
	r, err := app.OpenRun(ctx, ws, bus)
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	defer r.Close()
	tr := r.Trainer
	done := r.Start(ctx)

	if env.IsTerminal && !o.Headless {
		tok := ws.Tok // names the tokens of the history's completions (v)
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
