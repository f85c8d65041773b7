package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/swetui/swetui/app"
	"github.com/swetui/swetui/config"
)

// scoreOptions are `swetui score`'s inputs; eval fills them too.
type scoreOptions struct {
	Config      config.Config     // data.source is the dataset; sandbox.workers the docker parallelism
	Predictions string            // a file, or gold or empty
	preds       []app.Prediction  // given by eval instead of read from Predictions (its label then)
	Phase       string            // the reward phase (--mode)
	Out         string            // report path; - for stdout, "" for none
	Workers     int               // 0: sandbox.workers for docker, the CPU count otherwise
	scored      *[]app.ScoreEntry // where eval keeps the entries, when set
}

// phaseFlag defines --phase (syntax, apply-only or docker; default docker)
// and its older name --mode, which set the same value.
func phaseFlag(fs *flag.FlagSet, what string) *string {
	phase := config.PhaseDocker
	fs.StringVar(&phase, "phase", phase, what+": syntax, apply-only or docker")
	fs.StringVar(&phase, "mode", phase, "the same as --phase (its older name)")
	return &phase
}

// newScoreOptions reads `swetui score`'s flags, overrides and config.
func newScoreOptions(env Env, args []string) (scoreOptions, error) {
	fs := newFlags(env, "score")
	load := configFlag(fs, env)
	predsArg := fs.String("predictions", "", "predictions (.jsonl or .json: instance_id, model_name_or_path, model_patch), or gold or empty (required)")
	dataset := fs.String("dataset", "", "dataset file (.jsonl, .json, .parquet) or mini (default: data.source)")
	mode := phaseFlag(fs, "the curriculum phase to score in")
	out := fs.String("out", "report.json", "per-instance report to write (- for stdout, empty for none)")
	workers := fs.Int("workers", 0, "concurrent evaluations (default: sandbox.workers for docker, the CPU count otherwise)")
	overrides, err := parseFlags(fs, args)
	if err != nil {
		return scoreOptions{}, err
	}
	if *predsArg == "" {
		return scoreOptions{}, UsageErrorf("--predictions is required (a file, gold or empty)")
	}
	if err := config.CheckPhase(*mode); err != nil {
		return scoreOptions{}, UsageErrorf("--mode: %v", err)
	}
	if *workers < 0 {
		return scoreOptions{}, UsageErrorf("--workers %d: want at least 1", *workers)
	}
	cfg, err := load(overrides)
	if err != nil {
		return scoreOptions{}, err
	}
	if *dataset != "" {
		cfg.Data.Source = *dataset
	}
	return scoreOptions{Config: cfg, Predictions: *predsArg, Phase: *mode, Out: *out, Workers: *workers}, nil
}

// scoreRun implements `swetui score`: it scores the predictions, prints the
// summary and writes the report.
func scoreRun(ctx context.Context, env Env, o scoreOptions) error {
	cfg := o.Config
	if o.Workers > 0 {
		cfg.Sandbox.Workers = o.Workers
	}
	start := time.Now()

	insts, repos, err := app.LoadScoreDataset(ctx, cfg)
	if err != nil {
		return err
	}
	preds := o.preds
	if preds == nil {
		if preds, err = app.ReadPredictions(o.Predictions, insts); err != nil {
			return err
		}
	}

	par := cfg.Sandbox.Workers
	if o.Phase != config.PhaseDocker || par < 1 {
		par = max(o.Workers, 1, min(8, len(preds)))
	}
	prog := newProgress(env, len(preds))
	// Hosts going down and back, retries and masked evaluations are said
	// on stderr as they happen, as the headless run says them.
	entries, err := app.Score(ctx, cfg, insts, repos, preds, app.ScoreOptions{Phase: o.Phase, Parallel: par,
		Events: &messagePrinter{w: env.Stderr, start: time.Now()}, Step: prog.step})
	prog.done()
	if err != nil {
		return fmt.Errorf("score: %w", err)
	}

	if o.scored != nil {
		*o.scored = entries
	}
	rep := app.ScoreReport{Summary: app.Summarise(entries), Instances: entries}
	rep.Summary.Dataset, rep.Summary.Predictions, rep.Summary.Mode = cfg.Data.Source, o.Predictions, o.Phase
	rep.Summary.WallSeconds = time.Since(start).Seconds()
	printSummary(env.Stdout, rep.Summary)
	switch o.Out {
	case "":
	case "-":
		return writeJSON(env.Stdout, rep)
	default:
		f, err := os.Create(o.Out)
		if err != nil {
			return fmt.Errorf("score: report: %w", err)
		}
		if err := writeJSON(f, rep); err != nil {
			f.Close()
			return fmt.Errorf("score: report %s: %w", o.Out, err)
		}
		if err := f.Close(); err != nil {
			return fmt.Errorf("score: report %s: %w", o.Out, err)
		}
		fmt.Fprintf(env.Stdout, "report: %s\n", o.Out)
	}
	if s := rep.Summary; s.Infra > 0 && s.Infra == s.Total-s.Errors {
		for _, e := range entries {
			if e.Verdict != nil && e.Verdict.Infra {
				return fmt.Errorf("score: every evaluation failed for infrastructure reasons; first: %s", e.Verdict.InfraCause)
			}
		}
	}
	return nil
}

