package app

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/internal/durable"
	"github.com/swetui/swetui/prompt"
	"github.com/swetui/swetui/reward"
	"github.com/swetui/swetui/task"
	"github.com/swetui/swetui/train"
	"github.com/swetui/swetui/verifier"
)

// VerifierFile is the verifier's measures beside its checkpoint.
const VerifierFile = "verifier.json"

// HeldoutTaskShare is the share of tasks whose examples the verifier never
// trains on (verifier.HeldOut).
const HeldoutTaskShare = 0.25

// VerifierReport is what `swetui verifier train` measured on the held-out
// tasks, kept in the checkpoint's verifier.json (an AUC without both
// labels is written -1: JSON holds no NaN).
type VerifierReport struct {
	Runs             []string `json:"runs"`
	Examples         int      `json:"examples"`
	Resolved         int      `json:"resolved"`
	Train            int      `json:"train_examples"`
	Heldout          int      `json:"heldout_examples"`
	TrainTasks       int      `json:"train_tasks"`
	HeldTasks        int      `json:"heldout_tasks"`
	HeldoutPositives int      `json:"heldout_resolved"`
	Steps            int      `json:"steps"`
	Device           string   `json:"device"` // where it trained
	YesToken         int      `json:"yes_token"`
	NoToken          int      `json:"no_token"`
	AUC              float64  `json:"auc"`
	BaselineAUC      float64  `json:"baseline_auc"`
	// AppliedAUC and BaselineAppliedAUC are the same among the held-out
	// patches that applied: what a gate before Docker has to tell apart
	// (a patch that does not apply needs no container to fail).
	AppliedAUC         float64            `json:"applied_auc"`
	BaselineAppliedAUC float64            `json:"baseline_applied_auc"`
	Temperature        float64            `json:"temperature"`
	ECE                float64            `json:"ece"`
	ECEFitted          float64            `json:"ece_fitted"`
	Threshold          verifier.Threshold `json:"threshold"`
}

