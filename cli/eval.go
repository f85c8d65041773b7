package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/reward"
	"github.com/swetui/swetui/train"
)

// runEval implements `swetui eval`: one patch per held-out task with a
// checkpoint, written as SWE-bench predictions, then scored as `swetui score`
// scores them.
func runEval(ctx context.Context, env Env, args []string) error {
	fs := newFlags(env, "eval")
	load := configFlag(fs, env)
	ckpt := fs.String("ckpt", "", "checkpoint folder: an SFT or run checkpoint, or a Hugging Face model (required)")
	dataset := fs.String("dataset", "", "dataset file or mini (default: data.source)")
	split := fs.String("split", "test", "split to generate for: test, train or all")
	out := fs.String("out", "preds.jsonl", "predictions file to write")
	mode := fs.String("mode", config.PhaseDocker, "reward mode to score in: syntax, apply-only or docker")
	report := fs.String("report", "", "score report to write (default: <out> with .report.json)")
	temperature := fs.Float64("temperature", 0.7, "sampling temperature (0 decodes greedily)")
	samples := fs.Int("samples", 1, "replies sampled per task for the well-formed rate; the first is the prediction")
	overrides, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if *ckpt == "" {
		return UsageErrorf("--ckpt is required")
	}
	if *samples < 1 {
		return UsageErrorf("--samples must be at least 1, not %d", *samples)
	}
	cfg, err := load(overrides)
	if err != nil {
		return err
	}
	if *dataset != "" {
		cfg.Data.Source = *dataset
	}
	tokPath := filepath.Join(*ckpt, "tokenizer.json")
	if _, err := os.Stat(filepath.Join(*ckpt, "policy", "tokenizer.json")); err == nil {
		tokPath = filepath.Join(*ckpt, "policy", "tokenizer.json")
	}
	cfg.Model.Tokenizer = tokPath
	ws, err := openWorkspace(ctx, cfg, *split)
	if err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	m, err := loadModel(*ckpt, ws.tok)
	if err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	pol, err := ws.newPolicy(m, cfg.Optim.LR, 1)
	if err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	f, err := os.Create(*out)
	if err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	enc := json.NewEncoder(f)
	bar := newProgress(env, len(ws.tasks))
	valid := 0
	name := filepath.Base(filepath.Clean(*ckpt))
	for _, in := range ws.tasks {
		text, err := ws.prompter.Prompt(ctx, in)
		if err != nil {
			f.Close()
			return fmt.Errorf("eval: %w", err)
		}
		prompt := ws.tok.Encode(text)
		if room := cfg.Model.Context - cfg.Sample.MaxNewTokens; len(prompt) > room {
			prompt = prompt[len(prompt)-room:]
		}
		replies, err := pol.Sample(ctx, prompt, *samples, train.SampleOptions{Temperature: *temperature, TopP: cfg.Sample.TopP, MaxNewTokens: cfg.Sample.MaxNewTokens})
		if err != nil {
			f.Close()
			return fmt.Errorf("eval %s: %w", in.InstanceID, err)
		}
		var first reward.Extraction
		for i, r := range replies {
			ex := reward.Extract(train.CompletionText(ws.tok, r.Tokens))
			if ex.Valid() {
				valid++
			}
			if i == 0 {
				first = ex
			}
		}
		if err := enc.Encode(prediction{InstanceID: in.InstanceID, Model: name, Patch: &first.Diff}); err != nil {
			f.Close()
			return fmt.Errorf("eval: %w", err)
		}
		bar.step()
	}
	bar.done()
	if err := f.Close(); err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	// The score below re-reads each written patch as a prediction, which can
	// find a well-formed diff inside a malformed reply: its syntax-valid count
	// may be higher than this one, which is what the training reward sees.
	n := len(ws.tasks) * *samples
	fmt.Fprintf(env.Stdout, "eval: %d tasks x %d samples, %d replies with a well-formed diff (%.0f%%) at temperature %.2f; predictions: %s\n",
		len(ws.tasks), *samples, valid, 100*float64(valid)/float64(max(1, n)), *temperature, *out)
	if *report == "" {
		*report = strings.TrimSuffix(*out, filepath.Ext(*out)) + ".report.json"
	}
	scoreArgs := append([]string{"--predictions", *out, "--mode", *mode, "--out", *report, "--dataset", cfg.Data.Source}, overrides...)
	if c := fs.Lookup("config").Value.String(); c != "" {
		scoreArgs = append(scoreArgs, "--config", c)
	}
	return runScore(ctx, env, scoreArgs)
}
