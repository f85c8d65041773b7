// Package cli owns swetui's command line: subcommands, their flags,
// key.path=value overrides, exit codes and the wiring of the other packages.
// main.go only hands it the process's arguments, streams and signals, so every
// command is testable in-process.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/swetui/swetui/app"
	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/model"
	// k8s:// hosts in sandbox.hosts: evaluations as Pods.
	_ "github.com/swetui/swetui/sandbox/kube"
)

// Exit codes, a stable contract (docs/ARCHITECTURE.md §3).
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
)

// Version is set at build time with -ldflags "-X github.com/swetui/swetui/cli.Version=...".
var Version = "dev"

// Env is what a command may touch of the outside world.
type Env struct {
	Stdout, Stderr io.Writer
	Stdin          io.Reader
	// DefaultConfig is the embedded config.toml, used when no --config is
	// given and ./config.toml does not exist.
	DefaultConfig []byte
	// IsTerminal reports whether stdout is a terminal (chooses TUI or headless).
	IsTerminal bool
}

// command is one subcommand. Each is an options struct, a function that
// reads it from the command line (newXOptions) and one that runs it (xRun),
// so commands call each other through options, never through argv.
type command struct {
	name    string
	args    string
	summary string
	run     func(ctx context.Context, env Env, args []string) error
}

// cmd joins a command's parse and run functions.
func cmd[O any](parse func(Env, []string) (O, error), run func(context.Context, Env, O) error) func(context.Context, Env, []string) error {
	return func(ctx context.Context, env Env, args []string) error {
		o, err := parse(env, args)
		if err != nil {
			return err
		}
		return run(ctx, env, o)
	}
}

func commands() []command {
	return []command{
		{"run", "[--config F] [--headless] [key.path=value ...]", "training console (TUI when stdout is a terminal)", cmd(newRunOptions, runRun)},
		{"config", "[--config F] [key.path=value ...]", "print the resolved config as TOML", cmd(configOnly("config"), configRun)},
		{"score", "--predictions P.jsonl|gold|empty [--dataset D] [--phase syntax|apply-only|docker] [--out report.json] [--workers N]", "score SWE-bench-format predictions", cmd(newScoreOptions, scoreRun)},
		{"grade", "--instance I.json --log test_output.txt [--parser P]", "parse and grade one test log as JSON", cmd(newGradeOptions, gradeRun)},
		{"prepare", "[--dataset D] [--dry-run]", "build, pull or stream the images a dataset needs", cmd(newPrepareOptions, prepareRun)},
		{"mine", "--repo DIR [--name owner/name] [--out tasks.jsonl] [--max N] [--history first-parent|all] [--dry-run] [key.path=value ...]", "mine SWE-style instances from a repository's history, verified by running their tests in Docker", cmd(newMineOptions, mineRun)},
		{"sft", "[--config F] [--export DIR] [key.path=value ...]", "supervised warm start on gold patches, writes a checkpoint", cmd(newSFTOptions, sftRun)},
		{"eval", "--ckpt C [--dataset D] [--split test] [--out preds.jsonl] [--phase P] [--temperature T]", "generate one patch per task with a checkpoint and score them", cmd(newEvalOptions, evalRun)},
		{"merge", "--adapter DIR --out DIR [--base DIR] [--dtype auto|bf16|f32]", "fold LoRA adapters into their base model: a full Hugging Face checkpoint", cmd(newMergeOptions, mergeRun)},
		{"serve", "[--addr 127.0.0.1:8765] [--dataset D] [--token-file F] [--headless] [key.path=value ...]", "score patches over HTTP for other trainers (POST /v1/score, GET /v1/tasks, /healthz, /metrics), with the reward pool's panes", cmd(newServeOptions, serveRun)},
		{"prompt", "--instance ID [--dataset D] [--config F] [key.path=value ...]", "print the prompt the policy sees for one instance, its tokens and the code it shows", cmd(newPromptOptions, promptRun)},
		{"view", "RUN_DIR [--filter WORDS] [--list]", "browse a run's completions, patches, verdicts and metrics, finished or still training", cmd(newViewOptions, viewRun)},
		{"plan", "[--model DIR|SHAPE] [--gpu-gib N] [--eval N] [key.path=value ...]", "the device memory plan of a run, without a device: each part, the total, what would make it fit", cmd(newPlanOptions, planRun)},
		{"verifier", "train RUN_DIR... --ckpt C [--out DIR] [--steps N] [key.path=value ...]", "a verifier of runs' docker verdicts, fine-tuned from a checkpoint, with its held-out AUC and calibration", cmd(newVerifierOptions, verifierRun)},
		{"version", "[--config F] [key.path=value ...]", "print the version, the build and the device", cmd(configOnly("version"), versionRun)},
	}
}

// usageError marks errors that exit with ExitUsage.
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

// UsageErrorf returns an error that makes the command exit with code 2.
func UsageErrorf(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// Main runs swetui with args (without the program name) and returns the exit code.
func Main(ctx context.Context, env Env, args []string) int {
	if len(args) > 0 && (args[0] == "help" || args[0] == "-h" || args[0] == "--help") {
		printUsage(env.Stdout)
		return ExitOK
	}
	name := "run"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") && !strings.Contains(args[0], "=") {
		name, args = args[0], args[1:]
	}
	for _, c := range commands() {
		if c.name != name {
			continue
		}
		err := c.run(ctx, env, args)
		return report(env, c.name, err)
	}
	fmt.Fprintf(env.Stderr, "swetui: unknown command %q\n\n", name)
	printUsage(env.Stderr)
	return ExitUsage
}

