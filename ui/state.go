package ui

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/swetui/swetui/event"
)

// Bounds that are not config knobs: how many evaluations keep their logs, how
// many lines the event log keeps, how many completions one step may show.
const (
	keptEvals     = 8
	keptEvents    = 500
	maxStepRows   = 1024
	etaWindow     = 20
	defaultGroups = 100
)

// point is one finished step as the charts see it.
type point struct {
	Step int
	M    event.Metrics
	Dur  time.Duration
}

// sftPoint is one measurement of the warm start: a step's training loss, or
// a held-out loss.
type sftPoint struct {
	Step    int
	V       float64
	Elapsed time.Duration
}

// stepGroup is every scored completion of one step, ordered by (task, index).
type stepGroup struct {
	Step int
	Rows []event.CompletionScored
}

// put inserts or replaces c, keeping rows ordered.
func (g *stepGroup) put(c event.CompletionScored) {
	i := sort.Search(len(g.Rows), func(i int) bool {
		r := g.Rows[i]
		return r.Group > c.Group || (r.Group == c.Group && r.Index >= c.Index)
	})
	if i < len(g.Rows) && g.Rows[i].Group == c.Group && g.Rows[i].Index == c.Index {
		g.Rows[i] = c
		return
	}
	if len(g.Rows) >= maxStepRows {
		return
	}
	g.Rows = append(g.Rows, event.CompletionScored{})
	copy(g.Rows[i+1:], g.Rows[i:])
	g.Rows[i] = c
}

// entry is one line of the event log.
type entry struct {
	Time  time.Time
	Level event.Level
	Text  string
}

// evalLog is one evaluation's streamed container log.
type evalLog struct {
	ID         string
	Worker     int
	InstanceID string
	Lines      *ring[string]
	touched    int // logStore clock at the last write, for eviction
}

// logStore keeps the logs of the last keptEvals evaluations, each bounded to
// ui.log_lines lines.
type logStore struct {
	perEval int
	clock   int
	evals   map[string]*evalLog
	latest  string
}

func newLogStore(perEval int) *logStore {
	return &logStore{perEval: perEval, evals: map[string]*evalLog{}}
}

func (s *logStore) add(b event.LogBatch) {
	s.clock++
	l := s.evals[b.EvalID]
	if l == nil {
		if len(s.evals) >= keptEvals {
			s.evictOldest()
		}
		l = &evalLog{ID: b.EvalID, Worker: b.Worker, InstanceID: b.InstanceID, Lines: newRing[string](s.perEval)}
		s.evals[b.EvalID] = l
	}
	if b.InstanceID != "" {
		l.InstanceID = b.InstanceID
	}
	l.touched = s.clock
	for _, line := range b.Lines {
		l.Lines.Push(line)
	}
	s.latest = b.EvalID
}

func (s *logStore) evictOldest() {
	oldest, at := "", -1
	for id, l := range s.evals {
		if at < 0 || l.touched < at {
			oldest, at = id, l.touched
		}
	}
	delete(s.evals, oldest)
}

func (s *logStore) get(id string) *evalLog { return s.evals[id] }

// runState is the trainer's state as the header shows it.
type runState int

const (
	stateStarting runState = iota
	stateRunning
	statePausing
	statePaused
	stateResuming
	stateStopping
	stateStopped
)

var stateWords = [...]string{"STARTING", "RUNNING", "PAUSING", "PAUSED", "RESUMING", "STOPPING", "STOPPED"}

func (s runState) String() string { return stateWords[s] }

