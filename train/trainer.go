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
	"github.com/swetui/swetui/task"
)

// Deps are what a Trainer is wired to.
type Deps struct {
	Policy    Policy
	Reference Reference // nil when grpo.kl_coef is 0
	Tokenizer Tokenizer
	Scorer    Scorer
	Prompter  Prompter
	Tasks     []*task.Instance // the training split, in file order
	// Store saves and restores the policy's own state beside the trainer's;
	// nil disables checkpoints.
	Store Store
	// Warmup, when set, runs before GRPO on a run that did not resume from a
	// checkpoint (the SFT warm start), publishing its progress on the run's
	// event stream.
	Warmup func(ctx context.Context, publish func(Event)) error
	// DockerOK says whether the docker phase can run.
	DockerOK bool
	// Info fills the RunInfo event's BLAS and Hosts.
	BLAS  string
	Hosts []string
}

// Trainer runs GRPO. Its control methods never block; the loop acknowledges
// them with events.
type Trainer struct {
	cfg    config.Config
	d      Deps
	events chan Event
	ctrl   chan func()

	dropped atomic.Int64
	emitMu  sync.RWMutex // closing the event channel waits for senders
	closed  bool

	// Loop state, owned by the Run goroutine.
	st     State
	src    source
	model  sync.Mutex // serialises updates with live-weight sampling and checkpoint saves (async samples a snapshot)
	phase  atomic.Value
	paused bool
	stop   bool

	cancelMu      sync.Mutex
	cancelRun     context.CancelCauseFunc
	progress      atomic.Int64 // unix nanos of the last progress, for the watchdog
	idle          atomic.Bool  // paused: the watchdog does not count the time
	barren        int          // consecutive steps with nothing trainable
	lastTrainable int          // completions trained on in the last step
	sinks         *Sinks
	started       time.Time
}

// State is the trainer's resumable state; checkpoints save it.
type State struct {
	Step       int        `json:"step"`
	Epoch      int        `json:"epoch"`
	Pos        int        `json:"pos"` // next index into the epoch's order
	Curriculum Curriculum `json:"curriculum"`
	Recent     []Metrics  `json:"recent"`
}

// EventBuffer is the capacity of the event channel. Consumers drain it
// continuously; when it is full events are dropped (and counted) rather than
// stalling training.
const EventBuffer = 4096

// New makes a trainer. Events come out of Events() until Run returns.
func New(cfg config.Config, d Deps) *Trainer {
	t := &Trainer{cfg: cfg, d: d, events: make(chan Event, EventBuffer), ctrl: make(chan func(), 64)}
	t.st.Curriculum = *NewCurriculum(cfg.Curriculum, d.DockerOK)
	return t
}

// Events is the trainer's event stream; it is closed when Run returns.
func (t *Trainer) Events() <-chan Event { return t.events }

// Dropped counts events dropped because no consumer kept up.
func (t *Trainer) Dropped() int64 { return t.dropped.Load() }

// publish sends an event without stalling training. High-rate events
// (completions, logs, pool state) are dropped and counted when no consumer
// keeps up; the rare ones a consumer acts on (acks, phase changes, stops)
// wait up to a second for room.
func (t *Trainer) publish(ev Event) {
	t.emitMu.RLock()
	defer t.emitMu.RUnlock()
	if t.closed {
		return
	}
	switch ev.(type) {
	case CompletionScored, ContainerLog, PoolState, StageChanged, StepStarted:
		select {
		case t.events <- ev:
		default:
			t.dropped.Add(1)
		}
	default:
		timer := time.NewTimer(time.Second)
		defer timer.Stop()
		select {
		case t.events <- ev:
		case <-timer.C:
			t.dropped.Add(1)
		}
	}
}

// Emit publishes an event from outside the loop (the reward pool's logs and
// state) on the run's stream, with the same drop rules. Call it only while
// Run is running.
func (t *Trainer) Emit(ev Event) { t.publish(ev) }

func (t *Trainer) send(f func()) {
	select {
	case t.ctrl <- f:
	default: // a flood of key presses: drop rather than block the console
	}
}

// Pause holds the loop after the step in flight.
func (t *Trainer) Pause() { t.send(func() { t.paused = true; t.publish(Paused{Step: t.st.Step}) }) }

// Resume continues a paused loop.
func (t *Trainer) Resume() { t.send(func() { t.paused = false; t.publish(Resumed{Step: t.st.Step}) }) }

