package app

import (
	"context"
	"fmt"
	"time"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/model"
	"github.com/swetui/swetui/policy"
	"github.com/swetui/swetui/rollout"
	"github.com/swetui/swetui/sandbox"
	"github.com/swetui/swetui/train"
)

// Run is an opened `swetui run`: its workspace, the trainer wired to the
// policy and reference on model.device, the reward pool and the warm start,
// and what the run's log says about them once it starts.
type Run struct {
	Workspace *Workspace
	Trainer   *train.Trainer
	// Model is the policy's network (a layout without weights when it was
	// streamed onto a device).
	Model *model.Model

	bus   event.Publisher
	notes []event.Message
	close []func() // in the order they run
}

// OpenRun opens everything `swetui run` trains with in ws (Open's, of the
// training split), publishing on bus: the shipped warm start when the run
// can use it, the reward pool (a run without Docker still trains in syntax and
// apply-only; curriculum.phase=docker needs it), the policy and, with a KL
// term, its reference on model.device, and the warm start as the trainer's
// first stage. run.name names the run's containers.
func OpenRun(ctx context.Context, ws *Workspace, bus event.Publisher) (_ *Run, err error) {
	cfg := ws.Cfg
	shippedNote, err := ws.UseShippedWarmStart()
	if err != nil {
		return nil, err
	}
	r := &Run{Workspace: ws, bus: bus}
	defer func() {
		if err != nil {
			r.Close()
		}
	}()
	if shippedNote != "" {
		r.note(event.Info, shippedNote)
	}
	scorer, pool, dockerErr := ws.Rewards(ctx, cfg.Run.Name, bus) // containers carry swetui.run=<run.name>
	r.onClose(func() { ClosePool(ctx, pool) }, func() { scorer.Close() })
	if dockerErr != nil && cfg.Curriculum.Phase == config.PhaseDocker {
		return nil, fmt.Errorf("curriculum.phase=docker needs Docker: %w", dockerErr)
	}
	var grader Grader = scorer
	var refresh *refresher
	if cfg.Reward.Verifier != "" {
		vc := cfg
		vc.Model.Device = verifierDevice(cfg.Model.Device)
		v, err := OpenVerifier(ctx, vc, cfg.Reward.Verifier)
		if err != nil {
			return nil, fmt.Errorf("reward.verifier: %w", err)
		}
		r.onClose(v.Close)
		grader = NewGate(scorer, v, cfg.Reward, cfg.Run.Seed, func(text string) {
			if bus != nil {
				bus.Publish(event.Message{Level: event.Warn, Time: time.Now(), Text: text})
			}
		})
		r.note(event.Info, fmt.Sprintf("verifier gate: in the docker phase a patch that applies and that %s puts below %.2f is not run in Docker, but for %.0f%% audited (off past %.0f%% misses)",
			cfg.Reward.Verifier, cfg.Reward.VerifierSkipBelow, 100*cfg.Reward.VerifierAudit, 100*cfg.Reward.VerifierMaxMiss))
		if every := cfg.Reward.VerifierRefreshSteps; every > 0 {
			rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
			refresh = &refresher{every: every, gate: grader.(*Gate), train: trainRefresh(cfg, VerifierSteps), ctx: rctx, say: func(lvl event.Level, text string) {
				if bus != nil {
					bus.Publish(event.Message{Level: lvl, Time: time.Now(), Text: text})
				}
			}}
			r.onClose(cancel, refresh.close) // a refresh under way stops with the run
		}
	}

	m, err := ws.NewModel()
	if err != nil {
		return nil, err
	}
	r.Model = m
	pol, err := ws.NewPolicy(m, cfg.Optim.LR, cfg.Run.MaxSteps)
	if err != nil {
		return nil, err
	}
	if err := ws.WithLoRA(pol); err != nil {
		return nil, err
	}
	deps := train.Deps{Policy: pol, Tokenizer: ws.Tok, Scorer: grader,
		Prompter: ws.Prompter, Chat: ws.Chat, Tasks: ws.Tasks, Store: pol, Events: bus, DockerOK: dockerErr == nil,
		Build: model.BLASName(), Hosts: sandbox.ParseHosts(cfg.Sandbox.Hosts).Shown()}
	// Without a KL term (grpo.kl_coef = 0) no reference is kept: no copy of
	// the weights, none in checkpoints.
	var ref *policy.ModelReference
	if cfg.GRPO.KLCoef > 0 {
		// With LoRA the frozen base is the reference; a layout streamed to
		// the device is read again for it there: neither copies on the host.
		refModel := pol.Base()
		if pol.LoRA() == nil && m.HasWeights() {
			refModel = m.Clone()
		}
		ref = &policy.ModelReference{Model: refModel, Temp: cfg.Sample.Temperature}
		pol.Ref, deps.Reference = ref, ref
	}
	// On a GPU the policy and reference live on the device, and the warm
	// start trains there too (SFTStage.dev).
	on, err := ws.OpenPolicy(ctx, pol, ref)
	if err != nil {
		return nil, err
	}
	r.close = append([]func(){on.Close}, r.close...)
	planNote := ""
	if dp := on.Dev; dp != nil {
		deps.Policy, deps.Store = dp, dp
		if dp.Ref != nil {
			deps.Reference = dp.Ref
		}
		deps.Device = on.Device
		planNote = fmt.Sprintf("memory plan on %s:\n%s", on.Device, on.Plan)
	}
	if cfg.Run.SFTFirst && cfg.Model.InitCkpt == "" {
		stage, err := NewSFTStage(ws, pol, ref)
		if err != nil {
			return nil, err
		}
		if on.Dev != nil {
			stage.dev, stage.where = on.Dev, on.Device
		}
		deps.Warmup = stage
	}
	if l := pol.LoRA(); l != nil {
		deps.LoRARank = l.Cfg.Rank
	}
	// The sessions' pool is the scorer's: a run's sandboxes on the same hosts.
	if refresh != nil {
		var next event.Publisher = event.Discard
		if bus != nil {
			next = bus
		}
		deps.Events = stepTap{Publisher: next, stepEnded: refresh.stepEnded}
	}
	deps.Rollouts, err = ws.Player(func() (*sandbox.Pool, error) { return pool, dockerErr }, grader, SampleOptions(cfg), cfg.Agent.Turns)
	if err != nil {
		return nil, err
	}
	if a, ok := deps.Rollouts.(*rollout.Agent); ok {
		a.Bus = bus // the console shows each trajectory's turns as they are played
		deps.Mode = config.RolloutAgent
		r.note(event.Info, fmt.Sprintf("agent mode: each rollout works in its own session, up to agent.turns = %d replies of one ```bash block, "+
			"%d s a command; its diff is graded in a fresh sandbox (docs/agent.md)", cfg.Agent.Turns, cfg.Agent.CommandTimeoutS))
	}
	r.Trainer = train.New(cfg, deps)

	if n := ContextNote(m); n != "" {
		r.note(event.Warn, n)
	}
	if l := pol.LoRA(); l != nil {
		r.note(event.Info, LoRANote(l, pol.Model.NumParams()))
	}
	if planNote != "" {
		r.note(event.Info, planNote)
	}
	if dockerErr != nil {
		r.note(event.Warn, fmt.Sprintf("docker phase unavailable: %v; syntax and apply-only still run", dockerErr))
	} else if n := pool.Reaped(); n > 0 {
		r.note(event.Info, fmt.Sprintf("reaped %d containers left by earlier runs", n))
	}
	return r, nil
}

// Start runs the trainer until it stops (done receives its error), then
// says on the bus what OpenRun found: the warm start it uses, the context,
// LoRA, the memory plan, Docker.
func (r *Run) Start(ctx context.Context) (done <-chan error) {
	c := make(chan error, 1)
	go func() { c <- r.Trainer.Run(ctx) }()
	for _, n := range r.notes {
		n.Time = time.Now()
		r.bus.Publish(n)
	}
	return c
}

// Close frees the device and tears down the reward pool (with its own
// deadline: the run's context is usually cancelled by then).
func (r *Run) Close() {
	for _, f := range r.close {
		f()
	}
	r.close = nil
}

func (r *Run) note(lvl event.Level, text string) {
	r.notes = append(r.notes, event.Message{Level: lvl, Text: text})
}

func (r *Run) onClose(fs ...func()) { r.close = append(r.close, fs...) }
