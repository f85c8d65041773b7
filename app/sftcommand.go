package app

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/model"
	"github.com/swetui/swetui/task"
	"github.com/swetui/swetui/train"
	"github.com/swetui/swetui/warmstart"
)

// SFTCommand is `swetui sft`'s warm start on on into SFTDir: it continues
// what an earlier one of the same schedule from the same model saved when
// it was stopped, saves its own state every sft.save_every steps and when
// stopped (a full disk costs the save, not the warm start), and removes it
// once done. publish gets the warm start's events; say what the user is
// told of the partial state.
func (ws *Workspace) SFTCommand(ctx context.Context, on *Opened, publish func(event.Event), say func(string)) (train.SFTResult, error) {
	cfg := ws.Cfg
	partial := ws.PartialSFTDir()
	state := PartialState{Steps: cfg.SFT.Steps, Init: cfg.Model.InitCkpt}
	if st, ok, err := ReadPartialSFT(partial); err != nil {
		return train.SFTResult{}, err
	} else if ok && st.Steps == state.Steps && st.Init == state.Init && st.Step < st.Steps {
		if err := on.Store.Load(ctx, partial); err != nil {
			return train.SFTResult{}, fmt.Errorf("%w (remove %s to start the warm start afresh)", err, partial)
		}
		state.Step = st.Step
		say(fmt.Sprintf("continuing from step %d of %d (%s)", st.Step, st.Steps, partial))
	}
	saved := state.Step
	savePartial := func(ctx context.Context) error {
		if state.Step == saved {
			return nil
		}
		if err := SavePartialSFT(ctx, on.Store, partial, state); err != nil {
			return err
		}
		saved = state.Step
		return nil
	}
	res, err := ws.SFT(ctx, on, ws.SFTDir(), state.Step, train.WarmupHooks{AfterStep: func(ctx context.Context, ev event.SFTStep) error {
		state.Step = ev.Step
		if every := cfg.SFT.SaveEvery; every > 0 && ev.Step%every == 0 && ev.Step < ev.Steps {
			if err := savePartial(ctx); err != nil {
				say(err.Error())
			}
		}
		return nil
	}, Publish: publish})
	if err != nil {
		// Stopped (Ctrl-C, a signal) or failed: keep the steps it made.
		if state.Step > saved && state.Step < cfg.SFT.Steps {
			if serr := savePartial(context.WithoutCancel(ctx)); serr != nil {
				return res, fmt.Errorf("%w (and %v)", err, serr)
			}
			return res, fmt.Errorf("%w (step %d of %d saved in %s: the same command continues it)", err, state.Step, cfg.SFT.Steps, partial)
		}
		return res, err
	}
	return res, os.RemoveAll(partial)
}

// ExportWarmStart writes the finished warm start as the shipped one
// (`swetui sft --export`), with what it was made from: commit is the code's.
func (ws *Workspace) ExportWarmStart(ctx context.Context, res train.SFTResult, commit, dst string) error {
	if ws.Cfg.Data.Source != task.MiniSource {
		return fmt.Errorf("--export: the shipped warm start is for the embedded suite (data.source = %q), not %q", task.MiniSource, ws.Cfg.Data.Source)
	}
	texts, err := ws.TokenizerTexts(ctx)
	if err != nil {
		return err
	}
	if ws.Cfg.Rollout.Mode == config.RolloutAgent {
		// Agent mode's goes on from the single-shot one: a run takes it
		// only while that one is what it went on from.
		if _, ok, err := warmstart.SingleWeightsSum(ws.Cfg.Model.InitCkpt); err != nil || !ok {
			return fmt.Errorf("--export in agent mode: model.init_ckpt must be the shipped single-shot warm start (warmstart/shipped), not %q (%v)",
				ws.Cfg.Model.InitCkpt, err)
		}
		if texts, err = ws.AgentWarmStartTexts(ctx, texts); err != nil {
			return err
		}
	}
	p := warmstart.Provenance{Recipe: warmstart.RecipeOf(ws.Cfg), SFTSteps: ws.Cfg.SFT.Steps, InputsHash: warmstart.InputsHash(texts),
		Commit: commit, Build: model.BLASName()}
	for _, in := range ws.Tasks {
		p.TrainInstances = append(p.TrainInstances, in.InstanceID)
	}
	if n := len(res.Losses); n > 0 {
		p.FinalLoss = res.Losses[n-1]
	}
	if n := len(res.Heldout); n > 0 {
		p.HeldoutLoss = res.Heldout[n-1].NLL
	}
	return warmstart.Export(ws.SFTDir(), dst, p)
}

// OpenSFT opens what `swetui sft` trains: the training split's workspace,
// the model (with LoRA where configured) and its policy on model.device,
// with sft.lr and sft.steps. The caller closes the policy.
func OpenSFT(ctx context.Context, cfg config.Config) (*Workspace, *model.Model, *Opened, error) {
	ws, err := Open(ctx, cfg, task.SplitTrain)
	if err != nil {
		return nil, nil, nil, err
	}
	m, err := ws.NewModel()
	if err != nil {
		return nil, nil, nil, err
	}
	pol, err := ws.NewPolicy(m, cfg.SFT.LR, cfg.SFT.Steps)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := ws.WithLoRA(pol); err != nil {
		return nil, nil, nil, err
	}
	on, err := ws.OpenPolicy(ctx, pol, nil)
	if err != nil {
		return nil, nil, nil, err
	}
	return ws, m, on, nil
}

// GitCommit is the checkout's commit, marked dirty when it has changes;
// "" outside a git checkout: the code a warm start is built from.
func GitCommit(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, "git", "describe", "--always", "--dirty", "--abbrev=12").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}
