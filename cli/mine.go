package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/swetui/swetui/app"
	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/mine"
	"github.com/swetui/swetui/reward"
	"github.com/swetui/swetui/task"
)

// mineOptions are `swetui mine`'s inputs.
type mineOptions struct {
	Config        config.Config // [sandbox] runs the verification, [prepare] base_image builds its image
	Repo          string        // the git folder
	Name          string        // owner/name
	Out           string
	Max           int // instances kept at most; 0 = no bound
	MaxCandidates int // candidates verified at most; 0 = no bound
	History       string
	EvalTimeout   time.Duration
	DryRun        bool
}

func newMineOptions(env Env, args []string) (mineOptions, error) {
	fs := newFlags(env, "mine")
	load := configFlag(fs, env)
	repo := fs.String("repo", "", "git folder (a clone, bare or not) whose history is mined (required)")
	name := fs.String("name", "", "the repository as owner/name (default: the folder's name read as owner__name)")
	out := fs.String("out", "tasks.jsonl", "dataset to write (.jsonl)")
	maxKept := fs.Int("max", 0, "stop after keeping N instances (0: no bound)")
	maxCand := fs.Int("max-candidates", 0, "verify at most N candidate commits (0: no bound)")
	history := fs.String("history", mine.FirstParent, "commits walked: first-parent (the main line from HEAD) or all (every non-merge commit HEAD reaches)")
	timeout := fs.Duration("eval-timeout", 2*time.Minute, "deadline of one test run in the container")
	dry := fs.Bool("dry-run", false, "list the candidate commits and how each is split, touching no Docker host")
	cfg, _, err := parseAndLoad(fs, load, args)
	if err != nil {
		return mineOptions{}, err
	}
	o := mineOptions{Config: cfg, Repo: *repo, Name: *name, Out: *out, Max: *maxKept, MaxCandidates: *maxCand,
		History: *history, EvalTimeout: *timeout, DryRun: *dry}
	switch {
	case o.Repo == "":
		return o, UsageErrorf("--repo is required (a git folder)")
	case o.Max < 0 || o.MaxCandidates < 0:
		return o, UsageErrorf("--max and --max-candidates want 0 or more")
	case o.EvalTimeout <= 0:
		return o, UsageErrorf("--eval-timeout %s: want a positive duration", o.EvalTimeout)
	case o.History != mine.FirstParent && o.History != mine.AllCommits:
		return o, UsageErrorf("--history %q: want %s or %s", o.History, mine.FirstParent, mine.AllCommits)
	}
	if o.Name == "" {
		base := strings.TrimSuffix(filepath.Base(filepath.Clean(o.Repo)), ".git")
		owner, nm, ok := strings.Cut(base, "__")
		if !ok || owner == "" || nm == "" {
			return o, UsageErrorf("--name is required: %s is not named owner__name", o.Repo)
		}
		o.Name = owner + "/" + nm
	}
	if owner, nm, ok := strings.Cut(o.Name, "/"); !ok || owner == "" || nm == "" || strings.Contains(nm, "/") {
		return o, UsageErrorf("--name %q: want owner/name", o.Name)
	}
	if _, known := task.SpecFor(o.Name, ""); known {
		return o, UsageErrorf("--name %s: the spec table knows this repository (its instances run in the official images); mine builds its own", o.Name)
	}
	if len(task.InstallCommands(cfg.Prepare, o.Name)) > 0 {
		return o, UsageErrorf("prepare.install names %s: mine verifies in the base image with the repository on the path, without install commands", o.Name)
	}
	return o, nil
}

