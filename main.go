// Command swetui trains code models with GRPO on software-engineering tasks
// and lets a person watch and steer the training live from a terminal.
// The command line itself lives in package cli; this file wires the process
// to it: arguments, standard streams, the embedded config and signals.
package main

import (
	"context"
	_ "embed"
	"os"
	"os/signal"
	"syscall"

	"github.com/charmbracelet/x/term"

	"github.com/swetui/swetui/cli"
)

//go:embed config.toml
var defaultConfig []byte

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), stopSignals()...)
	env := cli.Env{
		Stdout:        os.Stdout,
		Stderr:        os.Stderr,
		Stdin:         os.Stdin,
		DefaultConfig: defaultConfig,
		IsTerminal:    term.IsTerminal(os.Stdout.Fd()),
	}
	code := cli.Main(ctx, env, os.Args[1:])
	stop()
	os.Exit(code)
}

// stopSignals stop a command as Ctrl-C does (its sandboxes removed, its
// checkpoint kept): SIGINT, SIGTERM, and SIGHUP, the terminal or tmux
// session closed, unless it was ignored from the start (nohup keeps it so).
func stopSignals() []os.Signal {
	sigs := []os.Signal{os.Interrupt, syscall.SIGTERM}
	if !signal.Ignored(syscall.SIGHUP) {
		sigs = append(sigs, syscall.SIGHUP)
	}
	return sigs
}
