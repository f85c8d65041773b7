package event

import "time"

// Event is anything published on a run's Bus. The set is closed: only this
// package's types are events.
type Event interface{ event() }

// RunInfo opens every run: what the header shows before the first step.
type RunInfo struct {
	Name     string
	OutDir   string
	MaxSteps int
	Phase    string
	Auto     bool // auto-curriculum on
	// Build is the CPU kernels' build (model.BLASName); Device where the
	// policy trains when not on them ("" on the CPU); Mode the rollout
	// mode ("agent", "" for single-shot); LoRARank the adapters' rank (0:
	// full fine-tuning). The header reads them as fields.
	Build     string
	Device    string
	Mode      string
	LoRARank  int
	Hosts     []string
	GroupSize int
	// GroupSizes is G per phase where grpo.group_size_by_phase sets it
	// (nil when it sets none): the header shows the current phase's.
	GroupSizes map[string]int
	Started    time.Time
	// ResumedStep is the GRPO checkpoint's step a resumed run goes on from,
	// ResumedSFTStep the step of an interrupted warm start it continues; 0
	// on a fresh run. History written after them is about to be written
	// again.
	ResumedStep, ResumedSFTStep int
}

// StageChanged marks a stage of the run (for example "sft" warm start, then
// "grpo"), with optional progress in [0, 1] for stages that have one.
type StageChanged struct {
	Stage    string
	Progress float64
	Detail   string
}

// SFTStep is one finished step of the supervised warm start (stage "sft"):
// what the console charts before GRPO begins, and metrics.jsonl and
// TensorBoard record under sft/*.
type SFTStep struct {
	Step, Steps int
	Loss        float64 // mean token NLL of the step's batch (gold and synthetic replies)
	// Heldout is the held-out split's gold-reply loss, measured every
	// sft.heldout_every steps; HeldoutOK says whether this step measured it.
	Heldout   float64
	HeldoutOK bool
	LR        float64
	Elapsed   time.Duration // since the warm start (or its resumed part) began
	Resumed   int           // steps done by an earlier, interrupted warm start
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
	Similarity    float64 `json:"reward/similarity"`        // mean patch similarity to the gold patch (0 where not computed)
	NoopRate      float64 `json:"reward/noop_rate"`         // share of no-op patches
	HunkRate      float64 `json:"reward/hunk_applied_rate"` // hunks applying over hunks, where counted
	InfraFailures int     `json:"reward/infra_failures"`
	// The verifier's gate in front of Docker (reward.verifier): patches
	// not run, audited, and audited ones that resolved (its misses).
	VerifierSpared int `json:"verifier/spared,omitempty"`
	VerifierAudits int `json:"verifier/audits,omitempty"`
	VerifierMisses int `json:"verifier/misses,omitempty"`
	// Counts under the original recipe's dashboard names.
	PatchesNonEmpty int     `json:"swebrl/patches_nonempty"`   // completions with a patch extracted
	PatchesApplied  int     `json:"swebrl/patches_applied"`    // completions whose patch applied
	TestsPassed     int     `json:"swebrl/tests_passed_total"` // FAIL_TO_PASS and PASS_TO_PASS tests passed, summed
	FracZeroStd     float64 `json:"grpo/frac_reward_zero_std"`
	Groups          int     `json:"grpo/groups"`          // groups the step drew (more than prompts_per_step with dynamic sampling)
	ExtraSamples    int     `json:"grpo/extra_samples"`   // completions drawn beyond the first prompts_per_step groups
	OverlongReward  float64 `json:"grpo/overlong_reward"` // mean of DAPO's length term added to the scorer's rewards (≤ 0)
	Loss            float64 `json:"grpo/loss"`
	KL              float64 `json:"grpo/kl"`
	ClipFrac        float64 `json:"grpo/clip_frac"`
	Entropy         float64 `json:"policy/entropy"`
	GradNorm        float64 `json:"optim/grad_norm"`
	LR              float64 `json:"optim/lr"`
	Tokens          int     `json:"perf/tokens"`
	SampleSeconds   float64 `json:"perf/sample_s"` // in async mode: summed over the step's groups, overlapped
	WaitSeconds     float64 `json:"perf/wait_s"`   // the trainer waiting for scored groups
	RewardSeconds   float64 `json:"perf/reward_s"`
	TrainSeconds    float64 `json:"perf/train_s"`
	StepSeconds     float64 `json:"perf/step_s"`
	MaxAge          int     `json:"async/max_age"`
	// Agent mode (rollout.mode = "agent"): what ended the step's
	// trajectories, as shares, and their mean number of turns.
	AgentSubmitted   float64 `json:"agent/submitted,omitempty"`
	AgentTurnLimit   float64 `json:"agent/turn_limit,omitempty"`
	AgentContextFull float64 `json:"agent/context_full,omitempty"`
	AgentTimeouts    float64 `json:"agent/timeout_budget,omitempty"`
	AgentContainer   float64 `json:"agent/container_failure,omitempty"`
	AgentTurns       float64 `json:"agent/turns,omitempty"`
}