// mineRun implements `swetui mine`: scan the history for commits that
// change tests and source, build an image of their parents, run each
// candidate's test files before and after its fix in the Docker pool, and
// write those with a FAIL_TO_PASS test as a dataset.
func mineRun(ctx context.Context, env Env, o mineOptions) error {
	start := time.Now()
	scan, err := mine.Scan(ctx, o.Repo, mine.Options{History: o.History})
	if err != nil {
		return err
	}
	sum := mine.Summary{Commits: scan.Commits, Candidates: len(scan.Candidates), Skipped: scan.Skipped}
	fmt.Fprintf(env.Stderr, "%s: %d non-merge commits (%s), %d candidates\n", o.Name, scan.Commits, o.History, len(scan.Candidates))
	cands := scan.Candidates
	if o.MaxCandidates > 0 && len(cands) > o.MaxCandidates {
		cands = cands[:o.MaxCandidates]
	}
	recs := make([]mine.Record, len(cands))
	for i, c := range cands {
		recs[i] = mine.NewRecord(o.Name, c)
	}
	if o.DryRun {
		for i, r := range recs {
			fmt.Fprintf(env.Stdout, "%s  %s  %s  patch: %s  tests: %s", r.InstanceID, r.CreatedAt[:10], subject(r.ProblemStatement),
				strings.Join(task.Paths(task.PatchFiles(r.Patch)), " "), strings.Join(task.Paths(task.PatchFiles(r.TestPatch)), " "))
			if p := cands[i].Packaging; len(p) > 0 {
				fmt.Fprintf(env.Stdout, "  packaging: %s", strings.Join(p, " "))
			}
			fmt.Fprintln(env.Stdout)
		}
		fmt.Fprint(env.Stdout, sum.String())
		return nil
	}
	if len(recs) == 0 {
		fmt.Fprint(env.Stdout, sum.String())
		return writeRecords(o.Out, nil)
	}

	cfg := o.Config
	var commits []string
	for _, r := range recs {
		commits = append(commits, r.BaseCommit)
	}
	pool, image, err := app.OpenMinePool(ctx, cfg, o.Name, o.Repo, commits, prepareHooks(env), &messagePrinter{w: env.Stderr, start: time.Now()})
	if err != nil {
		return err
	}
	defer app.ClosePool(ctx, pool)
	ev := &reward.PoolEvaluator{Pool: pool, Timeout: o.EvalTimeout}

	// Candidates are verified a batch of sandbox.workers at a time, newest
	// first; the kept ones are the first --max in that order.
	kept, err := mine.VerifyAll(ctx, ev, recs, image, cfg.Sandbox.Workers, o.Max, func(i int, r mine.Record, out mine.Outcome, keep bool) {
		sum.Verified++
		line := fmt.Sprintf("[%d/%d] %s %s (%d eval(s), %.1fs): ", i+1, len(recs), r.InstanceID, subject(r.ProblemStatement),
			out.Evals, out.Duration.Seconds())
		switch {
		case keep:
			sum.Kept++
			if len(cands[i].Packaging) > 0 {
				sum.Packaging++
			}
			line += fmt.Sprintf("kept, %d FAIL_TO_PASS, %d PASS_TO_PASS", len(out.FailToPass), len(out.PassToPass))
			if len(cands[i].Packaging) > 0 {
				line += ", patch changes " + strings.Join(cands[i].Packaging, " ")
			}
			if len(out.Undone) > 0 {
				line += ", gold patch flagged " + strings.Join(out.Undone, " ") + " (undone by the reset, not penalised)"
			}
		case out.Kept():
			line += "past --max"
			sum.Verified--
		default:
			sum.Skipped[out.Skip]++
			line += "skipped: " + out.Skip
			if out.Detail != "" {
				line += " (" + truncate(out.Detail, 120) + ")"
			}
		}
		fmt.Fprintln(env.Stderr, line)
	})
	if err != nil {
		return fmt.Errorf("mine: %w", err)
	}
	if err := writeRecords(o.Out, kept); err != nil {
		return err
	}
	fmt.Fprint(env.Stdout, sum.String())
	fmt.Fprintf(env.Stdout, "wrote %d instance(s) to %s in %s\n", len(kept), o.Out, time.Since(start).Round(time.Second))
	return nil
}

// writeRecords writes the dataset, one JSON object a line, replacing path
// only once it is whole.
func writeRecords(path string, recs []mine.Record) error {
	var b strings.Builder
	for _, r := range recs {
		line, err := json.Marshal(r)
		if err != nil {
			return fmt.Errorf("mine: %s: %w", r.InstanceID, err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("mine: write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return errors.Join(fmt.Errorf("mine: write %s: %w", path, err), os.Remove(tmp))
	}
	return nil
}

func subject(msg string) string {
	s, _, _ := strings.Cut(strings.TrimSpace(msg), "\n")
	return truncate(s, 60)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
