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
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/reward"
	"github.com/swetui/swetui/rollout"
	"github.com/swetui/swetui/sandbox"
	"github.com/swetui/swetui/task"
	"github.com/swetui/swetui/verifier"
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
	Samples     int // replies per task for the well-formed rate; the first is the app.Prediction
	// ScoreSamples also scores every reply, not only the app.Prediction: rates
	// over Samples replies a task swing far less than over one.
	ScoreSamples bool
	// Verifier, with --select verifier, names the verifier whose pick of
	// the samples is the task's prediction.
	Verifier string
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
	samples := fs.Int("samples", 1, "replies sampled per task for the well-formed rate; the first is the app.Prediction")
	scoreSamples := fs.Bool("score-samples", false, "also score every reply in --mode (report: <out> with .samples.report.json)")
	sel := fs.String("select", "first", "which sample is the prediction: first, or verifier (the one --verifier ranks first; every sample is scored)")
	ver := fs.String("verifier", "", "a verifier's folder (swetui verifier train), for --select verifier")
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
	switch {
	case *sel != "first" && *sel != "verifier":
		return evalOptions{}, UsageErrorf("--select %q: want first or verifier", *sel)
	case (*sel == "verifier") != (*ver != ""):
		return evalOptions{}, UsageErrorf("--select verifier and --verifier DIR go together")
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
		Temperature: *temperature, Samples: *samples, ScoreSamples: *scoreSamples || *ver != "", Verifier: *ver}, nil
}