// SetPhase switches the curriculum phase from the next step on.
func (t *Trainer) SetPhase(phase string) {
	t.send(func() {
		from := t.st.Curriculum.Phase
		if phase == from {
			return
		}
		if phase == config.PhaseDocker && !t.d.DockerOK {
			t.publish(Message{Level: Warn, Text: "docker phase unavailable: the Docker daemon is not reachable (start it, then restart swetui)", Time: time.Now()})
			return
		}
		if err := t.st.Curriculum.Set(phase, t.st.Step); err != nil {
			t.publish(Message{Level: Warn, Text: err.Error(), Time: time.Now()})
			return
		}
		t.publish(PhaseChanged{Step: t.st.Step, From: from, To: phase, Reason: "set by operator"})
	})
}

// SetAuto turns the auto-curriculum on or off.
func (t *Trainer) SetAuto(on bool) {
	t.send(func() { t.st.Curriculum.Auto = on; t.publish(AutoChanged{Auto: on}) })
}

// SaveNow writes a checkpoint after the step in flight.
func (t *Trainer) SaveNow() {
	t.send(func() {
		if err := t.save(context.Background()); err != nil {
			t.publish(Message{Level: Error, Text: err.Error(), Time: time.Now()})
		}
	})
}

// errStopped and errStalled are the causes a run is cancelled with.
var (
	errStopped = errors.New("stopped by operator")
	errStalled = errors.New("watchdog")
)

// Stop ends the run within a bounded time: the step in flight is abandoned
// (its containers are killed through the cancelled context) and the last
// completed step is checkpointed.
func (t *Trainer) Stop() {
	t.send(func() { t.stop = true })
	if c := t.loadCancel(); c != nil {
		c(errStopped)
	}
}

// Replay re-scores one completion of a task in the current phase.
func (t *Trainer) Replay(instanceID, completion string) {
	t.send(func() {
		for _, inst := range t.d.Tasks {
			if inst.InstanceID == instanceID {
				go t.replay(inst, completion, t.st.Curriculum.Phase)
				return
			}
		}
		t.publish(Message{Level: Warn, Text: "replay: unknown instance " + instanceID, Time: time.Now()})
	})
}

func (t *Trainer) replay(inst *task.Instance, completion, phase string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(t.cfg.Sandbox.TimeoutS+30)*time.Second)
	defer cancel()
	bds, err := t.d.Scorer.Score(ctx, inst, []string{completion}, phase)
	if err != nil || len(bds) != 1 {
		t.publish(Message{Level: Error, Text: fmt.Sprintf("replay %s: %v", inst.InstanceID, err), Time: time.Now()})
		return
	}
	t.publish(CompletionScored{Step: -1, InstanceID: inst.InstanceID, Completion: completion, Reward: bds[0]})
}

// applyControls runs pending control functions; while paused it waits for
// one without spinning.
func (t *Trainer) applyControls(ctx context.Context) {
	for {
		select {
		case f := <-t.ctrl:
			f()
			continue
		default:
		}
		if !t.paused || t.stop {
			t.idle.Store(false)
			t.progress.Store(time.Now().UnixNano())
			return
		}
		t.idle.Store(true)
		select {
		case f := <-t.ctrl:
			f()
		case <-ctx.Done():
			return
		}
	}
}