// GPUs is every GPU's share of a run on several (model.device lists
// them), published after each step: what the console shows beside the
// reward pool, so that a GPU that falls behind is seen.
type GPUs struct {
	Step   int
	Shares []GPUShare
}

// GPUShare is one GPU's work since the run began.
type GPUShare struct {
	Device  string // "cuda:1 NVIDIA H100 80GB HBM3"
	Samples int    // sampling calls it ran (a group, or an agent's turn)
	// Sample, Train and Collective are its time in sampling, in training's
	// forward and backward passes (its part of each batch), and in
	// collectives (the gradients' all-reduce, ZeRO-1's broadcasts).
	Sample, Train, Collective time.Duration
	// MemUsed and MemTotal are its memory at the last step (0: unknown).
	MemUsed, MemTotal uint64
}

// StepFinished carries a finished step's metrics.
type StepFinished struct {
	Step     int
	Phase    string
	Version  int // weight version after the update
	Metrics  Metrics
	Duration time.Duration
}

// CompletionScored is one completion of a group with its verdict: what the
// console's group and diff panes show and what rollouts.jsonl records.
type CompletionScored struct {
	Step       int     `json:"step"`  // -1 for a replay
	Group      int     `json:"group"` // index of the task within the step
	Index      int     `json:"index"` // index of the completion within the group
	Completion string  `json:"completion"`
	Verdict    Verdict `json:"verdict"`
	Advantage  float64 `json:"advantage"`
	Tokens     int     `json:"tokens"`
	Truncated  bool    `json:"truncated"`
	Version    int     `json:"version"` // weight version that sampled it
	// TokenLogprobs are the completion's token ids and the sampler's
	// logprob of each, packed (PackTokens), for `swetui view`'s colouring.
	TokenLogprobs string `json:"token_logprobs,omitempty"`
	// LogFile is the evaluation's container log kept under the run's
	// folder (gzipped; history.ReadEvalLog), "" when none ran.
	LogFile string `json:"log_file,omitempty"`
	// PromptHash names the exact prompt the completion answered, kept once
	// in the run's prompts.jsonl (history.PromptHash).
	PromptHash string `json:"prompt_hash,omitempty"`
	// Agent is an agent-mode completion's trajectory, turn by turn; nil in
	// single-shot mode, whose lines it leaves as they were. With it,
	// Completion is "": Text renders the turns, kept once.
	Agent *Trajectory `json:"agent,omitempty"`
	// Trained is the reward the advantage was computed from where the
	// trainer's rule replaced the verdict's: an unfinished agent trajectory
	// under agent.unfinished = "zero" trains on 0, whatever its diff was
	// graded (Verdict.Reward). nil where the verdict's reward trained.
	Trained *float64 `json:"trained_reward,omitempty"`
	// Masked says the completion was left out of the loss by the trainer's
	// rule (an unfinished agent trajectory under agent.unfinished =
	// "mask"); an infrastructure failure, masked too, says so in its verdict.
	Masked bool `json:"masked,omitempty"`
	// IssueText is the task's problem statement, shown by the console's
	// issue view (`i`). The same string value for every completion of a
	// group shares its memory; may be empty.
	IssueText string `json:"-"` // not repeated in rollouts.jsonl: the dataset has it
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

// Paused acknowledges a pause: the run holds after step Step.
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
func (SFTStep) event()          {}
func (StepFinished) event()     {}
func (CompletionScored) event() {}
func (TurnPlayed) event()       {}
func (LogBatch) event()         {}
func (PoolState) event()        {}
func (PhaseChanged) event()     {}
func (AutoChanged) event()      {}
func (Paused) event()           {}
func (Resumed) event()          {}
func (CheckpointSaved) event()  {}
func (Message) event()          {}
func (Stopped) event()          {}
func (GPUs) event()             {}