func report(env Env, name string, err error) int {
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, flag.ErrHelp):
		return ExitOK
	case errors.As(err, new(usageError)), errors.As(err, new(config.Problems)):
		fmt.Fprintf(env.Stderr, "swetui %s: %v\n", name, err)
		return ExitUsage
	default:
		fmt.Fprintf(env.Stderr, "swetui %s: %v\n", name, err)
		return ExitFailure
	}
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "swetui trains code models with GRPO on software-engineering tasks, live in the terminal.")
	fmt.Fprintln(w, "\nUsage:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  swetui %-8s %s\n      %s\n", c.name, c.args, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'swetui <command> --help' for a command's flags. Exit codes: 0 ok, 1 failure, 2 usage or config error.")
}

// newFlags makes a FlagSet whose --help prints the command's usage line.
func newFlags(env Env, name string) *flag.FlagSet {
	fs := flag.NewFlagSet("swetui "+name, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	for _, c := range commands() {
		if c.name == name {
			fs.Usage = func() {
				fmt.Fprintf(env.Stderr, "Usage: swetui %s %s\n  %s\n", c.name, c.args, c.summary)
				fs.PrintDefaults()
			}
		}
	}
	return fs
}

// parseFlags parses flags that may stand anywhere among key.path=value
// overrides, returning the overrides in order. Positional arguments that are
// not overrides are a usage error.
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var overrides []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usageError{err}
		}
		rest := fs.Args()
		i := 0
		for i < len(rest) && !strings.HasPrefix(rest[i], "-") {
			if !strings.Contains(rest[i], "=") {
				return nil, UsageErrorf("unexpected argument %q (overrides look like key.path=value)", rest[i])
			}
			overrides = append(overrides, rest[i])
			i++
		}
		if i == len(rest) {
			return overrides, nil
		}
		args = rest[i:]
	}
}

// parseAround parses fs's flags before, between and after the other
// arguments: folders (positional) and overrides (key.path=value, which a
// folder's name never is here).
func parseAround(fs *flag.FlagSet, args []string) (positional, overrides []string, err error) {
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, nil, err
			}
			return nil, nil, usageError{err}
		}
		if fs.NArg() == 0 {
			return positional, overrides, nil
		}
		if a := fs.Arg(0); strings.Contains(a, "=") {
			overrides = append(overrides, a)
		} else {
			positional = append(positional, a)
		}
		args = fs.Args()[1:]
	}
}

// configFlag registers --config and returns a loader for the resolved config.
func configFlag(fs *flag.FlagSet, env Env) func(overrides []string) (config.Config, error) {
	path := fs.String("config", "", "config file (default ./config.toml if present, else the built-in defaults)")
	return func(overrides []string) (config.Config, error) {
		var (
			cfg config.Config
			err error
		)
		switch {
		case *path != "":
			cfg, err = config.LoadFile(*path, false, overrides)
		case fileExists("config.toml"):
			cfg, err = config.LoadFile("config.toml", false, overrides)
		default:
			cfg, err = config.Load("config.toml (built in)", env.DefaultConfig, overrides)
		}
		if err != nil {
			return cfg, usageError{err}
		}
		if err := config.Validate(cfg); err != nil {
			return cfg, err
		}
		return cfg, nil
	}
}

// parseAndLoad parses a command's flags and overrides, then resolves and
// validates its config.
func parseAndLoad(fs *flag.FlagSet, load func([]string) (config.Config, error), args []string) (config.Config, []string, error) {
	overrides, err := parseFlags(fs, args)
	if err != nil {
		return config.Config{}, nil, err
	}
	cfg, err := load(overrides)
	return cfg, overrides, err
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// configOnly reads the options of a command that takes only --config and
// overrides (config, sft): the resolved config is all of them.
func configOnly(name string) func(Env, []string) (config.Config, error) {
	return func(env Env, args []string) (config.Config, error) {
		fs := newFlags(env, name)
		cfg, _, err := parseAndLoad(fs, configFlag(fs, env), args)
		return cfg, err
	}
}

// configRun prints the resolved config as TOML.
func configRun(ctx context.Context, env Env, cfg config.Config) error {
	out, err := config.Marshal(cfg)
	if err != nil {
		return err
	}
	_, err = env.Stdout.Write(out)
	return err
}

// versionRun prints the version, the build's GEMM library and the device
// model.device names (opened, so a GPU shows its name and memory).
func versionRun(ctx context.Context, env Env, cfg config.Config) error {
	device, err := app.DeviceName(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "swetui %s\n", Version)
	fmt.Fprintf(env.Stdout, "build %s, device %s\n", model.BLASName(), device)
	fmt.Fprint(env.Stdout, stageDevices(cfg.Model.Device, device))
	return nil
}

// stageDevices says where each stage of a run computes: on a GPU every
// stage runs on model.device's engine; on the CPU every stage runs on
// gorgonia. The reward pool always runs on the host and its sandbox hosts.
func stageDevices(spec, device string) string {
	engine := "gorgonia on the CPU"
	if spec != "cpu" {
		engine = "the device engine on " + device
	}
	return fmt.Sprintf("  warm start (sft)  %s\n  grpo              %s\n  eval              %s\n  rewards           the host and sandbox.hosts\n",
		engine, engine, engine)
}
