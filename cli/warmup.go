package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/internal/durable"
	"github.com/swetui/swetui/policy"
	"github.com/swetui/swetui/train"
	"github.com/swetui/swetui/warmstart"
)

// sftStage is a run's warm start (train.Warmup): it loads <out>/sft when an
// earlier run finished it, continues <out>/sft-partial when one was cut
// short, else trains from scratch; then the reference becomes the warmed-up
// policy and GRPO starts with a fresh optimiser. While it trains its state
// is saved every sft.save_every steps and at stop.
type sftStage struct {
	ws     *workspace
	pol    *policy.Model // GRPO's policy: it shares the weights
	ref    *policy.ModelReference
	sftPol *policy.Model // the warm start's own optimiser and schedule
	done   int           // steps finished, saved or not
	saved  int           // steps in the partial checkpoint
	loaded bool          // a finished warm start was found
	// after runs once the warmed-up weights are in pol and ref (a GPU
	// policy uploads them).
	after func() error
	// dev, when set, is GRPO's policy on model.device: the warm start
	// trains there, with its own optimiser and schedule swapped in (no
	// second copy of the weights on the device), and hands the weights
	// back to pol when it ends.
	dev   *policy.Device
	where string // dev's device, for messages
}

// partialState is the partial checkpoint's state.json.
type partialState struct {
	Step  int `json:"step"`
	Steps int `json:"steps"`
	// Init is the model.init_ckpt `swetui sft` started from ("" for a
	// fresh model, as in a run's warm start).
	Init string `json:"init,omitempty"`
}

const partialStateFile = "state.json"

func (ws *workspace) partialSFTDir() string { return ws.sftDir() + "-partial" }

// newSFTStage finds where the warm start stands.
func newSFTStage(ws *workspace, pol *policy.Model, ref *policy.ModelReference) (*sftStage, error) {
	sftPol, err := ws.newPolicy(pol.Model, ws.cfg.SFT.LR, ws.cfg.SFT.Steps)
	if err != nil {
		return nil, err
	}
	s := &sftStage{ws: ws, pol: pol, ref: ref, sftPol: sftPol}
	if _, err := os.Stat(filepath.Join(ws.sftDir(), "config.json")); err == nil {
		s.loaded, s.done = true, ws.cfg.SFT.Steps
		return s, nil
	}
	st, ok, err := readPartialSFT(ws.partialSFTDir())
	if err != nil {
		return nil, err
	}
	if !ok || st.Steps != ws.cfg.SFT.Steps || st.Init != "" {
		// None, or another schedule (its learning rate does not continue
		// this one), or `swetui sft` from another model.
		return s, nil
	}
	if err := sftPol.Load(context.Background(), ws.partialSFTDir()); err != nil {
		return nil, fmt.Errorf("warm start %s: %w (remove it to start the warm start afresh)", ws.partialSFTDir(), err)
	}
	s.done, s.saved = st.Step, st.Step
	return s, nil
}

// Done implements train.Warmup.
func (s *sftStage) Done() int { return s.done }

// Run implements train.Warmup.
func (s *sftStage) Run(ctx context.Context, h train.WarmupHooks) error {
	ws := s.ws
	dir := ws.sftDir()
	if s.loaded {
		m, err := loadModel(dir, ws.tok)
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
		h.Publish(event.Message{Level: event.Info, Time: time.Now(), Text: fmt.Sprintf("warm start: continuing from step %d of %d (%s)", s.done, ws.cfg.SFT.Steps, ws.partialSFTDir())})
	}
	where := "gorgonia on the CPU"
	if s.dev != nil {
		where = s.where
	}
	h.Publish(event.Message{Level: event.Info, Time: time.Now(), Text: "warm start: trains on " + where})
	every := ws.cfg.SFT.SaveEvery
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
	on := &opened{Policy: s.sftPol, Store: s.sftPol, Host: s.sftPol, Device: "cpu (gorgonia)",
		Sync: func() error { return nil }, Close: func() {}}
	restore := func() {}
	if s.dev != nil {
		var err error
		if restore, err = s.onDevice(); err != nil {
			return err
		}
		on = &opened{Policy: s.dev, Store: s.dev, Host: s.sftPol, Dev: s.dev, Device: s.where, Sync: s.sync, Close: func() {}}
	}
	res, err := ws.sft(ctx, on, dir, s.done, h)
	restore()
	if err != nil {
		return err
	}
	os.RemoveAll(ws.partialSFTDir())
	heldout := ""
	if k := len(res.Heldout); k > 0 {
		heldout = fmt.Sprintf(" (held-out %.3f)", res.Heldout[k-1].NLL)
	}
	if n := len(res.Losses); n > 0 {
		h.Publish(event.Message{Level: event.Info, Time: time.Now(), Text: fmt.Sprintf("sft: %d steps on %d examples (%d synthetic; %d gold patches too long), loss %.3f -> %.3f%s, saved %s",
			ws.cfg.SFT.Steps, res.Used, res.Synthetic, res.Skipped.TooLong, res.Losses[0], res.Losses[n-1], heldout, dir)})
	}
	return s.finish()
}

