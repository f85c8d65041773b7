package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/history"
	"github.com/swetui/swetui/internal/durable"
	"github.com/swetui/swetui/model"
	"github.com/swetui/swetui/policy"
	"github.com/swetui/swetui/train"
	"github.com/swetui/swetui/warmstart"
)

// SFTStage is a run's warm start (train.Warmup): it loads <out>/sft when an
// earlier run finished it, continues <out>/sft-partial when one was cut
// short, else trains from scratch; then the reference becomes the warmed-up
// policy and GRPO starts with a fresh optimiser. While it trains its state
// is saved every sft.save_every steps and at stop.
type SFTStage struct {
	ws     *Workspace
	pol    *policy.Model // GRPO's policy: it shares the weights
	ref    *policy.ModelReference
	sftPol *policy.Model // the warm start's own optimiser and schedule
	done   int           // steps finished, saved or not
	saved  int           // steps in the partial checkpoint
	loaded bool          // a finished warm start was found
	// dev, when set, is GRPO's policy on model.device: the warm start
	// trains there with its own optimiser and schedule (policy.Device's
	// BeginStage: no second copy of the weights on the device), and GRPO
	// goes on from the weights it leaves there (Restart).
	dev   *policy.Device
	where string // dev's device, for messages
}

// PartialState is the partial checkpoint's state.json.
type PartialState struct {
	Step  int `json:"step"`
	Steps int `json:"steps"`
	// Init is the model.init_ckpt `swetui sft` started from ("" for a
	// fresh model, as in a run's warm start).
	Init string `json:"init,omitempty"`
}

const PartialStateFile = "state.json"

func (ws *Workspace) PartialSFTDir() string { return history.PartialOf(ws.SFTDir()) }

// NewSFTStage finds where the warm start stands.
func NewSFTStage(ws *Workspace, pol *policy.Model, ref *policy.ModelReference) (*SFTStage, error) {
	sftPol, err := ws.NewPolicy(pol.Model, ws.Cfg.SFT.LR, ws.Cfg.SFT.Steps)
	if err != nil {
		return nil, err
	}
	s := &SFTStage{ws: ws, pol: pol, ref: ref, sftPol: sftPol}
	if _, err := os.Stat(filepath.Join(ws.SFTDir(), "config.json")); err == nil {
		s.loaded, s.done = true, ws.Cfg.SFT.Steps
		return s, nil
	}
	st, ok, err := ReadPartialSFT(ws.PartialSFTDir())
	if err != nil {
		return nil, err
	}
	if !ok || st.Steps != ws.Cfg.SFT.Steps || st.Init != "" {
		// None, or another schedule (its learning rate does not continue
		// this one), or `swetui sft` from another model.
		return s, nil
	}
	if err := sftPol.Load(context.Background(), ws.PartialSFTDir()); err != nil {
		return nil, fmt.Errorf("warm start %s: %w (remove it to start the warm start afresh)", ws.PartialSFTDir(), err)
	}
	s.done, s.saved = st.Step, st.Step
	return s, nil
}

// Done implements train.Warmup.
func (s *SFTStage) Done() int { return s.done }

// Run implements train.Warmup.
func (s *SFTStage) Run(ctx context.Context, h train.WarmupHooks) error {
	ws := s.ws
	dir := ws.SFTDir()
	if s.loaded {
		m, err := LoadModel(dir, ws.Tok)
		if err != nil {
			return fmt.Errorf("sft checkpoint %s: %w", dir, err)
		}
		if err := s.pol.Model.CopyWeightsFrom(m); err != nil {
			return fmt.Errorf("sft checkpoint %s: %w", dir, err)
		}
		h.Publish(event.StageChanged{Stage: "sft", Progress: 1, Detail: "loaded " + dir})
		return s.finish()
	}
	if s.done > 0 {
		h.Publish(event.Message{Level: event.Info, Time: time.Now(), Text: fmt.Sprintf("warm start: continuing from step %d of %d (%s)", s.done, ws.Cfg.SFT.Steps, ws.PartialSFTDir())})
	}
	where := "gorgonia on the CPU"
	if s.dev != nil {
		where = s.where
	}
	h.Publish(event.Message{Level: event.Info, Time: time.Now(), Text: "warm start: trains on " + where})
	every := ws.Cfg.SFT.SaveEvery
	after := h.AfterStep
	h.AfterStep = func(ctx context.Context, ev event.SFTStep) error {
		s.done = ev.Step
		if every > 0 && ev.Step%every == 0 && ev.Step < ev.Steps {
			if err := s.Save(ctx); err != nil {
				h.Publish(event.Message{Level: event.Error, Time: time.Now(), Text: err.Error()})
			}
		}
		if after != nil {
			return after(ctx, ev)
		}
		return nil
	}
	on := &Opened{Policy: s.sftPol, Store: s.sftPol, Host: s.sftPol, Device: "cpu (gorgonia)",
		Sync: func() error { return nil }, Close: func() {}}
	end := func() {}
	if s.dev != nil {
		// A continued warm start's weights and moments go up with it; a
		// fresh one trains the weights already there.
		var from *model.Model
		if s.done > 0 {
			from = s.sftPol.Model
		}
		var err error
		if end, err = s.dev.BeginStage(from, s.sftPol.Optim, s.sftPol.Schedule); err != nil {
			return fmt.Errorf("warm start on %s: %w", s.where, err)
		}
		on = &Opened{Policy: s.dev, Store: s.dev, Host: s.sftPol, Dev: s.dev, Device: s.where, Sync: s.sync, Close: func() {}}
	}
	res, err := ws.SFT(ctx, on, dir, s.done, h)
	end()
	if err != nil {
		return err
	}
	os.RemoveAll(ws.PartialSFTDir())
	heldout := ""
	if k := len(res.Heldout); k > 0 {
		heldout = fmt.Sprintf(" (held-out %.3f)", res.Heldout[k-1].NLL)
	}
	if n := len(res.Losses); n > 0 {
		h.Publish(event.Message{Level: event.Info, Time: time.Now(), Text: fmt.Sprintf("sft: %d steps on %d examples (%d synthetic; %d gold patches too long), loss %.3f -> %.3f%s, saved %s",
			ws.Cfg.SFT.Steps, res.Used, res.Synthetic, res.Skipped.TooLong, res.Losses[0], res.Losses[n-1], heldout, dir)})
	}
	return s.finish()
}

