package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/reward"
	"github.com/swetui/swetui/sandbox"
	"github.com/swetui/swetui/task"
)

// prediction is one line of SWE-bench's predictions format.
type prediction struct {
	InstanceID string  `json:"instance_id"`
	Model      string  `json:"model_name_or_path"`
	Patch      *string `json:"model_patch"`      // nil: the harness's patch_is_None
	Sample     int     `json:"sample,omitempty"` // which of eval's replies (eval --score-samples)
}

// scoreEntry is one instance of the score report: the harness report's
// fields, so reports compare one to one, derived from the verdict that
// carries every reward component.
type scoreEntry struct {
	InstanceID               string             `json:"instance_id"`
	Sample                   int                `json:"sample,omitempty"`
	Model                    string             `json:"model_name_or_path"`
	PatchIsNone              bool               `json:"patch_is_None"`
	PatchExists              bool               `json:"patch_exists"`
	PatchSuccessfullyApplied bool               `json:"patch_successfully_applied"`
	Resolved                 bool               `json:"resolved"`
	TestsStatus              *event.TestsStatus `json:"tests_status,omitempty"`
	Error                    string             `json:"error,omitempty"`
	HackFlags                []string           `json:"hack_flags,omitempty"` // why a patch whose tests pass is not resolved
	Verdict                  *event.Verdict     `json:"verdict,omitempty"`    // with the patch as extracted and normalised
}

// scoreSummary is the report's head and what is printed.
type scoreSummary struct {
	Dataset     string         `json:"dataset"`
	Predictions string         `json:"predictions"`
	Mode        string         `json:"mode"`
	Total       int            `json:"total"`
	Empty       int            `json:"empty"`
	SyntaxValid int            `json:"syntax_valid"`
	Applied     int            `json:"applied"`
	Resolved    int            `json:"resolved"`
	Infra       int            `json:"infra_failures"`
	Errors      int            `json:"errors"` // predictions for instances the dataset lacks
	Hacks       map[string]int `json:"hack_flags"`
	// HacksUndone counts flags raised only by files the evaluation resets:
	// reported, not penalised.
	HacksUndone map[string]int `json:"hacks_undone,omitempty"`
	// InfraCauses counts the infrastructure failures by cause, so that a
	// dataset problem (a setup that undoes the patches) reads as one line.
	InfraCauses map[string]int `json:"infra_causes,omitempty"`
	Scored      int            `json:"scored"` // neither errors nor infra failures: the mean's denominator
	MeanReward  float64        `json:"mean_reward"`
	WallSeconds float64        `json:"wall_s"`
}

type scoreReport struct {
	Summary   scoreSummary `json:"summary"`
	Instances []scoreEntry `json:"instances"`
}

// scoreOptions are `swetui score`'s inputs; eval fills them too.
type scoreOptions struct {
	Config      config.Config // data.source is the dataset; sandbox.workers the docker parallelism
	Predictions string        // a file, or gold or empty
	preds       []prediction  // given by eval instead of read from Predictions (its label then)
	Phase       string        // the reward phase (--mode)
	Out         string        // report path; - for stdout, "" for none
	Workers     int           // 0: sandbox.workers for docker, the CPU count otherwise
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

	insts, repos, err := loadScoreDataset(ctx, cfg)
	if err != nil {
		return err
	}
	preds := o.preds
	if preds == nil {
		if preds, err = readPredictions(o.Predictions, insts); err != nil {
			return err
		}
	}

	// The pool starts on the first container evaluation: apply-only scoring
	// against local repositories never needs Docker.
	pool := &lazyPool{open: func() (*sandbox.Pool, error) {
		opts := sandbox.FromConfig(cfg, "")
		// Hosts going down and back, retries and masked evaluations are
		// said on stderr as they happen, as the headless run says them.
		opts.Events = &messagePrinter{w: env.Stderr, start: time.Now()}
		return sandbox.NewPool(ctx, opts)
	}}
	defer pool.close(ctx)
	ev := &reward.PoolEvaluator{Pool: pool}
	scorer := reward.NewScorer(cfg.Reward, ev)
	defer scorer.Close()
	if scorer.Applier != nil {
		for id, path := range repos {
			scorer.Applier.RegisterInstance(id, path)
		}
		scorer.Applier.Fill = imageFill(cfg, "", func(repo string) *task.Instance {
			for i := range insts {
				if insts[i].Repo == repo {
					return &insts[i]
				}
			}
			return nil
		})
	}
	par := cfg.Sandbox.Workers
	if o.Phase != config.PhaseDocker || par < 1 {
		par = max(o.Workers, 1, min(8, len(preds)))
	}
	scorer.Parallel = par

	byID := make(map[string]*task.Instance, len(insts))
	for i := range insts {
		byID[insts[i].InstanceID] = &insts[i]
	}
	entries := make([]scoreEntry, len(preds))
	prog := newProgress(env, len(preds))
	var wg sync.WaitGroup
	sem := make(chan struct{}, par)
	for i, p := range preds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			entries[i] = scoreOne(ctx, scorer, byID[p.InstanceID], p, o.Phase)
			prog.step()
		}()
	}
	wg.Wait()
	prog.done()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("score: %w", err)
	}

	rep := scoreReport{Summary: summarise(entries), Instances: entries}
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

