package app

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
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

// Prediction is one line of SWE-bench's predictions format.
type Prediction struct {
	InstanceID string  `json:"instance_id"`
	Model      string  `json:"model_name_or_path"`
	Patch      *string `json:"model_patch"`      // nil: the harness's patch_is_None
	Sample     int     `json:"sample,omitempty"` // which of eval's replies (eval --score-samples)
}

// ScoreEntry is one instance of the score report: the harness report's
// fields, so reports compare one to one, derived from the verdict that
// carries every reward component.
type ScoreEntry struct {
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

// ScoreSummary is the report's head and what is printed.
type ScoreSummary struct {
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

type ScoreReport struct {
	Summary   ScoreSummary `json:"summary"`
	Instances []ScoreEntry `json:"instances"`
}

func ScoreOne(ctx context.Context, s *reward.Scorer, in *task.Instance, p Prediction, mode string) ScoreEntry {
	e := ScoreEntry{InstanceID: p.InstanceID, Sample: p.Sample, Model: p.Model, PatchIsNone: p.Patch == nil}
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

func Summarise(entries []ScoreEntry) ScoreSummary {
	s := ScoreSummary{Total: len(entries), Hacks: map[string]int{}, HacksUndone: map[string]int{}, InfraCauses: map[string]int{}}
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

// LoadScoreDataset loads every instance of cfg.Data.Source (all splits, no
// selection) and, for the embedded suite, materialises its repositories so
// that apply checks run against them.
func LoadScoreDataset(ctx context.Context, cfg config.Config) ([]task.Instance, map[string]string, error) {
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

// ReadPredictions reads a predictions file (.jsonl, or .json holding a list
// or an object keyed by instance id), or makes the gold or empty ones.
func ReadPredictions(arg string, insts []task.Instance) ([]Prediction, error) {
	switch arg {
	case "gold", "empty":
		out := make([]Prediction, len(insts))
		for i := range insts {
			patch := ""
			if arg == "gold" {
				patch = insts[i].Patch
			}
			out[i] = Prediction{InstanceID: insts[i].InstanceID, Model: arg, Patch: &patch}
		}
		return out, nil
	}
	data, err := os.ReadFile(arg)
	if err != nil {
		return nil, fmt.Errorf("score: predictions: %w", err)
	}
	data = bytes.TrimPrefix(data, task.BOM)
	trimmed := bytes.TrimSpace(data)
	var preds []Prediction
	switch {
	case strings.EqualFold(filepath.Ext(arg), ".json") && len(trimmed) > 0 && trimmed[0] == '[':
		if err := json.Unmarshal(trimmed, &preds); err != nil {
			return nil, fmt.Errorf("score: predictions %s: %w", arg, err)
		}
	case strings.EqualFold(filepath.Ext(arg), ".json") && len(trimmed) > 0 && trimmed[0] == '{':
		var byID map[string]Prediction
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
			var p Prediction
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

// ScoreOptions say how predictions are scored.
type ScoreOptions struct {
	Phase    string // the curriculum phase they are scored in
	Parallel int    // predictions scored at once
	// Events receives the pool's messages (hosts going down and back,
	// retries, masked evaluations) as they happen.
	Events event.Publisher
	// Step is called as each Prediction is scored (a progress bar).
	Step func()
}

// Score scores each Prediction against its instance of insts (repos: their
// repositories on the host, for the apply checks) as `swetui score` does:
// by the same reward.Scorer as training, over a pool of cfg's hosts that
// starts on the first container evaluation, so apply-only scoring against
// local repositories never needs Docker. Entries are in preds' order; ctx's
// error when it ended early.
func Score(ctx context.Context, cfg config.Config, insts []task.Instance, repos map[string]string, preds []Prediction, o ScoreOptions) ([]ScoreEntry, error) {
	pool := &lazyPool{open: func() (*sandbox.Pool, error) {
		opts := sandbox.FromConfig(cfg, "")
		opts.Events = o.Events
		return sandbox.NewPool(ctx, opts)
	}}
	defer pool.close(ctx)
	scorer := reward.NewScorer(cfg.Reward, &reward.PoolEvaluator{Pool: pool})
	defer scorer.Close()
	if scorer.Applier != nil {
		for id, path := range repos {
			scorer.Applier.RegisterInstance(id, path)
		}
		scorer.Applier.Fill = ImageFill(cfg, "", func(repo string) *task.Instance {
			for i := range insts {
				if insts[i].Repo == repo {
					return &insts[i]
				}
			}
			return nil
		})
	}
	par := max(o.Parallel, 1)
	scorer.Parallel = par
	byID := make(map[string]*task.Instance, len(insts))
	for i := range insts {
		byID[insts[i].InstanceID] = &insts[i]
	}
	entries := make([]ScoreEntry, len(preds))
	var wg sync.WaitGroup
	sem := make(chan struct{}, par)
	for i, p := range preds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			entries[i] = ScoreOne(ctx, scorer, byID[p.InstanceID], p, o.Phase)
			if o.Step != nil {
				o.Step()
			}
		}()
	}
	wg.Wait()
	return entries, ctx.Err()
}