// TrainVerifier fine-tunes the checkpoint model.init_ckpt names (a run's
// policy or its warm start: the policy's own kind of model, tokenizer and
// chat format) into a verifier of the docker-phase verdicts of runs, and
// writes it to out with its measures on the held-out tasks. The examples
// are balanced (the rarer label repeated); steps optimiser steps of
// sft.batch_size at sft.lr. publish gets the training's events.
func TrainVerifier(ctx context.Context, cfg config.Config, runs []string, out string, steps int, publish func(event.Event)) (VerifierReport, error) {
	rep := VerifierReport{Runs: runs, Steps: steps}
	ckpt := cfg.Model.InitCkpt
	if ckpt == "" {
		return rep, fmt.Errorf("verifier: model.init_ckpt must name the checkpoint it starts from (a run's policy or its warm start)")
	}
	if _, ok := HFFolder(ckpt); !ok {
		return rep, fmt.Errorf("verifier: %s holds no tokenizer.json (nor its policy/): not a checkpoint swetui or Hugging Face wrote", ckpt)
	}
	var exs []verifier.Example
	for _, r := range runs {
		e, err := verifier.Labels(r)
		if err != nil {
			return rep, err
		}
		exs = append(exs, e...)
	}
	trainSet, held := verifier.Split(exs, HeldoutTaskShare)
	rep.Examples, rep.Train, rep.Heldout = len(exs), len(trainSet), len(held)
	tasks := map[bool]map[string]bool{true: {}, false: {}}
	for _, e := range exs {
		if e.Resolved {
			rep.Resolved++
		}
		tasks[verifier.HeldOut(e.InstanceID, HeldoutTaskShare)][e.InstanceID] = true
	}
	rep.TrainTasks, rep.HeldTasks = len(tasks[false]), len(tasks[true])
	if rep.Resolved == 0 || rep.Resolved == len(exs) {
		return rep, fmt.Errorf("verifier: the %d docker verdicts of %v are all resolved or all not: nothing to tell apart", len(exs), runs)
	}

	cfg.Model.Tokenizer, cfg.Run.OutDir = "", out
	cfg.Reward.VerifierRefreshSteps = 0 // a verifier's training is no run with a refresh beside it
	ws, _, on, err := OpenSFT(ctx, cfg)
	if err != nil {
		return rep, fmt.Errorf("verifier: %w", err)
	}
	defer on.Close()
	rep.Device = on.Device
	issues, err := issuesOf(ctx, cfg)
	if err != nil {
		return rep, err
	}
	yes, no := ws.Tok.Encode(verifier.Yes), ws.Tok.Encode(verifier.No)
	if len(yes) == 0 || len(no) == 0 || yes[0] == no[0] {
		return rep, fmt.Errorf("verifier: the tokenizer of %s does not tell %q from %q by their first token", ckpt, verifier.Yes, verifier.No)
	}
	rep.YesToken, rep.NoToken = yes[0], no[0]
	question := func(e verifier.Example) ([]int, error) {
		issue, ok := issues[e.InstanceID]
		if !ok {
			return nil, fmt.Errorf("verifier: %s: instance %s is not in %s", e.Where, e.InstanceID, cfg.Data.Source)
		}
		q, err := verifier.Question(ws.Chat, issue, e)
		if err != nil {
			return nil, err
		}
		return prompt.Fit(ws.Tok.Encode(q), cfg.Model.Context, 8), nil
	}
	var examples []train.SFTExample
	for _, e := range verifier.Balance(trainSet) {
		q, err := question(e)
		if err != nil {
			return rep, err
		}
		examples = append(examples, train.SFTExample{InstanceID: e.InstanceID,
			Seq: train.Sequence{Prompt: q, Completion: ws.Tok.Encode(verifier.Answer(e.Resolved) + ws.Chat.EndOfTurn())}})
	}
	if _, err := train.RunSFT(ctx, train.SFTOptions{Steps: steps, BatchSize: cfg.SFT.BatchSize, Seed: cfg.Run.Seed, Context: cfg.Model.Context,
		MaxNewTokens: cfg.Model.Context}, on.Policy, examples, train.WarmupHooks{Publish: publish}); err != nil {
		return rep, fmt.Errorf("verifier: %w", err)
	}
	if err := ws.SaveTrained(on, out); err != nil {
		return rep, fmt.Errorf("verifier: %w", err)
	}

	// The held-out tasks: the verifier's logit, YES against NO, of each.
	logits := make([]float64, len(held))
	labels := make([]bool, len(held))
	var base []float64
	var feats [][]float64
	var trainLabels []bool
	for _, e := range trainSet {
		feats, trainLabels = append(feats, verifier.BaselineFeatures(e)), append(trainLabels, e.Resolved)
	}
	baseline := verifier.FitLogistic(feats, trainLabels)
	for i, e := range held {
		q, err := question(e)
		if err != nil {
			return rep, err
		}
		if logits[i], err = yesNoLogit(ctx, on.Policy, q, rep.YesToken, rep.NoToken); err != nil {
			return rep, err
		}
		labels[i] = e.Resolved
		if e.Resolved {
			rep.HeldoutPositives++
		}
		base = append(base, baseline.Score(verifier.BaselineFeatures(e)))
	}
	rep.AUC, rep.BaselineAUC = verifier.AUC(logits, labels), verifier.AUC(base, labels)
	var al, ab []float64
	var alab []bool
	for i, e := range held {
		if e.Applied {
			al, ab, alab = append(al, logits[i]), append(ab, base[i]), append(alab, labels[i])
		}
	}
	rep.AppliedAUC, rep.BaselineAppliedAUC = verifier.AUC(al, alab), verifier.AUC(ab, alab)
	rep.Temperature = 1
	if len(held) > 0 {
		rep.Temperature = verifier.FitTemperature(logits, labels)
	}
	raw, fitted := make([]float64, len(held)), make([]float64, len(held))
	for i, z := range logits {
		raw[i], fitted[i] = verifier.Sigmoid(z), verifier.Sigmoid(z/rep.Temperature)
	}
	rep.ECE, rep.ECEFitted = verifier.ECE(raw, labels, 10), verifier.ECE(fitted, labels, 10)
	rep.Threshold = verifier.BestThreshold(fitted, labels)
	kept := rep
	kept.AUC, kept.BaselineAUC = jsonSafe(rep.AUC), jsonSafe(rep.BaselineAUC)
	kept.AppliedAUC, kept.BaselineAppliedAUC = jsonSafe(rep.AppliedAUC), jsonSafe(rep.BaselineAppliedAUC)
	b, err := json.MarshalIndent(kept, "", "  ")
	if err != nil {
		return rep, err
	}
	return rep, durable.ReplaceFile(filepath.Join(out, VerifierFile), append(b, '\n'))
}

// jsonSafe is x, or -1 for a NaN (an AUC without both labels), which JSON
// cannot hold.
func jsonSafe(x float64) float64 {
	if math.IsNaN(x) {
		return -1
	}
	return x
}

// issuesOf maps every instance of cfg's dataset, whatever its split, to
// its problem statement.
func issuesOf(ctx context.Context, cfg config.Config) (map[string]string, error) {
	c := cfg
	c.Data.Split, c.Data.Include, c.Data.Exclude, c.Data.TrainLimit = task.SplitAll, nil, nil, 0
	all, err := task.Load(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("verifier: dataset %s: %w", c.Data.Source, err)
	}
	out := make(map[string]string, len(all))
	for _, in := range all {
		out[in.InstanceID] = in.ProblemStatement
	}
	return out, nil
}

// Verifier is a trained verifier opened to score candidates; one scores
// at a time (its model's passes are not shared).
type Verifier struct {
	Report VerifierReport
	ws     *Workspace
	on     *Opened
	mu     sync.Mutex
}