// sync brings the device's warm-start weights and moments back into
// sftPol (for its checkpoints), whichever optimiser the device holds now.
func (s *SFTStage) sync() error { return s.dev.SyncInto(s.sftPol.Model, s.sftPol.Optim) }

// finish makes the warmed-up policy the reference too, where there is one
// (none when grpo.kl_coef is 0), and gives GRPO fresh moments. On a device
// a warm start trained there stays there (Restart copies the weights to
// the reference on the device); one loaded from its folder goes up.
func (s *SFTStage) finish() error {
	if s.ref != nil {
		if err := s.ref.Model.CopyWeightsFrom(s.pol.Model); err != nil {
			return err
		}
	}
	if s.dev == nil {
		return nil
	}
	if !s.loaded {
		return s.dev.Restart()
	}
	if err := s.dev.LoadModel(s.pol.Model, s.dev.Optim()); err != nil {
		return err
	}
	return s.dev.UploadReference(s.pol.Model)
}

// Save implements train.Warmup: the warm start's weights, optimiser and
// step go to <out>/sft-partial, replaced atomically.
func (s *SFTStage) Save(ctx context.Context) error {
	if s.loaded || s.done == s.saved || s.done >= s.ws.Cfg.SFT.Steps {
		return nil
	}
	if s.dev != nil {
		if err := s.sync(); err != nil {
			return fmt.Errorf("save warm start: %w", err)
		}
	}
	if err := SavePartialSFT(ctx, s.sftPol, s.ws.PartialSFTDir(), PartialState{Step: s.done, Steps: s.ws.Cfg.SFT.Steps}); err != nil {
		return err
	}
	s.saved = s.done
	return nil
}

