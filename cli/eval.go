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

// evalOptions are `swetui eval`'s inputs.
type evalOptions struct {
	Config      config.Config
	Ckpt        string // an SFT or run checkpoint, or a Hugging Face model
	Split       string
	Out         string // predictions file
	Phase       string // the reward phase the predictions are scored in (--mode)
	Report      string // score report; "" for <out> with .report.json
	Temperature float64
	Samples     int // replies per task for the well-formed rate; the first is the prediction
	// ScoreSamples also scores every reply, not only the prediction: rates
	// over Samples replies a task swing far less than over one.
	ScoreSamples bool
}

// newEvalOptions reads `swetui eval`'s flags, overrides and config.
func newEvalOptions(env Env, args []string) (evalOptions, error) {
	fs := newFlags(env, "eval")
	load := configFlag(fs, env)
	ckpt := fs.String("ckpt", "", "checkpoint folder: an SFT or run checkpoint, or a Hugging Face model (required)")
	dataset := fs.String("dataset", "", "dataset file or mini (default: data.source)")
	split := fs.String("split", "test", "split to generate for: test, train or all")
	out := fs.String("out", "preds.jsonl", "predictions file to write")
	mode := phaseFlag(fs, "the curriculum phase to score in")
	report := fs.String("report", "", "score report to write (default: <out> with .report.json)")
	temperature := fs.Float64("temperature", 0.7, "sampling temperature (0 decodes greedily)")
	samples := fs.Int("samples", 1, "replies sampled per task for the well-formed rate; the first is the prediction")
	scoreSamples := fs.Bool("score-samples", false, "also score every reply in --mode (report: <out> with .samples.report.json)")
	overrides, err := parseFlags(fs, args)
	if err != nil {
		return evalOptions{}, err
	}
	if *ckpt == "" {
		return evalOptions{}, UsageErrorf("--ckpt is required")
	}
	if err := config.CheckTemperature(*temperature, true); err != nil {
		return evalOptions{}, UsageErrorf("--temperature %v: %v (as sample.temperature, but 0 decodes greedily)", *temperature, err)
	}
	if *samples < 1 {
		return evalOptions{}, UsageErrorf("--samples must be at least 1, not %d", *samples)
	}
	if err := config.CheckPhase(*mode); err != nil {
		return evalOptions{}, UsageErrorf("--mode: %v", err)
	}
	cfg, err := load(overrides)
	if err != nil {
		return evalOptions{}, err
	}
	if *dataset != "" {
		cfg.Data.Source = *dataset
	}
	return evalOptions{Config: cfg, Ckpt: *ckpt, Split: *split, Out: *out, Phase: *mode, Report: *report,
		Temperature: *temperature, Samples: *samples, ScoreSamples: *scoreSamples}, nil
}

// evalRun implements `swetui eval`: one patch per task of a split with a
// checkpoint, written as SWE-bench predictions, then scored as `swetui
// score` scores them.
func evalRun(ctx context.Context, env Env, o evalOptions) error {
	cfg := o.Config
	// The checkpoint is the model as model.init_ckpt would be: its own
	// tokenizer and chat template, read straight onto a device, adapters
	// folded into their base.
	cfg.Model.InitCkpt, cfg.Model.Tokenizer = o.Ckpt, ""
	if _, ok := hfFolder(o.Ckpt); !ok {
		return fmt.Errorf("eval: %s holds no tokenizer.json (nor its policy/): not a checkpoint swetui or Hugging Face wrote", o.Ckpt)
	}
	ws, err := openWorkspace(ctx, cfg, o.Split)
	if err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	ws.sampleOnly = o.Samples
	m, err := ws.newModel()
	if err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	host, err := ws.newPolicy(m, cfg.Optim.LR, 1)
	if err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	pol, err := ws.openPolicy(ctx, host, nil)
	if err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	defer pol.Close()
	fmt.Fprintf(env.Stderr, "eval: sampling on %s; prompts in %s\n", pol.Device, ws.chat.Name())
	if n := contextNote(m); n != "" {
		fmt.Fprintf(env.Stderr, "eval: %s\n", n)
	}
	if pol.Dev != nil {
		fmt.Fprintf(env.Stderr, "memory plan:\n%s", ws.plan)
	}
	f, err := os.Create(o.Out)
	if err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	enc := json.NewEncoder(f)
	bar := newProgress(env, len(ws.tasks))
	valid := 0
	var all []prediction
	name := filepath.Base(filepath.Clean(o.Ckpt))
	opts := train.SampleOptions{Temperature: o.Temperature, TopP: cfg.Sample.TopP, MaxNewTokens: cfg.Sample.MaxNewTokens}
	for _, in := range ws.tasks {
		prompt, err := train.PromptTokens(ctx, ws.prompter, ws.tok, in, cfg.Model.Context, opts.MaxNewTokens)
		if err != nil {
			f.Close()
			return fmt.Errorf("eval: %w", err)
		}
		replies, err := pol.Sample(ctx, prompt, o.Samples, opts)
		if err != nil {
			f.Close()
			return fmt.Errorf("eval %s: %w", in.InstanceID, err)
		}
		var first reward.Extraction
		for i, r := range replies {
			ex := reward.Extract(ws.chat.CompletionText(ws.tok, r.Tokens))
			if ex.Valid() {
				valid++
			}
			if i == 0 {
				first = ex
			}
			if o.ScoreSamples {
				all = append(all, prediction{InstanceID: in.InstanceID, Model: name, Patch: &ex.Diff, Sample: i})
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
	n := len(ws.tasks) * o.Samples
	fmt.Fprintf(env.Stdout, "eval: %d tasks x %d samples, %d replies with a well-formed diff (%.0f%%) at temperature %.2f; predictions: %s\n",
		len(ws.tasks), o.Samples, valid, 100*float64(valid)/float64(max(1, n)), o.Temperature, o.Out)
	base := strings.TrimSuffix(o.Out, filepath.Ext(o.Out))
	report := o.Report
	if report == "" {
		report = base + ".report.json"
	}
	if err := scoreRun(ctx, env, scoreOptions{Config: o.Config, Predictions: o.Out, Phase: o.Phase, Out: report}); err != nil || !o.ScoreSamples {
		return err
	}
	fmt.Fprintf(env.Stdout, "every reply:\n")
	return scoreRun(ctx, env, scoreOptions{Config: o.Config, Predictions: fmt.Sprintf("%s, %d replies a task", o.Out, o.Samples),
		preds: all, Phase: o.Phase, Out: base + ".samples.report.json"})
}