// state is everything the console knows about the run. The root model owns it
// and applies events to it; panes read it and keep only their view state.
type state struct {
	// gate counts the verifier gate's docker runs spared, audits and
	// misses over the run as watched (reward.verifier).
	gate struct{ spared, audits, misses int }
	now  func() time.Time

	info     event.RunInfo
	haveInfo bool
	created  time.Time
	stage    event.StageChanged
	phase    string
	auto     bool

	step     int // last step started
	finished int // last step finished
	inFlight bool
	version  int

	// paused is the trainer's last answer (Paused or Resumed). It answers
	// every Pause and Resume, in order: asked counts the requests not yet
	// answered, and wantPaused is what the newest of them asked for.
	paused        bool
	asked         int
	wantPaused    bool
	stopRequested bool
	stopped       bool
	stop          event.Stopped
	stoppedAt     time.Time // freezes the elapsed clock
	closed        bool      // the event channel was closed

	// The warm start (stage "sft"), from its SFTStep events: the training
	// loss of each step and the held-out losses, bounded like history.
	sft      event.SFTStep // the newest
	haveSFT  bool
	sftLoss  *ring[sftPoint]
	sftHeld  *ring[sftPoint]
	wantAuto *bool // the auto-curriculum asked for and not yet acknowledged

	history *ring[point]
	groups  *ring[*stepGroup]
	pool    event.PoolState
	// gpus is the GPUs' last report, prevGPUs the one before (the pane
	// shows the last step's times as their difference).
	gpus, prevGPUs event.GPUs
	logs           *logStore
	live           liveSet // agent trajectories in flight (rollout.mode = "agent")
	events         *ring[entry]
	replay         *event.CompletionScored
	received       int // events applied, for tests and the help line
	drops          func() event.Drops
}

func newState(o Options, now func() time.Time) *state {
	return &state{
		now:     now,
		created: now(),
		history: newRing[point](o.UI.History),
		sftLoss: newRing[sftPoint](o.UI.History),
		sftHeld: newRing[sftPoint](o.UI.History),
		groups:  newRing[*stepGroup](o.Groups),
		logs:    newLogStore(o.UI.LogLines),
		events:  newRing[entry](keptEvents),
		drops:   o.Drops,
	}
}

// dropped is what the console's subscription has lost so far.
func (s *state) dropped() event.Drops {
	if s.drops == nil {
		return event.Drops{}
	}
	return s.drops()
}

// runState derives the header's state word.
func (s *state) runState() runState {
	switch {
	case s.stopped:
		return stateStopped
	case s.stopRequested:
		return stateStopping
	case !s.haveInfo:
		return stateStarting
	case s.asked > 0 && s.wantPaused && !s.paused:
		return statePausing
	case s.asked > 0 && !s.wantPaused && s.paused:
		return stateResuming
	case s.paused:
		return statePaused
	}
	return stateRunning // a cancelled pause that has not taken hold too
}

// targetPaused is whether the run is to be paused: what the newest
// unanswered request asked for, else what the trainer last said.
func (s *state) targetPaused() bool {
	if s.asked > 0 {
		return s.wantPaused
	}
	return s.paused
}

// answered counts one answer to a Pause or Resume.
func (s *state) answered(paused bool) {
	s.paused = paused
	s.asked = max(s.asked-1, 0)
}

// where says where a pause or resume took hold: the warm start's step
// while in it, else the GRPO step.
func (s *state) where(step int) string {
	if s.inSFT() {
		if s.haveSFT {
			return fmt.Sprintf("the warm start at step %d/%d", s.sft.Step, s.sft.Steps)
		}
		return "the warm start"
	}
	return fmt.Sprintf("at step %d", step)
}

// inSFT is whether the run is in its warm start (stage "sft").
func (s *state) inSFT() bool { return s.stage.Stage == "sft" }

// stageWhat names a stage for the event log.
func stageWhat(stage string) string {
	switch stage {
	case "sft":
		return "(warm start on gold patches)"
	case "grpo":
		return "(GRPO)"
	}
	return ""
}

