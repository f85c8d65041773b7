package train

import "time"

// Event is what the trainer publishes on its event channel (DESIGN.md §4).
// Events are plain values: consumers (the console, the headless printer,
// metrics sinks) may keep them without copying.
type Event interface{ event() }

// RunInfo opens every run: what the header shows before the first step.
type RunInfo struct {
	Name      string
	OutDir    string
	MaxSteps  int
	Phase     string
	Auto      bool // auto-curriculum on
	BLAS      string
	Hosts     []string
	GroupSize int
	Started   time.Time
}

// StageChanged marks a stage of the run (for example "sft" warm start, then
// "grpo"), with optional progress in [0, 1] for stages that have one.
type StageChanged struct {
	Stage    string
	Progress float64
	Detail   string
}

// StepStarted is sent when a step begins sampling.
type StepStarted struct {
	Step  int
	Phase string
	Time  time.Time
}

// Metrics are one step's numbers. metrics.jsonl writes them under the
// namespaced names in their json tags.
type Metrics struct {
	RewardMean    float64 `json:"reward/mean"`
	RewardMax     float64 `json:"reward/max"`
	RewardStd     float64 `json:"reward/std"`
	SyntaxRate    float64 `json:"reward/syntax_valid_rate"`
	ApplyRate     float64 `json:"reward/apply_rate"`
	ResolvedRate  float64 `json:"reward/resolved_rate"`
	HackRate      float64 `json:"reward/hack_rate"`
	InfraFailures int     `json:"reward/infra_failures"`
	FracZeroStd   float64 `json:"grpo/frac_reward_zero_std"`
	Loss          float64 `json:"grpo/loss"`
	KL            float64 `json:"grpo/kl"`
	ClipFrac      float64 `json:"grpo/clip_frac"`
	Entropy       float64 `json:"policy/entropy"`
	GradNorm      float64 `json:"optim/grad_norm"`
	LR            float64 `json:"optim/lr"`
	Tokens        int     `json:"perf/tokens"`
	SampleSeconds float64 `json:"perf/sample_s"` // in async mode: summed over the step's groups, overlapped
	WaitSeconds   float64 `json:"perf/wait_s"`   // the trainer waiting for scored groups
	RewardSeconds float64 `json:"perf/reward_s"`
	TrainSeconds  float64 `json:"perf/train_s"`
	StepSeconds   float64 `json:"perf/step_s"`
	MaxAge        int     `json:"async/max_age"`
}

// StepFinished carries a finished step's metrics.
type StepFinished struct {
	Step     int
	Phase    string
	Version  int // weight version after the update
	Metrics  Metrics
	Duration time.Duration
}

// Breakdown is one completion's reward and where it came from.
type Breakdown struct {
	Total       float64
	Valid       bool   // a well-formed diff was found
	DiffForm    string // how it was found: fenced, tagged, bare, none
	Applied     bool
	ApplyMethod string // which of the fallback chain applied it
	F2PPassed   int
	F2PTotal    int
	P2PPassed   int
	P2PTotal    int
	Resolved    bool
	Infra       bool // infrastructure failure: masked out of the advantage
	Hacks       []string
	Error       string
}

// CompletionScored is one completion of a group, scored.
type CompletionScored struct {
	Step       int
	Group      int // index of the task within the step
	Index      int // index of the completion within the group
	InstanceID string
	Completion string
	Diff       string
	Reward     Breakdown
	Advantage  float64
	Tokens     int
	Truncated  bool
	Version    int // weight version that sampled it
	// IssueText is the task's problem statement, shown by the console's
	// issue view (`i`). The same string value for every completion of a
	// group shares its memory; may be empty.
	IssueText string `json:"-"` // not repeated in rollouts.jsonl: the dataset has it
}

// ContainerLog is a batch of log lines of one evaluation.
type ContainerLog struct {
	EvalID     string
	Worker     int
	InstanceID string
	Lines      []string
}

// WorkerState is one reward worker as the pool last saw it.
type WorkerState struct {
	ID          int
	Host        string
	Busy        bool
	InstanceID  string
	ContainerID string
	EvalID      string
	Since       time.Time
	Status      string
}

// PoolState is the reward pool's live state.
type PoolState struct {
	Workers       []WorkerState
	Queue         int
	Done          int
	P50, P95      time.Duration
	Timeouts      int
	InfraFailures int
}

// PhaseChanged reports a curriculum switch, live or automatic.
type PhaseChanged struct {
	Step     int
	From, To string
	Auto     bool
	Reason   string
}

// AutoChanged reports the auto-curriculum being turned on or off.
type AutoChanged struct{ Auto bool }

// Paused and Resumed acknowledge the matching controls.
type Paused struct{ Step int }

// Resumed acknowledges Resume.
type Resumed struct{ Step int }

// CheckpointSaved reports a checkpoint written to Path.
type CheckpointSaved struct {
	Step int
	Path string
}

// Level grades a Message.
type Level int

// Message levels.
const (
	Info Level = iota
	Warn
	Error
)

func (l Level) String() string { return [...]string{"info", "warn", "error"}[l] }

// Message is free text for the event log: warnings, errors, notes.
type Message struct {
	Level Level
	Text  string
	Time  time.Time
}

// Stopped is the last event of a run.
type Stopped struct {
	Step   int
	Reason string
	Err    error
}

func (RunInfo) event()          {}
func (StageChanged) event()     {}
func (StepStarted) event()      {}
func (StepFinished) event()     {}
func (CompletionScored) event() {}
func (ContainerLog) event()     {}
func (PoolState) event()        {}
func (PhaseChanged) event()     {}
func (AutoChanged) event()      {}
func (Paused) event()           {}
func (Resumed) event()          {}
func (CheckpointSaved) event()  {}
func (Message) event()          {}
func (Stopped) event()          {}

// Controller is how the console steers a run. Every method returns at once;
// the trainer acknowledges with an event.
type Controller interface {
	Pause()
	Resume()
	SetPhase(phase string)
	SetAuto(on bool)
	SaveNow()
	Stop()
	// Replay re-scores one (task, completion) through the reward pool; the
	// result arrives as a CompletionScored with Step -1.
	Replay(instanceID, completion string)
}