// Run trains until run.max_steps, Stop, or ctx is cancelled, then writes a
// final checkpoint. It closes the event channel when it returns.
func (t *Trainer) Run(parent context.Context) (err error) {
	defer func() {
		t.emitMu.Lock()
		t.closed = true
		close(t.events)
		t.emitMu.Unlock()
	}()
	t.started = time.Now()
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	t.storeCancel(cancel)
	t.progress.Store(time.Now().UnixNano())
	if stall := time.Duration(t.cfg.Watchdog.StallS) * time.Second; stall > 0 {
		go t.watchdog(ctx, stall, cancel)
	}
	if t.sinks, err = OpenSinks(t.cfg.Run.OutDir); err != nil {
		t.publish(Stopped{Reason: "error", Err: err})
		return err
	}
	defer t.sinks.Close()
	resumed, err := t.resume(ctx)
	if err != nil {
		t.publish(Stopped{Reason: "error", Err: err})
		return err
	}
	if len(t.d.Tasks) == 0 {
		err := errors.New("train: no tasks to train on (check data.source, data.split and the include/exclude lists)")
		t.publish(Stopped{Reason: "error", Err: err})
		return err
	}
	t.publish(RunInfo{Name: t.cfg.Run.Name, OutDir: t.cfg.Run.OutDir, MaxSteps: t.cfg.Run.MaxSteps,
		Phase: t.st.Curriculum.Phase, Auto: t.st.Curriculum.Auto, BLAS: t.d.BLAS, Hosts: t.d.Hosts,
		GroupSize: t.cfg.GRPO.GroupSize, Started: t.started})
	if !resumed && t.d.Warmup != nil {
		t.publish(StageChanged{Stage: "sft"})
		if err := t.d.Warmup(ctx, t.publish); err != nil {
			if ctx.Err() != nil {
				t.publish(Stopped{Reason: stopReason(ctx)})
				return nil
			}
			t.publish(Stopped{Reason: "error", Err: err})
			return err
		}
		t.progress.Store(time.Now().UnixNano())
	}
	t.publish(StageChanged{Stage: "grpo"})
	cur := cursor{Epoch: t.st.Epoch, Pos: t.st.Pos}
	t.phase.Store(t.st.Curriculum.Phase)
	if t.cfg.GRPO.Async.Enabled {
		t.src = newAsyncSource(ctx, t, t.st.Step, cur)
	} else {
		t.src = &syncSource{t: t, cur: cur}
	}
	defer t.src.close()

	reason := "finished"
	for t.cfg.Run.MaxSteps == 0 || t.st.Step < t.cfg.Run.MaxSteps {
		t.applyControls(ctx)
		if t.stop || ctx.Err() != nil {
			reason = stopReason(ctx)
			break
		}
		if err := t.step(ctx); err != nil {
			if ctx.Err() != nil {
				reason = stopReason(ctx)
				break
			}
			t.publish(Stopped{Step: t.st.Step, Reason: "error", Err: err})
			return err
		}
		t.progress.Store(time.Now().UnixNano())
		if err := t.checkBarren(); err != nil {
			t.publish(Stopped{Step: t.st.Step, Reason: "error", Err: err})
			return err
		}
		if every := t.cfg.Run.SaveEvery; every > 0 && t.st.Step%every == 0 {
			if err := t.save(ctx); err != nil {
				t.publish(Message{Level: Error, Text: err.Error(), Time: time.Now()})
			}
		}
	}
	// The final checkpoint must not be lost to the cancelled run context.
	saveCtx, cancelSave := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancelSave()
	if err := t.save(saveCtx); err != nil {
		t.publish(Stopped{Step: t.st.Step, Reason: "error", Err: err})
		return err
	}
	t.publish(Stopped{Step: t.st.Step, Reason: reason})
	return nil
}

func stopReason(ctx context.Context) string {
	switch context.Cause(ctx) {
	case errStopped:
		return "stopped"
	case errStalled:
		return "watchdog: no progress"
	}
	return "interrupted"
}

func (t *Trainer) storeCancel(c context.CancelCauseFunc) {
	t.cancelMu.Lock()
	t.cancelRun = c
	t.cancelMu.Unlock()
}

func (t *Trainer) loadCancel() context.CancelCauseFunc {
	t.cancelMu.Lock()
	defer t.cancelMu.Unlock()
	return t.cancelRun
}

// watchdog warns at half of watchdog.stall_s without progress and stops the
// run at stall_s, so a stuck evaluation or sampler never hangs silently.
func (t *Trainer) watchdog(ctx context.Context, stall time.Duration, cancel context.CancelCauseFunc) {
	tick := time.NewTicker(min(stall/8, 5*time.Second))
	defer tick.Stop()
	warned := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if t.idle.Load() {
			warned = false
			continue
		}
		quiet := time.Since(time.Unix(0, t.progress.Load()))
		switch {
		case quiet >= stall:
			t.publish(Message{Level: Error, Text: fmt.Sprintf("watchdog: no progress for %s (watchdog.stall_s); stopping", quiet.Round(time.Second)), Time: time.Now()})
			cancel(errStalled)
			return
		case quiet >= stall/2 && !warned:
			warned = true
			t.publish(Message{Level: Warn, Text: fmt.Sprintf("watchdog: no progress for %s; the run stops at %s", quiet.Round(time.Second), stall), Time: time.Now()})
		case quiet < stall/2:
			warned = false
		}
	}
}

