package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/swetui/swetui/app"
	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/prompt"
	"github.com/swetui/swetui/task"
)

// promptOptions are `swetui prompt`'s inputs.
type promptOptions struct {
	Config   config.Config
	Instance string
}

func newPromptOptions(env Env, args []string) (promptOptions, error) {
	fs := newFlags(env, "prompt")
	load := configFlag(fs, env)
	id := fs.String("instance", "", "instance id whose prompt to print (required)")
	dataset := fs.String("dataset", "", "dataset file or mini (default: data.source)")
	overrides, err := parseFlags(fs, args)
	if err != nil {
		return promptOptions{}, err
	}
	if *id == "" {
		return promptOptions{}, UsageErrorf("--instance is required")
	}
	cfg, err := load(overrides)
	if err != nil {
		return promptOptions{}, err
	}
	if *dataset != "" {
		cfg.Data.Source = *dataset
	}
	return promptOptions{Config: cfg, Instance: *id}, nil
}

// planner is a prompter that says what its prompts show.
type planner interface {
	Plan(ctx context.Context, inst *task.Instance) (prompt.Plan, error)
}

// promptRun implements `swetui prompt`: the prompt the policy sees for one
// instance, with the run's config, tokenizer and chat format (a Hugging
// Face model.init_ckpt's own template), then what it holds.
func promptRun(ctx context.Context, env Env, o promptOptions) error {
	cfg := o.Config
	cfg, done, err := app.WithoutRunFolder(cfg)
	if err != nil {
		return fmt.Errorf("prompt: %w", err)
	}
	defer done()
	ws, err := app.Open(ctx, cfg, task.SplitTrain)
	if err != nil {
		return fmt.Errorf("prompt: %w", err)
	}
	inst, err := ws.FindInstance(ctx, o.Instance)
	if errors.Is(err, app.ErrNoInstance) {
		return UsageErrorf("prompt: %v", err)
	}
	if err != nil {
		return fmt.Errorf("prompt: %w", err)
	}
	text, err := ws.Prompter.Prompt(ctx, inst)
	if err != nil {
		return fmt.Errorf("prompt: %w", err)
	}
	var plan prompt.Plan
	if p, ok := ws.Prompter.(planner); ok {
		if plan, err = p.Plan(ctx, inst); err != nil {
			return fmt.Errorf("prompt: %w", err)
		}
	}
	toks := ws.Tok.Encode(text)
	room := cfg.Model.Context - cfg.Sample.MaxNewTokens
	seen := prompt.Fit(toks, cfg.Model.Context, cfg.Sample.MaxNewTokens)
	if len(seen) < len(toks) {
		text = ws.Tok.Decode(seen)
	}
	fmt.Fprint(env.Stdout, text)
	if !strings.HasSuffix(text, "\n") {
		fmt.Fprintln(env.Stdout)
	}
	writePlan(env.Stdout, cfg, inst, plan, len(toks), room)
	fmt.Fprintf(env.Stdout, "chat format: %s; a reply ends with %s; sampling stops at %s\n",
		ws.Chat.Name(), ws.Chat.EndOfTurn(), strings.Join(ws.Chat.StopTexts(), ", "))
	return nil
}

// writePlan writes the summary under the prompt: tokens against the
// budget, the setting, and each file shown whole, in part or not at all.
func writePlan(w io.Writer, cfg config.Config, inst *task.Instance, plan prompt.Plan, tokens, room int) {
	budget := "model.context - sample.max_new_tokens"
	if cfg.Data.PromptTokens > 0 {
		budget = "data.prompt_tokens"
	}
	setting := plan.Setting
	if setting == "" {
		setting = cfg.Data.Prompt
	}
	head := fmt.Sprintf("--- %s: %d tokens", inst.InstanceID, tokens)
	switch {
	case setting == config.PromptText:
		head += fmt.Sprintf("; data.prompt = text: the instance's text field as is (no budget applied; %d tokens fit)", room)
	case plan.Budget > 0:
		head += fmt.Sprintf(" of a %d-token budget (%s); data.prompt = %s", plan.Budget, budget, setting)
	default:
		head += fmt.Sprintf(" (%d fit); data.prompt = oracle, files cut from their end to %d bytes in all (data.prompt_tokens = 0: the shipped warm start's prompts)",
			room, app.MaxContextBytes(cfg))
	}
	if setting != cfg.Data.Prompt {
		head += fmt.Sprintf(" instead of %s", cfg.Data.Prompt)
	}
	if inst.Split != "" {
		head += "; split " + inst.Split
	}
	fmt.Fprintln(w, head)
	if plan.Note != "" {
		fmt.Fprintln(w, "note: "+plan.Note)
	}
	if tokens > room {
		fmt.Fprintf(w, "note: %d tokens past the %d that model.context leaves: sampling keeps the prompt's last %d (shown above)\n", tokens-room, room, room)
	}
	for _, f := range plan.Files {
		line := "shown " + f.Path
		switch {
		case f.CutBytes > 0:
			line += fmt.Sprintf(": its first %d bytes (of %d lines)", f.CutBytes, f.Lines)
		case f.Shown == nil:
			line += fmt.Sprintf(": whole, %d lines", f.Lines)
		default:
			n := 0
			for _, r := range f.Shown {
				n += r.End - r.Start
			}
			line += fmt.Sprintf(": %d of %d lines, %s", n, f.Lines, names(f.Chunks))
			if len(f.Elided) > 0 {
				line += "; elided " + names(f.Elided)
			}
		}
		if f.Score > 0 {
			line += fmt.Sprintf(" (bm25 %.2f)", f.Score)
		}
		fmt.Fprintln(w, line)
	}
	if len(plan.NotShown) > 0 {
		what := "not shown (no room)"
		if setting == config.PromptBM25 {
			what = "not shown, ranked next"
		}
		fmt.Fprintf(w, "%s: %s\n", what, strings.Join(plan.NotShown, ", "))
	}
}

// names lists chunk names, the first dozen of a long list.
func names(ns []string) string {
	const most = 12
	if len(ns) <= most {
		return strings.Join(ns, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(ns[:most], ", "), len(ns)-most)
}