// sftRate is the warm start's steps per second over its last etaWindow
// steps (over all of this process's steps when fewer were seen).
func (s *state) sftRate() (float64, bool) {
	if !s.haveSFT {
		return 0, false
	}
	if n := s.sftLoss.Len(); n >= 2 {
		a, b := s.sftLoss.At(max(0, n-1-etaWindow)), s.sftLoss.At(n-1)
		if dt := (b.Elapsed - a.Elapsed).Seconds(); dt > 0 && b.Step > a.Step {
			return float64(b.Step-a.Step) / dt, true
		}
	}
	if done, dt := s.sft.Step-s.sft.Resumed, s.sft.Elapsed.Seconds(); done > 0 && dt > 0 {
		return float64(done) / dt, true
	}
	return 0, false
}

// sftETA is the time left in the warm start.
func (s *state) sftETA() (time.Duration, bool) {
	rate, ok := s.sftRate()
	if !ok || s.sft.Steps <= 0 {
		return 0, false
	}
	left := max(s.sft.Steps-s.sft.Step, 0)
	return time.Duration(float64(left) / rate * float64(time.Second)), true
}

// running is true while there is a run that Stop would end.
func (s *state) running() bool { return s.haveInfo && !s.stopped }

func (s *state) logf(level event.Level, format string, args ...any) {
	s.events.Push(entry{Time: s.now(), Level: level, Text: fmt.Sprintf(format, args...)})
}

// apply folds one event into the state. It never blocks and does no I/O.
func (s *state) apply(ev event.Event) {
	s.received++
	switch e := ev.(type) {
	case event.RunInfo:
		s.info, s.haveInfo = e, true
		s.phase, s.auto = e.Phase, e.Auto
		steps := "no step limit"
		if e.MaxSteps > 0 {
			steps = fmt.Sprintf("%d steps", e.MaxSteps)
		}
		s.logf(event.Info, "run %s started: phase %s, %s", e.Name, e.Phase, steps)
	case event.StageChanged:
		if e.Stage != s.stage.Stage {
			line := strings.TrimSpace("stage " + e.Stage + " " + stageWhat(e.Stage))
			if e.Detail != "" {
				line += ": " + e.Detail
			}
			s.logf(event.Info, "%s", line)
		}
		s.stage = e
	case event.SFTStep:
		s.sft, s.haveSFT = e, true
		s.sftLoss.Push(sftPoint{Step: e.Step, V: e.Loss, Elapsed: e.Elapsed})
		if e.HeldoutOK {
			s.sftHeld.Push(sftPoint{Step: e.Step, V: e.Heldout, Elapsed: e.Elapsed})
		}
	case event.StepStarted:
		s.step, s.inFlight = e.Step, true
		s.live.stepStarted() // the last step's trajectories have ended (liveSet)
		if e.Phase != "" {
			s.phase = e.Phase
		}
	case event.StepFinished:
		s.finished, s.inFlight, s.version = e.Step, false, e.Version
		s.history.Push(point{Step: e.Step, M: e.Metrics, Dur: e.Duration})
		s.gate.spared += e.Metrics.VerifierSpared
		s.gate.audits += e.Metrics.VerifierAudits
		s.gate.misses += e.Metrics.VerifierMisses
		s.logf(event.Info, "step %d: reward %.3f max %.3f, applied %.0f%%, resolved %.0f%%, loss %.4f, kl %.4f",
			e.Step, e.Metrics.RewardMean, e.Metrics.RewardMax, 100*e.Metrics.ApplyRate,
			100*e.Metrics.ResolvedRate, e.Metrics.Loss, e.Metrics.KL)
	case event.CompletionScored:
		s.scored(e)
	case event.TurnPlayed:
		s.live.played(e)
	case event.LogBatch:
		s.logs.add(e)
	case event.PoolState:
		s.pool = e
	case event.GPUs:
		s.prevGPUs, s.gpus = s.gpus, e
	case event.PhaseChanged:
		s.phase = e.To
		how := "by hand"
		if e.Auto {
			how = "auto"
		}
		s.logf(event.Info, "phase %s -> %s at step %d (%s) %s", e.From, e.To, e.Step, how, e.Reason)
	case event.AutoChanged:
		// One line per change: an acknowledgement that repeats the state
		// (the trainer saying again what it already said) adds nothing.
		if e.Auto != s.auto {
			s.logf(event.Info, "auto-curriculum %s", onOff(e.Auto))
		}
		s.auto = e.Auto
		if s.wantAuto != nil && *s.wantAuto == e.Auto {
			s.wantAuto = nil
		}
	case event.Paused:
		s.answered(true)
		s.logf(event.Warn, "paused %s", s.where(e.Step))
	case event.Resumed:
		s.answered(false)
		s.logf(event.Info, "resumed %s", s.where(e.Step))
	case event.CheckpointSaved:
		s.logf(event.Info, "checkpoint step %d saved to %s", e.Step, e.Path)
	case event.Message:
		s.events.Push(entry{Time: orNow(e.Time, s.now), Level: e.Level, Text: e.Text})
	case event.Stopped:
		s.stopped, s.stop, s.inFlight, s.stoppedAt = true, e, false, s.now()
		s.live.clear() // the sessions are closed with the run
		if e.Err != nil {
			s.logf(event.Error, "stopped at step %d: %s: %v", e.Step, e.Reason, e.Err)
		} else {
			s.logf(event.Info, "stopped at step %d: %s", e.Step, e.Reason)
		}
	}
}