// checkBarren warns after an epoch in which no group was trainable and
// stops after watchdog.barren_epochs of them: the policy cannot change, so
// the run would only burn time.
func (t *Trainer) checkBarren() error {
	if t.lastTrainable > 0 {
		t.barren = 0
		return nil
	}
	t.barren++
	perEpoch := max(1, (len(t.d.Tasks)+t.cfg.GRPO.PromptsPerStep-1)/t.cfg.GRPO.PromptsPerStep)
	switch t.barren {
	case perEpoch:
		t.publish(Message{Level: Warn, Text: fmt.Sprintf("a whole epoch (%d steps) had nothing trainable: every group's rewards were equal in phase %s; consider an easier phase or a warmer start", perEpoch, t.st.Curriculum.Phase), Time: time.Now()})
	case t.cfg.Watchdog.BarrenEpochs * perEpoch:
		return fmt.Errorf("train: %d epochs in a row had nothing trainable (all rewards equal within every group in phase %s): stopping (watchdog.barren_epochs)", t.cfg.Watchdog.BarrenEpochs, t.st.Curriculum.Phase)
	}
	return nil
}

// phaseNow is the phase of the step in flight, safe to read from any goroutine.
func (t *Trainer) phaseNow() string { return t.phase.Load().(string) }

// epochOrder is a permutation that depends only on the seed and the epoch,
// so a resumed run visits the tasks in the same order.
func epochOrder(n int, seed int64, epoch int) []int {
	r := rand.New(rand.NewPCG(uint64(seed), uint64(epoch)+1))
	return r.Perm(n)
}

func (t *Trainer) step(ctx context.Context) error {
	step := t.st.Step + 1
	phase := t.st.Curriculum.Phase
	t.phase.Store(phase)
	t.publish(StepStarted{Step: step, Phase: phase, Time: time.Now()})
	begin := time.Now()
	groups, tm, err := t.src.next(ctx, step, phase)
	if err != nil {
		return err
	}
	collected := time.Now()

	m := t.advantages(groups)
	seqs, inputs := t.lossInputs(groups)
	t.lastTrainable = len(seqs)
	if len(seqs) > 0 {
		t.model.Lock()
		err := t.update(ctx, seqs, inputs, onPolicy(groups, t.d.Policy.Version()), &m)
		t.model.Unlock()
		if err != nil {
			return err
		}
	}
	trainDone := time.Now()

	t.st.Step = step
	last := groups[len(groups)-1]
	t.st.Epoch, t.st.Pos = last.cursor.Epoch, last.cursor.Pos
	m.SampleSeconds, m.RewardSeconds = tm.sample.Seconds(), tm.reward.Seconds()
	m.WaitSeconds = collected.Sub(begin).Seconds()
	m.TrainSeconds = trainDone.Sub(collected).Seconds()
	m.StepSeconds = trainDone.Sub(begin).Seconds()
	version := t.d.Policy.Version()
	for gi, gr := range groups {
		m.MaxAge = max(m.MaxAge, version-1-gr.version)
		for i := range gr.samples {
			ev := CompletionScored{Step: step, Group: gi, Index: i, InstanceID: gr.inst.InstanceID,
				Completion: gr.texts[i], IssueText: gr.inst.ProblemStatement, Reward: gr.rewards[i], Advantage: gr.adv[i],
				Tokens: len(gr.samples[i].Tokens), Truncated: gr.samples[i].Truncated, Version: gr.version}
			t.publish(ev)
			if err := t.sinks.Rollout(ev); err != nil {
				return err
			}
		}
	}
	t.src.stepDone(step)
	t.st.Recent = append(t.st.Recent, m)
	if len(t.st.Recent) > t.cfg.Curriculum.Window {
		t.st.Recent = t.st.Recent[len(t.st.Recent)-t.cfg.Curriculum.Window:]
	}
	if err := t.sinks.Metrics(step, phase, version, m); err != nil {
		return err
	}
	t.publish(StepFinished{Step: step, Phase: phase, Version: version, Metrics: m, Duration: trainDone.Sub(begin)})
	if ev := t.st.Curriculum.Observe(step, m); ev != nil {
		t.publish(*ev)
	}
	return nil
}