// SavePartialSFT writes an unfinished warm start (store's weights, moments
// and sampler state, and st) to dir, replacing what was there only once the
// new one is complete.
func SavePartialSFT(ctx context.Context, store train.Store, dir string, st PartialState) error {
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("save warm start: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+"-")
	if err != nil {
		return fmt.Errorf("save warm start: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := store.Save(ctx, tmp); err != nil {
		return fmt.Errorf("save warm start: %w", err)
	}
	state, _ := json.Marshal(st)
	if err := durable.WriteFile(filepath.Join(tmp, PartialStateFile), state); err != nil {
		return fmt.Errorf("save warm start: %w", err)
	}
	if err := durable.SyncDir(tmp); err != nil {
		return fmt.Errorf("save warm start: %w", err)
	}
	if err := durable.ReplaceDir(tmp, dir); err != nil {
		return fmt.Errorf("save warm start: %w", err)
	}
	return nil
}

// ReadPartialSFT reads dir's PartialState; ok is false when there is none.
func ReadPartialSFT(dir string) (st PartialState, ok bool, err error) {
	data, err := os.ReadFile(filepath.Join(dir, PartialStateFile))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return st, false, nil
	case err != nil:
		return st, false, fmt.Errorf("warm start %s: %w", dir, err)
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return st, false, fmt.Errorf("warm start %s: %s: %w", dir, PartialStateFile, err)
	}
	return st, true, nil
}

var _ train.Warmup = (*SFTStage)(nil)

// UseShippedWarmStart puts the shipped warm start in <out>/sft when the run
// can use it (its tokenizer was taken already) and no warm start is there,
// and says so; or says why a run on the embedded suite trains its own.
func (ws *Workspace) UseShippedWarmStart() (string, error) {
	if ws.Shipped == nil {
		if ws.NotShipped != "" {
			return fmt.Sprintf("warm start: training one (the shipped one does not fit: %s)", ws.NotShipped), nil
		}
		return "", nil
	}
	dir := ws.SFTDir()
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err == nil {
		return "", nil
	}
	if _, err := os.Stat(ws.PartialSFTDir()); err == nil {
		return "", nil // an interrupted warm start of this run's own: it continues
	}
	if err := warmstart.WriteTo(dir, *ws.Shipped); err != nil {
		return "", err
	}
	p := ws.Shipped
	return fmt.Sprintf("warm start: the one shipped for the embedded suite (%d steps on its %d training tasks, made at commit %s; sft.shipped=false trains one instead), in %s",
		p.SFTSteps, len(p.TrainInstances), p.Commit, dir), nil
}

// SFT runs the supervised warm start on pol (from step start, when an
// earlier one was cut short) and writes its checkpoint to dir.
func (ws *Workspace) SFT(ctx context.Context, pol *Opened, dir string, start int, h train.WarmupHooks) (train.SFTResult, error) {
	c := ws.Cfg
	var examples, heldout []train.SFTExample
	var skipped train.SFTSkips
	var err error
	if c.Rollout.Mode == config.RolloutAgent {
		// Agent mode's warm start learns the moves from a scripted expert's
		// trajectories; no held-out measure.
		var note string
		if examples, note, err = ws.agentSFTExamples(ctx); err != nil {
			return train.SFTResult{}, err
		}
		if h.Publish != nil {
			h.Publish(event.Message{Level: event.Info, Time: time.Now(), Text: note})
		}
	} else {
		examples, skipped, err = train.SFTExamples(ctx, ws.Tasks, ws.Prompter, ws.Tok, train.SFTData{
			Context: c.Model.Context, MaxNew: c.Sample.MaxNewTokens, Synthetic: c.SFT.SyntheticPerTask, Seed: c.Run.Seed,
			ContextLines: c.SFT.ContextLines, RenameFrac: c.SFT.RenameFrac, Chat: ws.Chat})
		if err != nil {
			return train.SFTResult{}, err
		}
		if h.Publish != nil {
			lvl, text := KeptGoldText(skipped, c.Sample.MaxNewTokens)
			h.Publish(event.Message{Level: lvl, Time: time.Now(), Text: text})
		}
		if heldout, err = ws.HeldoutExamples(ctx); err != nil {
			return train.SFTResult{}, err
		}
	}
	res, err := train.RunSFT(ctx, train.SFTOptions{Steps: c.SFT.Steps, BatchSize: c.SFT.BatchSize, Seed: c.Run.Seed,
		Context: c.Model.Context, MaxNewTokens: c.Sample.MaxNewTokens, PromptWeight: c.SFT.PromptLossWeight,
		Heldout: heldout, HeldoutEvery: c.SFT.HeldoutEvery, Start: start}, pol.Policy, examples, h)
	res.Skipped = skipped
	if err != nil {
		return res, err
	}
	return res, ws.SaveTrained(pol, dir)
}

// SaveTrained writes pol's weights, as trained, to dir: a checkpoint
// folder like any other (with LoRA, the adapter beside its base's name).
func (ws *Workspace) SaveTrained(pol *Opened, dir string) error {
	if err := pol.Sync(); err != nil {
		return fmt.Errorf("the weights back from %s: %w", pol.Device, err)
	}
	if l := pol.Host.LoRA(); l != nil {
		return model.SaveAdapter(dir, model.Adapter{LoRA: l, BaseModel: pol.Host.BasePath(), Tokenizer: ws.Tok, Files: pol.Host.Format.Files})
	}
	ck := model.Checkpoint{Model: pol.Host.Model, Tokenizer: ws.Tok, Format: pol.Host.Format}
	if pol.Dev != nil && !pol.Host.Model.HasWeights() { // streamed from the device a tensor at a time
		ck.ReadWeight = pol.Dev.ReadWeight
	}
	return model.Save(dir, ck)
}

// KeptGoldText says how many gold patches the warm start trains on and why
// it left the others out; a warning when it left out most.
func KeptGoldText(s train.SFTSkips, maxNew int) (event.Level, string) {
	text := fmt.Sprintf("warm start: %d of %d gold patches kept", s.Gold-s.TooLong, s.Gold)
	if s.TooLong == 0 {
		return event.Info, text
	}
	text += fmt.Sprintf("; %d left out: their reply is longer than sample.max_new_tokens = %d tokens (the longest %d), "+
		"which the policy could never finish; raise sample.max_new_tokens and model.context to keep them", s.TooLong, maxNew, s.Longest)
	if 2*s.TooLong > s.Gold {
		return event.Warn, text
	}
	return event.Info, text
}

func (ws *Workspace) SFTDir() string {
	if ws.Cfg.SFT.Out != "" {
		return ws.Cfg.SFT.Out
	}
	return history.RunDir(ws.Cfg.Run.OutDir).SFT()
}