func (s *state) scored(c event.CompletionScored) {
	if c.Step < 0 { // a replay's result
		s.replay = &c
		s.logf(event.Info, "replay %s: reward %.3f %s", c.Verdict.InstanceID, c.Verdict.Reward, verdict(c.Verdict))
		return
	}
	// Steps arrive in order in sync mode and nearly so in async mode: look
	// back a few groups before starting a new one.
	for i := s.groups.Len() - 1; i >= 0 && i >= s.groups.Len()-8; i-- {
		if g := s.groups.At(i); g.Step == c.Step {
			g.put(c)
			return
		}
	}
	if last, ok := s.groups.Last(); ok && c.Step < last.Step {
		return // older than what is kept: dropped
	}
	g := &stepGroup{Step: c.Step}
	g.put(c)
	s.groups.Push(g)
}

// eta estimates the time left from the mean of the last steps' durations.
func (s *state) eta() (time.Duration, bool) {
	n := s.history.Len()
	if n == 0 || s.info.MaxSteps <= 0 {
		return 0, false
	}
	k := min(n, etaWindow)
	var sum time.Duration
	for i := n - k; i < n; i++ {
		sum += s.history.At(i).Dur
	}
	left := s.info.MaxSteps - s.finished
	if left < 0 {
		left = 0
	}
	return sum / time.Duration(k) * time.Duration(left), true
}

// elapsed is the run's wall time so far.
func (s *state) elapsed() time.Duration {
	start := s.info.Started
	if start.IsZero() {
		start = s.created
	}
	if s.stopped && !s.stoppedAt.IsZero() {
		return s.stoppedAt.Sub(start)
	}
	return s.now().Sub(start)
}

func verdict(b event.Verdict) string {
	var parts []string
	switch {
	case b.Infra:
		parts = append(parts, "infra failure")
	case b.Resolved:
		parts = append(parts, "resolved")
	case b.Applied:
		parts = append(parts, "applied")
	case b.SyntaxOK:
		parts = append(parts, "valid diff")
	default:
		parts = append(parts, "no diff")
	}
	if b.F2PTotal+b.P2PTotal > 0 {
		parts = append(parts, fmt.Sprintf("F2P %d/%d P2P %d/%d", b.F2PPassed, b.F2PTotal, b.P2PPassed, b.P2PTotal))
	}
	if b.Noop {
		parts = append(parts, "no-op")
	}
	if len(b.Hacks) > 0 {
		parts = append(parts, "hacks: "+strings.Join(b.Hacks, ","))
	}
	if len(b.HacksUndone) > 0 {
		parts = append(parts, "undone by the reset (free): "+strings.Join(b.HacksUndone, ","))
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func orNow(t time.Time, now func() time.Time) time.Time {
	if t.IsZero() {
		return now()
	}
	return t
}