// advantages fills each group's advantages and the step's reward metrics.
func (t *Trainer) advantages(groups []*group) Metrics {
	g := t.cfg.GRPO
	var m Metrics
	var all []float64
	n, zero := 0, 0
	for _, gr := range groups {
		for _, r := range gr.rewards {
			if r.Infra {
				m.InfraFailures++
				continue
			}
			all = append(all, r.Total)
			m.RewardMax = math.Max(m.RewardMax, r.Total)
			m.SyntaxRate += b2f(r.Valid)
			m.ApplyRate += b2f(r.Applied)
			m.ResolvedRate += b2f(r.Resolved)
			m.HackRate += b2f(len(r.Hacks) > 0)
			n++
		}
	}
	batch := RewardStats(all, nil, g.StdEps)
	if n > 0 {
		m.RewardMean, m.RewardStd = batch.Mean, batch.Std
		m.SyntaxRate /= float64(n)
		m.ApplyRate /= float64(n)
		m.ResolvedRate /= float64(n)
		m.HackRate /= float64(n)
	}
	for _, gr := range groups {
		rewards := make([]float64, len(gr.rewards))
		valid := make([]bool, len(gr.rewards))
		for i, r := range gr.rewards {
			rewards[i], valid[i] = r.Total, !r.Infra
		}
		gr.adv, gr.ok = GroupAdvantages(rewards, valid, g.ScaleRewards, batch.Std, g.LeaveOneOut, g.StdEps)
		if !gr.ok {
			zero++
		}
	}
	if len(groups) > 0 {
		m.FracZeroStd = float64(zero) / float64(len(groups))
	}
	return m
}

// lossInputs packs the trainable completions: groups with reward variance,
// without infra failures, and (with mask_truncated) not cut off.
func (t *Trainer) lossInputs(groups []*group) ([]Sequence, []SeqInput) {
	var seqs []Sequence
	var inputs []SeqInput
	for _, gr := range groups {
		if !gr.ok {
			continue
		}
		for i, s := range gr.samples {
			if gr.rewards[i].Infra || len(s.Tokens) == 0 || (t.cfg.GRPO.MaskTruncated && s.Truncated) {
				continue
			}
			seqs = append(seqs, Sequence{Prompt: gr.prompt, Completion: s.Tokens})
			inputs = append(inputs, SeqInput{Advantage: gr.adv[i], Behaviour: s.Logprobs})
		}
	}
	return seqs, inputs
}

// onPolicy reports whether every group was sampled by the current weights.
func onPolicy(groups []*group, version int) bool {
	for _, gr := range groups {
		if gr.version != version {
			return false
		}
	}
	return true
}

func (t *Trainer) update(ctx context.Context, seqs []Sequence, inputs []SeqInput, onPolicy bool, m *Metrics) error {
	g := t.cfg.GRPO
	// Completions sampled by the current weights already carry their
	// logprobs (the sampler and the graph agree to ~1e-6): the forward pass
	// is needed only for stale ones. This is GRPO's single-update case,
	// where the ratio starts at 1 (TRL detaches the same logprobs).
	var logp [][]float64
	var err error
	if onPolicy {
		logp = make([][]float64, len(inputs))
		for i := range inputs {
			logp[i] = inputs[i].Behaviour
		}
	} else if logp, err = t.d.Policy.Logprobs(ctx, seqs); err != nil {
		return fmt.Errorf("policy logprobs: %w", err)
	}
	var ref [][]float64
	if g.KLCoef > 0 && t.d.Reference != nil {
		if ref, err = t.d.Reference.Logprobs(ctx, seqs); err != nil {
			return fmt.Errorf("reference logprobs: %w", err)
		}
	}
	for i := range inputs {
		inputs[i].Logp = logp[i]
		// Without IS correction the ratio is taken against the behaviour
		// policy (the sampler); with it, against the current weights and the
		// truncated weight carries the behaviour mismatch.
		inputs[i].Old = inputs[i].Behaviour
		if g.ISCorrection == "truncated" {
			inputs[i].Old = logp[i]
		}
		inputs[i].Ref = logp[i]
		if ref != nil {
			inputs[i].Ref = ref[i]
		}
	}
	lc := LossConfig{ClipLow: g.ClipLow, ClipHigh: g.ClipHigh, KLCoef: g.KLCoef, KLEstimator: g.KLEstimator,
		LossAgg: g.LossAgg, ISCorrection: g.ISCorrection, ISCap: g.ISCap}
	if ref == nil {
		lc.KLCoef = 0
	}
	st, cot := GRPOLoss(lc, inputs)
	_, entropy, err := t.d.Policy.Backward(ctx, seqs, cot)
	if err != nil {
		return fmt.Errorf("policy backward: %w", err)
	}
	m.GradNorm, m.LR = t.d.Policy.Step()
	m.Loss, m.KL, m.ClipFrac, m.Entropy, m.Tokens = st.Loss, st.KL, st.ClipFrac, entropy, st.Tokens
	return nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
