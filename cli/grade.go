package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/swetui/swetui/app"
	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/reward"
)

// gradeOptions are `swetui grade`'s inputs.
type gradeOptions struct {
	Config   config.Config // its [reward] weights
	Instance string        // JSON object or JSONL file
	Log      string
	Parser   string // "" for the instance's
}

func newGradeOptions(env Env, args []string) (gradeOptions, error) {
	fs := newFlags(env, "grade")
	load := configFlag(fs, env)
	instPath := fs.String("instance", "", "the instance: a JSON object or a JSONL line with SWE-bench's fields (required)")
	logPath := fs.String("log", "", "the test log: a swetui eval log, or a harness test_output.txt (required)")
	parserName := fs.String("parser", "", "log parser (default: the instance's log_parser, else its repository's); one of "+strings.Join(reward.ParserNames(), ", "))
	overrides, err := parseFlags(fs, args)
	if err != nil {
		return gradeOptions{}, err
	}
	if *instPath == "" || *logPath == "" {
		return gradeOptions{}, UsageErrorf("--instance and --log are required")
	}
	cfg, err := load(overrides)
	return gradeOptions{Config: cfg, Instance: *instPath, Log: *logPath, Parser: *parserName}, err
}

// gradeRun implements `swetui grade`: one log graded, as JSON.
func gradeRun(ctx context.Context, env Env, o gradeOptions) error {
	inst, err := app.ReadInstance(o.Instance)
	if err != nil {
		return err
	}
	logData, err := os.ReadFile(o.Log)
	if err != nil {
		return fmt.Errorf("grade: %w", err)
	}
	parser := o.Parser // a parser that cannot be named or found is the command line's error
	if parser == "" {
		if parser, err = reward.ParserNameOf(&inst); err != nil {
			return UsageErrorf("%v (name one with --parser)", err)
		}
	}
	if _, err := reward.ParserFor(parser); err != nil {
		return UsageErrorf("%v", err)
	}
	rep, err := app.GradeLog(&inst, string(logData), parser, reward.WeightsFrom(o.Config.Reward))
	if err != nil {
		return err
	}
	enc := json.NewEncoder(env.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}
