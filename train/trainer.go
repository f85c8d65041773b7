package train

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/history"
	"github.com/swetui/swetui/prompt"
	"github.com/swetui/swetui/rollout"
	"github.com/swetui/swetui/task"
)

// Deps are what a Trainer is wired to.
type Deps struct {
	Policy    Policy
	Reference Reference // nil when grpo.kl_coef is 0
	Tokenizer prompt.Tokenizer
	Scorer    Scorer
	Prompter  prompt.Prompter
	// Chat is the prompter's chat format: completions are trimmed of its
	// stop tokens (zero: ChatML).
	Chat  prompt.ChatFormat
	Tasks []*task.Instance // the training split, in file order
	// Store saves and restores the policy's own state beside the trainer's;
	// nil disables checkpoints.
	Store Store
	// Events receives the run's events (docs/ARCHITECTURE.md §4); nil discards them.
	Events event.Publisher
	// Warmup, when set, runs before GRPO on a run that did not resume from a
	// GRPO checkpoint: the SFT warm start, as a stage of the run.
	Warmup Warmup
	// Rollouts plays each task's group (rollout.Agent in agent mode, which
	// grades its own: the Scorer is then not used); nil: rollout.Single
	// over the Prompter and the Scorer.
	Rollouts Rollouts
	// DockerOK says whether the docker phase can run.
	DockerOK bool
	// Info fills the RunInfo event's fields of the same names.
	Build, Device, Mode string
	LoRARank            int
	Hosts               []string
}

// Trainer runs GRPO. Its control methods never block; the loop acknowledges
// them with events.
type Trainer struct {
	cfg  config.Config
	d    Deps
	ctrl chan func()

	// Loop state, owned by the Run goroutine.
	logErr   error // the last failure to keep an evaluation's log, warned once a step
	st       State
	src      source
	model    sync.RWMutex // serialises updates with live-weight sampling and checkpoint saves (async samples a snapshot); agent turns share it, to be decoded together
	phase    atomic.Value
	paused   bool
	stop     bool
	inWarmup bool // the warm-start stage runs: saves and phase keys mean something else

	cancelMu      sync.Mutex
	cancelRun     context.CancelCauseFunc
	progress      atomic.Int64 // unix nanos of the last progress, for the watchdog
	idle          atomic.Bool  // paused: the watchdog does not count the time
	barren        int          // consecutive steps with nothing trainable
	lastTrainable int          // completions trained on in the last step
	sinks         *history.Sinks
	started       time.Time
	savedStep     int // step of the newest checkpoint this run wrote
}

// State is the trainer's resumable state; checkpoints save it.
type State struct {
	Step       int             `json:"step"`
	Epoch      int             `json:"epoch"`
	Pos        int             `json:"pos"` // next index into the epoch's order
	Curriculum Curriculum      `json:"curriculum"`
	Recent     []event.Metrics `json:"recent"`
	// Pool is the pass-rate task pool (curriculum.task_sampler); kept
	// whichever sampler runs, so switching to it later starts informed.
	Pool *TaskPool `json:"task_pool,omitempty"`
}

// EventBuffer is the buffer a consumer of a run's events should subscribe
// with: a step publishes one event per completion.
const EventBuffer = 4096

// New makes a trainer.
func New(cfg config.Config, d Deps) *Trainer {
	if d.Events == nil {
		d.Events = event.Discard
	}
	if d.Rollouts == nil {
		d.Rollouts = &rollout.Single{Prompter: d.Prompter, Tok: d.Tokenizer, Chat: d.Chat, Scorer: d.Scorer, Context: cfg.Model.Context,
			Opts: SampleOptions{Temperature: cfg.Sample.Temperature, TopP: cfg.Sample.TopP, MaxNewTokens: cfg.Sample.MaxNewTokens}}
	}
	t := &Trainer{cfg: cfg, d: d, ctrl: make(chan func(), 64)}
	t.st.Curriculum = *NewCurriculum(cfg.Curriculum, d.DockerOK)
	t.st.Pool = &TaskPool{}
	return t
}

// publish sends an event to the run's subscribers; the bus never lets a
// slow one stall training.
func (t *Trainer) publish(ev event.Event) { t.d.Events.Publish(ev) }

// Run trains until run.max_steps, Stop, or ctx is cancelled, then writes a
// final checkpoint. Its last event is always Stopped.
func (t *Trainer) Run(parent context.Context) error {
	t.started = time.Now()
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	t.storeCancel(cancel)
	t.progress.Store(time.Now().UnixNano())
	if stall := time.Duration(t.cfg.Watchdog.StallS) * time.Second; stall > 0 {
		go t.watchdog(ctx, stall, cancel)
	}
	reason, err := t.run(ctx)
	switch {
	case err != nil:
		reason = "error"
	case context.Cause(ctx) == errStalled:
		// A stalled run is a failed run: exit status 1, whatever was saved.
		err = fmt.Errorf("train: stopped by the watchdog after %ds without progress (watchdog.stall_s)", t.cfg.Watchdog.StallS)
	}
	t.publish(event.Stopped{Step: t.st.Step, Reason: reason, Err: err})
	return err
}