// onDevice puts the warm start's weights, optimiser state and schedule on
// GRPO's device policy; restore gives GRPO back its own optimiser and
// schedule (the weights stay: finish uploads them again with GRPO's fresh
// moments).
func (s *sftStage) onDevice() (restore func(), err error) {
	p := s.dev.P
	grpoOpt, grpoSched := p.Optim, p.Schedule
	p.Schedule = s.sftPol.Schedule
	if err := p.Load(s.sftPol.Model, s.sftPol.Optim); err != nil { // a continued warm start's moments too
		p.Optim, p.Schedule = grpoOpt, grpoSched
		return nil, fmt.Errorf("warm start on %s: %w", s.where, err)
	}
	return func() { p.Optim, p.Schedule = grpoOpt, grpoSched }, nil
}

// sync brings the device's warm-start weights and moments back into
// sftPol (for its checkpoints), whichever optimiser the device holds now.
func (s *sftStage) sync() error { return s.dev.P.Engine.Download(s.sftPol.Model, s.sftPol.Optim) }

// finish makes the warmed-up policy the reference too, where there is one
// (none when grpo.kl_coef is 0).
func (s *sftStage) finish() error {
	if s.ref != nil {
		if err := s.ref.Model.CopyWeightsFrom(s.pol.Model); err != nil {
			return err
		}
	}
	if s.after != nil {
		return s.after()
	}
	return nil
}

// Save implements train.Warmup: the warm start's weights, optimiser and
// step go to <out>/sft-partial, replaced atomically.
func (s *sftStage) Save(ctx context.Context) error {
	if s.loaded || s.done == s.saved || s.done >= s.ws.cfg.SFT.Steps {
		return nil
	}
	if s.dev != nil {
		if err := s.sync(); err != nil {
			return fmt.Errorf("save warm start: %w", err)
		}
	}
	if err := savePartialSFT(ctx, s.sftPol, s.ws.partialSFTDir(), partialState{Step: s.done, Steps: s.ws.cfg.SFT.Steps}); err != nil {
		return err
	}
	s.saved = s.done
	return nil
}

// savePartialSFT writes an unfinished warm start (store's weights, moments
// and sampler state, and st) to dir, replacing what was there only once the
// new one is complete.
func savePartialSFT(ctx context.Context, store train.Store, dir string, st partialState) error {
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("save warm start: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, ".sft-partial-")
	if err != nil {
		return fmt.Errorf("save warm start: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := store.Save(ctx, tmp); err != nil {
		return fmt.Errorf("save warm start: %w", err)
	}
	state, _ := json.Marshal(st)
	if err := durable.WriteFile(filepath.Join(tmp, partialStateFile), state); err != nil {
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

// readPartialSFT reads dir's partialState; ok is false when there is none.
func readPartialSFT(dir string) (st partialState, ok bool, err error) {
	data, err := os.ReadFile(filepath.Join(dir, partialStateFile))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return st, false, nil
	case err != nil:
		return st, false, fmt.Errorf("warm start %s: %w", dir, err)
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return st, false, fmt.Errorf("warm start %s: %s: %w", dir, partialStateFile, err)
	}
	return st, true, nil
}

var _ train.Warmup = (*sftStage)(nil)

// useShippedWarmStart puts the shipped warm start in <out>/sft when the run
// can use it (its tokenizer was taken already) and no warm start is there,
// and says so; or says why a run on the embedded suite trains its own.
func (ws *workspace) useShippedWarmStart() (string, error) {
	if ws.shipped == nil {
		if ws.notShipped != "" {
			return fmt.Sprintf("warm start: training one (the shipped one does not fit: %s)", ws.notShipped), nil
		}
		return "", nil
	}
	dir := ws.sftDir()
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err == nil {
		return "", nil
	}
	if _, err := os.Stat(ws.partialSFTDir()); err == nil {
		return "", nil // an interrupted warm start of this run's own: it continues
	}
	if err := warmstart.WriteTo(dir, *ws.shipped); err != nil {
		return "", err
	}
	p := ws.shipped
	return fmt.Sprintf("warm start: the one shipped for the embedded suite (%d steps on its %d training tasks, made at commit %s; sft.shipped=false trains one instead), in %s",
		p.SFTSteps, len(p.TrainInstances), p.Commit, dir), nil
}