// Verify implements serve.Verifier: each patch (a reply or a diff, as
// /v1/score takes it) is read as the scorer reads it and scored.
func (v *Verifier) Verify(ctx context.Context, inst *task.Instance, patches []string) ([]float64, error) {
	out := make([]float64, len(patches))
	for i, p := range patches {
		s, err := v.Score(ctx, inst.ProblemStatement, verifier.Example{InstanceID: inst.InstanceID, Patch: reward.Extract(p).Diff})
		if err != nil {
			return nil, err
		}
		out[i] = s
	}
	return out, nil
}

// OpenVerifier opens the verifier `swetui verifier train` wrote to dir, on
// model.device. A folder without verifier.json, or whose tokenizer does
// not give the answers the tokens it was trained with, is an error naming
// the file.
func OpenVerifier(ctx context.Context, cfg config.Config, dir string) (*Verifier, error) {
	path := filepath.Join(dir, VerifierFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("verifier: %w (a folder `swetui verifier train` wrote holds it)", err)
	}
	v := &Verifier{}
	if err := json.Unmarshal(b, &v.Report); err != nil {
		return nil, fmt.Errorf("verifier: %s: %w", path, err)
	}
	cfg.Model.InitCkpt, cfg.Model.Tokenizer, cfg.Run.OutDir = dir, "", dir
	if v.ws, err = Open(ctx, cfg, task.SplitTrain); err != nil {
		return nil, fmt.Errorf("verifier: %w", err)
	}
	yes, no := v.ws.Tok.Encode(verifier.Yes), v.ws.Tok.Encode(verifier.No)
	if len(yes) == 0 || len(no) == 0 || yes[0] != v.Report.YesToken || no[0] != v.Report.NoToken {
		return nil, fmt.Errorf("verifier: %s: trained with %s and %s as tokens %d and %d, which its folder's tokenizer does not give: built for another tokenizer",
			path, verifier.Yes, verifier.No, v.Report.YesToken, v.Report.NoToken)
	}
	v.ws.SampleOnly = 1
	m, err := v.ws.NewModel()
	if err != nil {
		return nil, err
	}
	host, err := v.ws.NewPolicy(m, cfg.Optim.LR, 1)
	if err != nil {
		return nil, err
	}
	if v.on, err = v.ws.OpenPolicy(ctx, host, nil); err != nil {
		return nil, err
	}
	return v, nil
}

// Score is the verifier's probability that e resolves the issue, at its
// fitted temperature.
func (v *Verifier) Score(ctx context.Context, issue string, e verifier.Example) (float64, error) {
	q, err := verifier.Question(v.ws.Chat, issue, e)
	if err != nil {
		return 0, err
	}
	ids := prompt.Fit(v.ws.Tok.Encode(q), v.ws.Cfg.Model.Context, 8)
	v.mu.Lock()
	defer v.mu.Unlock()
	z, err := yesNoLogit(ctx, v.on.Policy, ids, v.Report.YesToken, v.Report.NoToken)
	if err != nil {
		return 0, err
	}
	t := v.Report.Temperature
	if t <= 0 {
		t = 1
	}
	return verifier.Sigmoid(z / t), nil
}

// yesNoLogit is the verifier's logit of question q: the logprob of the
// YES token against the NO token at the answer's place. One question a
// call: a sample-only device plan counts one prompt's prefill.
func yesNoLogit(ctx context.Context, pol train.Policy, q []int, yes, no int) (float64, error) {
	lp, err := pol.Logprobs(ctx, []train.Sequence{{Prompt: q, Completion: []int{yes}}, {Prompt: q, Completion: []int{no}}})
	if err != nil {
		return 0, fmt.Errorf("verifier: %w", err)
	}
	return lp[0][0] - lp[1][0], nil
}

// Close frees the verifier's device, once a score under way is done.
func (v *Verifier) Close() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.on.Close()
}

// BestOfN is best-of-N's measure: of the tasks, how many the first sample
// resolves, how many the verifier's pick does, and how many any sample
// does (the oracle).
type BestOfN struct {
	Tasks, First, Picked, Oracle int
}

// MeasureBestOfN counts BestOfN from every sample's score entry and each
// task's pick (the sample the verifier ranked first).
func MeasureBestOfN(entries []ScoreEntry, picks map[string]int) BestOfN {
	resolved := map[string]map[int]bool{}
	for _, e := range entries {
		if resolved[e.InstanceID] == nil {
			resolved[e.InstanceID] = map[int]bool{}
		}
		resolved[e.InstanceID][e.Sample] = e.Resolved
	}
	var b BestOfN
	for id, pick := range picks {
		b.Tasks++
		r := resolved[id]
		if r[0] {
			b.First++
		}
		if r[pick] {
			b.Picked++
		}
		for _, ok := range r {
			if ok {
				b.Oracle++
				break
			}
		}
	}
	return b
}