// run is Run's body: it returns why the run ended, or the error that ended
// it.
func (t *Trainer) run(ctx context.Context) (reason string, err error) {
	resumed, err := t.resume(ctx)
	if err != nil {
		return "", err
	}
	// A resumed run (or warm start) drops the history written after the
	// state it resumes from: it is about to write those steps again.
	var cut *history.Cut
	switch {
	case resumed:
		cut = &history.Cut{GRPOStep: t.st.Step, SFTStep: math.MaxInt}
	case t.d.Warmup != nil && t.d.Warmup.Done() > 0:
		cut = &history.Cut{SFTStep: t.d.Warmup.Done()}
	}
	if cut != nil {
		// A resumed run writes the logs of the steps after its checkpoint again.
		if err := history.PruneEvalLogs(t.cfg.Run.OutDir, history.EvalLogSteps, cut.GRPOStep); err != nil {
			return "", err
		}
	}
	if t.sinks, err = history.OpenSinks(t.cfg.Run.OutDir, cut); err != nil {
		return "", err
	}
	defer t.sinks.Close()
	if len(t.d.Tasks) == 0 {
		return "", errors.New("train: no tasks to train on (check data.source, data.split and the include/exclude lists)")
	}
	t.publish(event.RunInfo{Name: t.cfg.Run.Name, OutDir: t.cfg.Run.OutDir, MaxSteps: t.cfg.Run.MaxSteps,
		Phase: t.st.Curriculum.Phase, Auto: t.st.Curriculum.Auto, Build: t.d.Build, Device: t.d.Device, Mode: t.d.Mode, LoRARank: t.d.LoRARank, Hosts: t.d.Hosts,
		GroupSize: t.cfg.GRPO.GroupSize, GroupSizes: groupSizes(t.cfg.GRPO), Started: t.started, ResumedStep: cutGRPO(cut),
		ResumedSFTStep: cutSFT(cut, resumed)})
	if !resumed && t.d.Warmup != nil {
		if err := t.warmup(ctx); err != nil {
			if ctx.Err() != nil {
				return stopReason(ctx), nil
			}
			return "", err
		}
		t.progress.Store(time.Now().UnixNano())
	}
	t.publish(event.StageChanged{Stage: "grpo"})
	cur := cursor{Epoch: t.st.Epoch, Pos: t.st.Pos}
	t.phase.Store(t.st.Curriculum.Phase)
	if t.cfg.GRPO.Async.Enabled {
		t.src = newAsyncSource(ctx, t, t.st.Step, cur)
	} else {
		t.src = &syncSource{t: t, cur: cur}
	}
	defer t.src.close()

	if reason, err = t.loop(ctx); err != nil {
		return "", err
	}
	// The final checkpoint must not be lost to the cancelled run context;
	// a step that run.save_every just saved is not saved twice.
	if t.savedStep != t.st.Step || t.st.Step == 0 {
		saveCtx, cancelSave := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancelSave()
		if err := t.save(saveCtx); err != nil {
			return "", err
		}
	}
	return reason, nil
}

// loop runs GRPO steps until run.max_steps, a stop or a failure.
func (t *Trainer) loop(ctx context.Context) (reason string, err error) {
	for t.cfg.Run.MaxSteps == 0 || t.st.Step < t.cfg.Run.MaxSteps {
		t.applyControls(ctx)
		if t.stop || ctx.Err() != nil {
			return stopReason(ctx), nil
		}
		if err := t.step(ctx); err != nil {
			if ctx.Err() != nil {
				return stopReason(ctx), nil
			}
			return "", err
		}
		t.progress.Store(time.Now().UnixNano())
		if err := t.checkBarren(); err != nil {
			return "", err
		}
		if every := t.cfg.Run.SaveEvery; every > 0 && t.st.Step%every == 0 {
			if err := t.save(ctx); err != nil {
				t.warn(event.Error, err.Error())
			}
		}
		if t.pastTimeBudget() {
			return TimeBudgetReason, nil
		}
	}
	return "finished", nil
}

// TimeBudgetReason is the stop reason of a run that used its run.max_minutes.
const TimeBudgetReason = "finished: run.max_minutes reached"

// pastTimeBudget reports that run.max_minutes have passed since the start.
func (t *Trainer) pastTimeBudget() bool {
	lim := t.cfg.Run.MaxMinutes
	return lim > 0 && time.Since(t.started) >= time.Duration(lim*float64(time.Minute))
}

func cutGRPO(c *history.Cut) int {
	if c == nil {
		return 0
	}
	return c.GRPOStep
}

func cutSFT(c *history.Cut, resumed bool) int {
	if c == nil || resumed {
		return 0
	}
	return c.SFTStep
}

// warn publishes a message for the event log.
func (t *Trainer) warn(level event.Level, text string) {
	t.publish(event.Message{Level: level, Text: text, Time: time.Now()})
}

// phaseNow is the phase of the step in flight, safe to read from any goroutine.
func (t *Trainer) phaseNow() string { return t.phase.Load().(string) }

// epochOrder is a permutation that depends only on the seed and the epoch,
// so a resumed run visits the tasks in the same order.
func epochOrder(n int, seed int64, epoch int) []int {
	r := rand.New(rand.NewPCG(uint64(seed), uint64(epoch)+1))
	return r.Perm(n)
}

// groupSizes is G per phase where grpo.group_size_by_phase sets it.
func groupSizes(g config.GRPO) map[string]int {
	var out map[string]int
	for _, p := range []string{config.PhaseSyntax, config.PhaseApplyOnly, config.PhaseDocker} {
		if n := g.GroupSizeIn(p); n != g.GroupSize {
			if out == nil {
				out = map[string]int{}
			}
			out[p] = n
		}
	}
	return out
}