func scoreOne(ctx context.Context, s *reward.Scorer, in *task.Instance, p prediction, mode string) scoreEntry {
	e := scoreEntry{InstanceID: p.InstanceID, Sample: p.Sample, Model: p.Model, PatchIsNone: p.Patch == nil}
	if in == nil {
		e.Error = fmt.Sprintf("instance %s is not in the dataset", p.InstanceID)
		return e
	}
	patch := ""
	if p.Patch != nil {
		patch = *p.Patch
	}
	e.PatchExists = patch != ""
	rs, err := s.ScoreDiffs(ctx, in, []string{patch}, mode)
	if err != nil {
		e.Error = err.Error()
		return e
	}
	r := rs[0]
	e.Verdict = &r
	e.PatchSuccessfullyApplied = r.Applied
	e.Resolved = r.Resolved
	e.HackFlags = r.Hacks
	e.TestsStatus = r.TestsStatus
	return e
}

func summarise(entries []scoreEntry) scoreSummary {
	s := scoreSummary{Total: len(entries), Hacks: map[string]int{}, HacksUndone: map[string]int{}, InfraCauses: map[string]int{}}
	for _, e := range entries {
		if !e.PatchExists {
			s.Empty++
		}
		r := e.Verdict
		if r == nil {
			s.Errors++
			continue
		}
		if r.SyntaxOK {
			s.SyntaxValid++
		}
		if r.Applied {
			s.Applied++
		}
		if r.Resolved {
			s.Resolved++
		}
		if r.Infra {
			s.Infra++
			s.InfraCauses[infraKind(r.InfraCause)]++
			continue
		}
		for _, h := range r.Hacks {
			s.Hacks[h]++
		}
		for _, h := range r.HacksUndone {
			s.HacksUndone[h]++
		}
		s.MeanReward += r.Reward
		s.Scored++
	}
	if s.Scored > 0 {
		s.MeanReward /= float64(s.Scored)
	}
	return s
}

// infraKind is an infrastructure cause without its instance id and its
// details (what follows its first ": "), so that one problem of many
// instances counts once.
func infraKind(cause string) string {
	if i := strings.Index(cause, ": "); i >= 0 && strings.HasPrefix(cause, "evaluate ") {
		cause = cause[i+2:]
	}
	if i := strings.Index(cause, ": "); i >= 0 {
		cause = cause[:i]
	}
	return cause
}