// evalRun implements `swetui eval`: --samples rollouts a task of a split
// with a checkpoint (replies, or in agent mode trajectories, each in its
// own session, written beside the predictions), the first one's diff the
// task's prediction in SWE-bench's format (with --score-samples every
// one's is scored too), then scored as `swetui score` scores them.
func evalRun(ctx context.Context, env Env, o evalOptions) error {
	cfg := o.Config
	cfg.Sample.Temperature = o.Temperature
	runID := "eval-" + time.Now().Format("20060102-150405-") + sandbox.NewNonce()[:6]
	ev, err := app.OpenEval(ctx, cfg, o.Ckpt, o.Split, o.Samples, runID)
	if err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	defer ev.Close()
	ws := ev.Workspace
	fmt.Fprintf(env.Stderr, "eval: sampling on %s; prompts in %s\n", ev.Policy.Device, ws.Chat.Name())
	if n := app.ContextNote(ev.Model); n != "" {
		fmt.Fprintf(env.Stderr, "eval: %s\n", n)
	}
	if ev.Policy.Plan != "" {
		fmt.Fprintf(env.Stderr, "memory plan:\n%s", ev.Policy.Plan)
	}
	base := strings.TrimSuffix(o.Out, filepath.Ext(o.Out))
	if err := os.MkdirAll(filepath.Dir(o.Out), 0o755); err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	preds, err := os.Create(o.Out)
	if err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	defer preds.Close()
	trajPath := base + ".trajectories.jsonl"
	var trajs *os.File // opened at the first trajectory
	defer func() {
		if trajs != nil {
			trajs.Close()
		}
	}()
	var v *app.Verifier
	if o.Verifier != "" {
		if v, err = app.OpenVerifier(ctx, cfg, o.Verifier); err != nil {
			return fmt.Errorf("eval: %w", err)
		}
		defer v.Close()
	}
	picks := map[string]int{}
	enc := json.NewEncoder(preds)
	bar := newProgress(env, len(ws.Tasks))
	valid := 0
	ends := map[event.End]int{}
	var all []app.Prediction
	name := filepath.Base(filepath.Clean(o.Ckpt))
	err = ev.Predict(ctx, o.Samples, func(in *task.Instance, gr *rollout.Group) error {
		bar.step()
		for i, r := range gr.Rollouts {
			if r.Agent != nil {
				if trajs == nil {
					if trajs, err = os.Create(trajPath); err != nil {
						return err
					}
				}
				ends[r.Agent.End]++
				line, err := json.Marshal(trajectoryLine{InstanceID: in.InstanceID, Sample: i, Trajectory: r.Agent,
					Tokens: len(gr.Prompt) + len(r.Tokens), Diff: r.Diff})
				if err != nil {
					return err
				}
				if _, err := trajs.Write(append(line, '\n')); err != nil {
					return err
				}
			} else if reward.Extract(r.Text).Valid() {
				valid++
			}
			if o.ScoreSamples {
				all = append(all, app.Prediction{InstanceID: in.InstanceID, Model: name, Patch: &gr.Rollouts[i].Diff, Sample: i})
			}
		}
		pick, best := 0, -1.0
		for i, r := range gr.Rollouts {
			if v == nil {
				break
			}
			p, err := v.Score(ctx, in.ProblemStatement, verifier.Example{InstanceID: in.InstanceID, Patch: r.Diff, Summary: verifier.Summary(r.Agent)})
			if err != nil {
				return err
			}
			if p > best {
				pick, best = i, p
			}
		}
		picks[in.InstanceID] = pick
		return enc.Encode(app.Prediction{InstanceID: in.InstanceID, Model: name, Patch: &gr.Rollouts[pick].Diff})
	})
	bar.done()
	if err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	closeErr := preds.Close()
	if trajs != nil {
		closeErr = errors.Join(closeErr, trajs.Close())
	}
	if closeErr != nil {
		return fmt.Errorf("eval: %w", closeErr)
	}
	one, many := "reply", "replies"
	if trajs != nil {
		one, many = "trajectory", "trajectories"
		var said []string
		for _, e := range event.TrajectoryEnds {
			if ends[e] > 0 {
				said = append(said, fmt.Sprintf("%s %d", e, ends[e]))
			}
		}
		fmt.Fprintf(env.Stdout, "eval: %d tasks x %d trajectories in agent mode (%s) at temperature %.2f; predictions: %s, trajectories: %s\n",
			len(ws.Tasks), o.Samples, strings.Join(said, ", "), o.Temperature, o.Out, trajPath)
	} else {
		// The score below re-reads each written patch as a app.Prediction,
		// which can find a well-formed diff inside a malformed reply: its
		// syntax-valid count may be higher than this one, which is what the
		// training reward sees.
		n := len(ws.Tasks) * o.Samples
		fmt.Fprintf(env.Stdout, "eval: %d tasks x %d samples, %d replies with a well-formed diff (%.0f%%) at temperature %.2f; predictions: %s\n",
			len(ws.Tasks), o.Samples, valid, 100*float64(valid)/float64(max(1, n)), o.Temperature, o.Out)
	}
	report := o.Report
	if report == "" {
		report = base + ".report.json"
	}
	if err := scoreRun(ctx, env, scoreOptions{Config: o.Config, Predictions: o.Out, Phase: o.Phase, Out: report}); err != nil || !o.ScoreSamples {
		return err
	}
	fmt.Fprintf(env.Stdout, "every %s:\n", one)
	var every []app.ScoreEntry
	if err := scoreRun(ctx, env, scoreOptions{Config: o.Config, Predictions: fmt.Sprintf("%s, %d %s a task", o.Out, o.Samples, many),
		preds: all, Phase: o.Phase, Out: base + ".samples.report.json", scored: &every}); err != nil || v == nil {
		return err
	}
	b := app.MeasureBestOfN(every, picks)
	pct := func(n int) float64 { return 100 * float64(n) / float64(max(b.Tasks, 1)) }
	fmt.Fprintf(env.Stdout, "best of %d by the verifier on %d tasks, resolved: the first sample %d (%.1f%%), the verifier's pick %d (%.1f%%), any sample %d (%.1f%%)\n",
		o.Samples, b.Tasks, b.First, pct(b.First), b.Picked, pct(b.Picked), b.Oracle, pct(b.Oracle))
	return nil
}

// trajectoryLine is one line of agent mode's <out>.trajectories.jsonl: the
// record rollouts.jsonl keeps of a trajectory (end, detail, turns), with
// its task, its length in tokens and its diff.
type trajectoryLine struct {
	InstanceID string `json:"instance_id"`
	Sample     int    `json:"sample,omitempty"` // which of the task's --samples
	*event.Trajectory
	Tokens int    `json:"tokens"`
	Diff   string `json:"diff"`
}