func countList(m map[string]int) string {
	out := make([]string, 0, len(m))
	for k, n := range m {
		out = append(out, fmt.Sprintf("%s=%d", k, n))
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

func printSummary(w io.Writer, s app.ScoreSummary) {
	pct := func(n int) string {
		if s.Total == 0 {
			return "-"
		}
		return fmt.Sprintf("%5.1f%%", 100*float64(n)/float64(s.Total))
	}
	fmt.Fprintf(w, "scored %d predictions (%s) on %s in mode %s, %.1fs\n", s.Total, s.Predictions, s.Dataset, s.Mode, s.WallSeconds)
	fmt.Fprintf(w, "  empty          %5d  %s\n", s.Empty, pct(s.Empty))
	fmt.Fprintf(w, "  syntax-valid   %5d  %s\n", s.SyntaxValid, pct(s.SyntaxValid))
	fmt.Fprintf(w, "  applied        %5d  %s\n", s.Applied, pct(s.Applied))
	fmt.Fprintf(w, "  resolved       %5d  %s\n", s.Resolved, pct(s.Resolved))
	fmt.Fprintf(w, "  infra failures %5d  (masked from the mean)\n", s.Infra)
	if s.Errors > 0 {
		fmt.Fprintf(w, "  errors         %5d  (instances missing from the dataset)\n", s.Errors)
	}
	hacks := make([]string, 0, len(s.Hacks))
	for h, n := range s.Hacks {
		hacks = append(hacks, fmt.Sprintf("%s=%d", h, n))
	}
	sort.Strings(hacks)
	if len(hacks) == 0 {
		hacks = []string{"none"}
	}
	fmt.Fprintf(w, "  hack flags     %s\n", strings.Join(hacks, " "))
	if len(s.HacksUndone) > 0 {
		fmt.Fprintf(w, "  undone flags   %s  (the reset restored those files before the tests: not penalised)\n", countList(s.HacksUndone))
	}
	if len(s.InfraCauses) > 0 {
		causes := make([]string, 0, len(s.InfraCauses))
		for c := range s.InfraCauses {
			causes = append(causes, c)
		}
		sort.Slice(causes, func(i, j int) bool {
			if s.InfraCauses[causes[i]] != s.InfraCauses[causes[j]] {
				return s.InfraCauses[causes[i]] > s.InfraCauses[causes[j]]
			}
			return causes[i] < causes[j]
		})
		for i, c := range causes {
			if i == 3 {
				fmt.Fprintf(w, "  ... and %d other infrastructure causes (in the report)\n", len(causes)-3)
				break
			}
			fmt.Fprintf(w, "  infra %4dx    %s\n", s.InfraCauses[c], c)
		}
	}
	if s.Scored == 0 {
		fmt.Fprintf(w, "  mean reward    n/a (nothing scored)\n")
		return
	}
	fmt.Fprintf(w, "  mean reward    %.4f  over %d\n", s.MeanReward, s.Scored)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// progress draws a bar on stderr when stdout is a terminal.
type progress struct {
	mu    sync.Mutex
	w     io.Writer
	n, of int
	on    bool
}

func newProgress(env Env, of int) *progress {
	return &progress{w: env.Stderr, of: of, on: env.IsTerminal && of > 0}
}

func (p *progress) step() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	if !p.on {
		return
	}
	const width = 30
	fill := width * p.n / p.of
	fmt.Fprintf(p.w, "\r[%s%s] %d/%d", strings.Repeat("#", fill), strings.Repeat(".", width-fill), p.n, p.of)
}

func (p *progress) done() {
	if p.on {
		fmt.Fprintln(p.w)
	}
}