func countList(m map[string]int) string {
	out := make([]string, 0, len(m))
	for k, n := range m {
		out = append(out, fmt.Sprintf("%s=%d", k, n))
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

func printSummary(w io.Writer, s scoreSummary) {
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

// loadScoreDataset loads every instance of cfg.Data.Source (all splits, no
// selection) and, for the embedded suite, materialises its repositories so
// that apply checks run against them.
func loadScoreDataset(ctx context.Context, cfg config.Config) ([]task.Instance, map[string]string, error) {
	cfg.Data.Split, cfg.Data.TrainLimit = task.SplitAll, 0
	cfg.Data.Include, cfg.Data.Exclude = nil, nil
	insts, err := task.Load(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("score: dataset %s: %w", cfg.Data.Source, err)
	}
	var repos map[string]string
	if cfg.Data.Source == task.MiniSource {
		suite, err := task.GenerateMiniFor(cfg)
		if err != nil {
			return nil, nil, fmt.Errorf("score: %w", err)
		}
		if repos, err = suite.Materialize(ctx, task.DefaultCacheDir()); err != nil {
			return nil, nil, fmt.Errorf("score: %w", err)
		}
	}
	return insts, repos, nil
}

// readPredictions reads a predictions file (.jsonl, or .json holding a list
// or an object keyed by instance id), or makes the gold or empty ones.
func readPredictions(arg string, insts []task.Instance) ([]prediction, error) {
	switch arg {
	case "gold", "empty":
		out := make([]prediction, len(insts))
		for i := range insts {
			patch := ""
			if arg == "gold" {
				patch = insts[i].Patch
			}
			out[i] = prediction{InstanceID: insts[i].InstanceID, Model: arg, Patch: &patch}
		}
		return out, nil
	}
	data, err := os.ReadFile(arg)
	if err != nil {
		return nil, fmt.Errorf("score: predictions: %w", err)
	}
	data = bytes.TrimPrefix(data, task.BOM)
	trimmed := bytes.TrimSpace(data)
	var preds []prediction
	switch {
	case strings.EqualFold(filepath.Ext(arg), ".json") && len(trimmed) > 0 && trimmed[0] == '[':
		if err := json.Unmarshal(trimmed, &preds); err != nil {
			return nil, fmt.Errorf("score: predictions %s: %w", arg, err)
		}
	case strings.EqualFold(filepath.Ext(arg), ".json") && len(trimmed) > 0 && trimmed[0] == '{':
		var byID map[string]prediction
		if err := json.Unmarshal(trimmed, &byID); err != nil {
			return nil, fmt.Errorf("score: predictions %s: %w", arg, err)
		}
		for id, p := range byID {
			if p.InstanceID == "" {
				p.InstanceID = id
			}
			preds = append(preds, p)
		}
		sort.Slice(preds, func(i, j int) bool { return preds[i].InstanceID < preds[j].InstanceID })
	default:
		sc := scanLines(bufio.NewReader(bytes.NewReader(data)))
		for line := 1; sc.Scan(); line++ {
			b := bytes.TrimPrefix(sc.Bytes(), task.BOM)
			if len(bytes.TrimSpace(b)) == 0 {
				continue
			}
			var p prediction
			if err := json.Unmarshal(b, &p); err != nil {
				return nil, fmt.Errorf("score: predictions %s:%d: %w", arg, line, err)
			}
			preds = append(preds, p)
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("score: predictions %s: %w", arg, err)
		}
	}
	seen := map[string]bool{}
	for i, p := range preds {
		if p.InstanceID == "" {
			return nil, fmt.Errorf("score: predictions %s: entry %d has no instance_id", arg, i+1)
		}
		if seen[p.InstanceID] {
			return nil, fmt.Errorf("score: predictions %s: instance %s predicted twice", arg, p.InstanceID)
		}
		seen[p.InstanceID] = true
	}
	return preds, nil
}

// lazyPool opens the sandbox pool on first use; a pool that cannot open
// makes every evaluation an infrastructure failure with that cause.
type lazyPool struct {
	open func() (*sandbox.Pool, error)
	once sync.Once
	pool *sandbox.Pool
	err  error
}

func (l *lazyPool) Run(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error) {
	l.once.Do(func() {
		if l.pool, l.err = l.open(); l.err != nil {
			l.err = fmt.Errorf("docker sandbox: %w", l.err)
		}
	})
	if l.err != nil {
		return sandbox.Result{ID: spec.ID, InstanceID: spec.InstanceID, ExitCode: -1, Infra: l.err}, nil
	}
	return l.pool.Run(ctx, spec)
}

func (l *lazyPool) close(ctx context.Context) {
	l.once.Do(func() {}) // no pool opens after this
	if l.pool != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_ = l.pool.Close(cctx)
	}
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
