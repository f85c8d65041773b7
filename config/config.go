// Package config owns swetui's settings: the typed structs that config.toml
// decodes into, strict loading, Hydra-style key.path=value overrides, and
// validation that reports every problem at once before anything heavy starts.
package config

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Config is the whole resolved configuration. Every field has a toml tag; the
// file config.toml at the repository root carries the same defaults as
// Default, with a comment per knob (a test keeps the two in step).
type Config struct {
	Run        Run        `toml:"run"`
	Data       Data       `toml:"data"`
	Model      Model      `toml:"model"`
	Sample     Sample     `toml:"sample"`
	Optim      Optim      `toml:"optim"`
	GRPO       GRPO       `toml:"grpo"`
	Curriculum Curriculum `toml:"curriculum"`
	Reward     Reward     `toml:"reward"`
	Sandbox    Sandbox    `toml:"sandbox"`
	Prepare    Prepare    `toml:"prepare"`
	SFT        SFT        `toml:"sft"`
	LoRA       LoRA       `toml:"lora"`
	Watchdog   Watchdog   `toml:"watchdog"`
	UI         UI         `toml:"ui"`
	Serve      Serve      `toml:"serve"`
	Rollout    Rollout    `toml:"rollout"`
	Agent      Agent      `toml:"agent"`
}

// Rollout says what a rollout is.
type Rollout struct {
	// Mode is RolloutSingle (one reply holding a diff) or RolloutAgent (the
	// policy works in the task's sandbox, a command a turn).
	Mode string `toml:"mode"`
}

// Rollout modes.
const (
	RolloutSingle = "single"
	RolloutAgent  = "agent"
)

// What an unfinished trajectory earns (agent.unfinished).
const (
	UnfinishedGraded = "graded"
	UnfinishedZero   = "zero"
	UnfinishedMask   = "mask"
)

// ExecutorSandbox is agent.executor's sandboxes of the reward pool.
const ExecutorSandbox = "sandbox"

// Agent bounds agent mode's trajectories.
type Agent struct {
	// Context is a trajectory's tokens at most, prompt included: in agent
	// mode the model runs at the larger of it and model.context (a
	// trajectory needs more room than one reply; Load applies it).
	Context   int `toml:"context"`
	Turns     int `toml:"turns"`      // replies a trajectory in training
	EvalTurns int `toml:"eval_turns"` // and in eval
	// GroupSize and MaxGroups replace grpo.group_size and grpo.max_groups
	// in agent mode (0: theirs stand; Load applies them): G = 8
	// trajectories a task and 2 groups a step, with 10 turns, took the
	// held-out resolved rate from the warm start's 6.5-10.8% to 17.2% and
	// 12.9% (two seeds) in 30 minutes on 2 cores, where grpo's 4 and up to
	// 8 (at 30 or 10 turns) gave at best 8.6%: a group of 8 more often
	// holds a trajectory that resolves (docs/agent.md).
	GroupSize int `toml:"group_size"`
	MaxGroups int `toml:"max_groups"`
	// CommandTimeoutS is a command's wall clock; TimeoutBudget ends a
	// trajectory once that many commands timed out (0: never).
	CommandTimeoutS int `toml:"command_timeout_s"`
	TimeoutBudget   int `toml:"timeout_budget"`
	// ObservationChars of a command's output go back (head and tail), and
	// at most ObservationTokens once tokenized.
	ObservationChars  int `toml:"observation_chars"`
	ObservationTokens int `toml:"observation_tokens"`
	// Unfinished is what a trajectory that did not submit (turn limit,
	// context full, timeouts) earns: UnfinishedGraded, what its diff earns,
	// as swetui eval and SWE-bench grade it (the work tree is the answer
	// whatever ended it); UnfinishedZero, nothing, so that submitting pays;
	// UnfinishedMask, left out of the loss. A lost sandbox is masked
	// whatever this says. Zero by default: masked, the policy stops
	// submitting (held-out resolved 7.3% -> 3.0% in 30 minutes); graded, it
	// stops too and its diffs apply more but resolve no more (64% applied,
	// 7.3% resolved, against 16% and 7.8% before); docs/agent.md.
	Unfinished string `toml:"unfinished"`
	// SessionMinutes is a session's whole life: past it the session ends
	// (a command running then killed) and its sandbox goes.
	SessionMinutes int `toml:"session_minutes"`
	// Background lets what a command leaves running (a server, a job)
	// go on between commands; otherwise it is killed as the command
	// returns. Either way nothing outlives the session.
	Background bool `toml:"background"`
	// BackgroundCPUS bounds a session's CPU time when Background is set
	// (0: none): past it, as a command returns, its sandbox is stopped.
	BackgroundCPUS int `toml:"background_cpu_s"`
	// Executor is what a trajectory's session runs in: ExecutorSandbox, a
	// confined sandbox of the reward pool on sandbox.hosts (Docker or
	// Kubernetes). app picks the agent.Opener from it in one place, so
	// another executor is one implementation and one value.
	Executor string `toml:"executor"`
}

// Run holds the knobs of one training run as a whole.
type Run struct {
	Name     string `toml:"name"`
	Seed     int64  `toml:"seed"`
	MaxSteps int    `toml:"max_steps"`
	// MaxMinutes of wall time from the start (warm start included) after
	// which the run stops at the end of a step, saved; 0 = no limit.
	MaxMinutes float64 `toml:"max_minutes"`
	OutDir     string  `toml:"out_dir"`
	SaveEvery  int     `toml:"save_every"`
	KeepLast   int     `toml:"keep_last"`
	Resume     string  `toml:"resume"`
	SFTFirst   bool    `toml:"sft_first"`
	// SaveDtype is the dtype checkpoint weights are written in: "auto" (that
	// of model.init_ckpt's config.json when it says bfloat16, else f32),
	// "bf16" or "f32". The fp32 masters are kept either way.
	SaveDtype string `toml:"save_dtype"`
}

// Data says where tasks come from and which of them are used.
type Data struct {
	Source     string   `toml:"source"`
	Split      string   `toml:"split"`
	TrainLimit int      `toml:"train_limit"`
	Include    []string `toml:"include"`
	Exclude    []string `toml:"exclude"`
	MiniSeed   int64    `toml:"mini_seed"`
	MiniTasks  int      `toml:"mini_tasks"`
	TestFrac   float64  `toml:"test_fraction"`
	// Prompt is the code a prompt shows: PromptOracle, PromptBM25 or
	// PromptText.
	Prompt string `toml:"prompt"`
	// PromptTokens bounds the whole prompt in the run's tokens; 0 = what
	// model.context leaves after sample.max_new_tokens.
	PromptTokens int `toml:"prompt_tokens"`
}

// Data.Prompt values: the files of the gold patch, the repository ranked
// by BM25 against the issue, or the instance's own text field.
const (
	PromptOracle = "oracle"
	PromptBM25   = "bm25"
	PromptText   = "text"
)

// UnmarshalJSON reads a Data recorded before data.prompt existed (the
// shipped warm start's recipe) as the oracle prompts it was made with.
func (d *Data) UnmarshalJSON(b []byte) error {
	type plain Data
	p := plain{Prompt: PromptOracle}
	if err := json.Unmarshal(b, &p); err != nil {
		return fmt.Errorf("data: %w", err)
	}
	*d = Data(p)
	return nil
}

// Model is the policy's architecture and where its weights start from.
type Model struct {
	Layers    int     `toml:"layers"`
	DModel    int     `toml:"d_model"`
	Heads     int     `toml:"heads"`
	KVHeads   int     `toml:"kv_heads"`
	DFF       int     `toml:"d_ff"`
	Context   int     `toml:"context"`
	VocabSize int     `toml:"vocab_size"`
	RopeTheta float64 `toml:"rope_theta"`
	InitCkpt  string  `toml:"init_ckpt"`
	Tokenizer string  `toml:"tokenizer"`
	// Device is "cpu", "cuda" (GPU 0), "cuda:N", or several GPUs trained
	// data-parallel: "cuda:all" or a list "cuda:0,1".
	Device string `toml:"device"`
	// CUDALibs are folders searched first for libcuda, cuBLAS and NVRTC.
	CUDALibs []string `toml:"cuda_libs"`
	// MicroTokens bounds one micro-batch (sequences × padded length) of
	// the device engine's passes and of gorgonia's graphs; a group of long
	// completions is split into micro-batches whose gradients add up.
	MicroTokens int `toml:"micro_tokens"`
	// Recompute is the device engine's recomputed activations: "auto" (on
	// only when the memory plan does not fit the device without them),
	// "on" or "off". The backward runs each layer's forward again instead
	// of keeping its activations: the same gradients, about a third more
	// time a step.
	Recompute string `toml:"recompute"`
	// ShardOptimizer is ZeRO-1 across the GPUs of a data-parallel run:
	// each GPU keeps and updates only its 1/N share of the AdamW moments.
	// `swetui plan --gpus N` counts it.
	ShardOptimizer bool `toml:"shard_optimizer"`
}

// LoRA trains low-rank adapters beside frozen weights (Hu et al., 2021)
// instead of every weight; rank 0 trains every weight.
type LoRA struct {
	Rank  int     `toml:"rank"`
	Alpha float64 `toml:"alpha"`
	// Dropout must be 0: GRPO's ratio compares two passes' logprobs of the
	// same tokens, which dropout would make differ; kept so that PEFT's
	// key is recognised and refused with that reason.
	Dropout float64  `toml:"dropout"`
	Targets []string `toml:"targets"`
}

// Sample controls how completions are drawn from the policy.
type Sample struct {
	Temperature  float64 `toml:"temperature"`
	TopP         float64 `toml:"top_p"`
	MaxNewTokens int     `toml:"max_new_tokens"`
}

// Optim is the AdamW optimiser and its learning-rate schedule.
type Optim struct {
	LR          float64 `toml:"lr"`
	WeightDecay float64 `toml:"weight_decay"`
	Beta1       float64 `toml:"beta1"`
	Beta2       float64 `toml:"beta2"`
	Eps         float64 `toml:"eps"`
	GradClip    float64 `toml:"grad_clip"`
	Warmup      int     `toml:"warmup_steps"`
	Schedule    string  `toml:"schedule"`
}

// GRPO holds the algorithm's knobs.
type GRPO struct {
	GroupSize      int     `toml:"group_size"`
	PromptsPerStep int     `toml:"prompts_per_step"`
	ClipLow        float64 `toml:"clip_low"`
	ClipHigh       float64 `toml:"clip_high"`
	KLCoef         float64 `toml:"kl_coef"`
	KLEstimator    string  `toml:"kl_estimator"`
	ScaleRewards   string  `toml:"scale_rewards"`
	LeaveOneOut    bool    `toml:"leave_one_out"`
	LossAgg        string  `toml:"loss_agg"`
	MaskTruncated  bool    `toml:"mask_truncated"`
	StdEps         float64 `toml:"std_eps"`
	ISCorrection   string  `toml:"is_correction"`
	ISCap          float64 `toml:"is_cap"`
	// DAPO's dynamic sampling: draw more tasks until the step holds
	// prompts_per_step groups with reward variance, at most max_groups.
	DynamicSampling  bool        `toml:"dynamic_sampling"`
	MaxGroups        int         `toml:"max_groups"`
	GroupSizeByPhase PhaseGroups `toml:"group_size_by_phase"`
	// Loss variants peers offer. Dr. GRPO is scale_rewards "none" with
	// loss_agg "seq-sum-constant"; GSPO is ratio "sequence"; DAPO's soft
	// overlong punishment is overlong_buffer > 0; no KL is kl_coef 0.
	Ratio           string  `toml:"ratio"`
	OverlongBuffer  int     `toml:"overlong_buffer"`
	OverlongPenalty float64 `toml:"overlong_penalty"`
	Async           Async   `toml:"async"`
}

// PhaseGroups overrides grpo.group_size in one curriculum phase; 0 keeps it.
type PhaseGroups struct {
	Syntax    int `toml:"syntax"`
	ApplyOnly int `toml:"apply_only"`
	Docker    int `toml:"docker"`
}

// GroupSizeIn is G in the given phase.
func (g GRPO) GroupSizeIn(phase string) int {
	n := 0
	switch phase {
	case PhaseSyntax:
		n = g.GroupSizeByPhase.Syntax
	case PhaseApplyOnly:
		n = g.GroupSizeByPhase.ApplyOnly
	case PhaseDocker:
		n = g.GroupSizeByPhase.Docker
	}
	if n == 0 {
		return g.GroupSize
	}
	return n
}

// Async configures the overlapped generate/score/train loop.
type Async struct {
	Enabled               bool `toml:"enabled"`
	MaxTrajectoryAgeSteps int  `toml:"max_trajectory_age_steps"`
	BufferGroups          int  `toml:"buffer_groups"`
}

// Curriculum chooses the reward mode and when to move between modes.
type Curriculum struct {
	Phase         string  `toml:"phase"`
	Auto          bool    `toml:"auto"`
	Window        int     `toml:"window"`
	SyntaxToApply float64 `toml:"syntax_to_apply"`
	ApplyToDocker float64 `toml:"apply_to_docker"`
	StepBackBelow float64 `toml:"step_back_below"`
	// TaskSampler picks each group's task: "epoch" (a seeded shuffle per
	// epoch) or "pass-rate" (tasks at the edge of the policy's ability
	// drawn more often).
	TaskSampler string  `toml:"task_sampler"`
	PoolFloor   float64 `toml:"pool_floor"`
}

// Reward weighs the parts of the reward.
type Reward struct {
	ApplyBonus  float64 `toml:"apply_bonus"`
	TestWeight  float64 `toml:"test_weight"`
	P2PPenalty  float64 `toml:"p2p_penalty"`
	HackPenalty float64 `toml:"hack_penalty"`
	ReposDir    string  `toml:"repos_dir"`
	ApplyOnHost bool    `toml:"apply_on_host"`
	// Shaping terms between apply-only and docker (reward.Weights.Compose).
	SimilarityWeight float64 `toml:"similarity_weight"`
	HunkCredit       float64 `toml:"hunk_credit"`
	RejectNoop       bool    `toml:"reject_noop"`
	// A patch past any of these limits is the patch's failure (never the
	// infrastructure's), scored before anything applies it: bytes of its
	// diff, files it touches, text hunks in all.
	MaxPatchKB    int `toml:"max_patch_kb"`
	MaxPatchFiles int `toml:"max_patch_files"`
	MaxPatchHunks int `toml:"max_patch_hunks"`
	// Verifier names a verifier (swetui verifier train) that gates the
	// docker phase: a patch that applies and that it puts below
	// VerifierSkipBelow is not run in Docker (it earns what an applied,
	// unresolved patch earns), but for a VerifierAudit share chosen at
	// random, which runs and measures its misses; past VerifierMaxMiss
	// of the audited, the gate is off for the rest of the run. "": none.
	Verifier          string  `toml:"verifier"`
	VerifierSkipBelow float64 `toml:"verifier_skip_below"`
	VerifierAudit     float64 `toml:"verifier_audit"`
	VerifierMaxMiss   float64 `toml:"verifier_max_miss"`
	// VerifierRefreshSteps, when above 0, retrains the verifier from the
	// run's own docker verdicts every that many steps, in the background on
	// the CPU (from reward.verifier's checkpoint), and swaps it into the
	// gate once trained: a step never waits for it.
	VerifierRefreshSteps int `toml:"verifier_refresh_steps"`
}

// Sandbox configures the Docker reward pool.
type Sandbox struct {
	Workers   int      `toml:"workers"`
	Queue     int      `toml:"queue"`
	TimeoutS  int      `toml:"timeout_s"`
	MemoryMB  int      `toml:"memory_mb"`
	CPUs      float64  `toml:"cpus"`
	PidsLimit int      `toml:"pids_limit"`
	LogCapKB  int      `toml:"log_cap_kb"`
	Retries   int      `toml:"retries"`
	Hosts     []string `toml:"hosts"`
	Image     string   `toml:"image"`
	User      string   `toml:"user"`
	DiskMB    int      `toml:"disk_mb"`
	TmpMB     int      `toml:"tmp_mb"`
	CapAdd    []string `toml:"cap_add"`
	// ReadOnlyRoot makes the root filesystem read-only, the workdir, /tmp
	// and /swetui writable.
	ReadOnlyRoot bool `toml:"read_only_root"`
	// Kubernetes configures the hosts that are Kubernetes namespaces
	// (k8s://[context]/namespace in Hosts).
	Kubernetes Kubernetes `toml:"kubernetes"`
}

// Kubernetes configures the evaluations' Pods on a k8s:// host.
type Kubernetes struct {
	// Registry is where the Pods pull the images from, host[:port][/prefix]
	// ("" = prepare.registry; with neither, the image names as they are).
	Registry         string   `toml:"registry"`
	ImagePullPolicy  string   `toml:"image_pull_policy"`  // Always, IfNotPresent or Never
	ImagePullSecrets []string `toml:"image_pull_secrets"` // Secrets in the namespace
	RuntimeClass     string   `toml:"runtime_class"`      // e.g. gvisor, kata; "" = the cluster's default
}

// Prepare says how `swetui prepare` gets the images of a dataset whose
// instances name none: built FROM a base image with the repository at
// /testbed, or pulled from (and pushed to) a registry.
type Prepare struct {
	BaseImage string   `toml:"base_image"`
	RepoURL   string   `toml:"repo_url"`
	History   string   `toml:"history"`
	ImagePer  string   `toml:"image_per"`
	Install   []string `toml:"install"`
	Network   string   `toml:"network"`
	Registry  string   `toml:"registry"`
	Push      bool     `toml:"push"`
}

// Prepare.History and Prepare.ImagePer values.
const (
	HistoryBase      = "base"
	HistoryFull      = "full"
	ImagePerAuto     = "auto"
	ImagePerRepo     = "repo"
	ImagePerInstance = "instance"
)

// SFT configures the supervised warm start on gold patches.
type SFT struct {
	Steps     int     `toml:"steps"`
	BatchSize int     `toml:"batch_size"`
	LR        float64 `toml:"lr"`
	// SyntheticPerTask extra examples per task, each a small bug injected
	// into the task's files and the diff that reverts it.
	SyntheticPerTask int `toml:"synthetic_per_task"`
	// PromptLossWeight > 0 also trains on the prompts' tokens, weighted this
	// much against the completions'.
	PromptLossWeight float64 `toml:"prompt_loss_weight"`
	// ContextLines > 0 cuts the context around each change of the gold
	// replies to this many lines: fewer lines the policy must copy exactly.
	ContextLines int `toml:"context_lines"`
	// RenameFrac of the synthetic fixes have their package folders renamed
	// to made-up names, in prompt and reply alike.
	RenameFrac float64 `toml:"rename_frac"`
	// HeldoutEvery steps the held-out split's gold replies are scored; 0 = never.
	HeldoutEvery int    `toml:"heldout_every"`
	Out          string `toml:"out"`
	// SaveEvery steps an unfinished warm start is saved, so that a stopped
	// or killed run (or `swetui sft`) continues it; 0 = only when it stops.
	SaveEvery int `toml:"save_every"`
	// Shipped uses the warm start shipped for the embedded suite when the
	// run's recipe matches it (package warmstart), instead of training one.
	Shipped bool `toml:"shipped"`
}

// Watchdog bounds how long the trainer may go without progress.
type Watchdog struct {
	StallS       int `toml:"stall_s"`
	BarrenEpochs int `toml:"barren_epochs"`
}

// UI configures the console.
type UI struct {
	RefreshMS int `toml:"refresh_ms"`
	LogLines  int `toml:"log_lines"`
	History   int `toml:"history"`
}

// Serve configures `swetui serve`, the reward engine as an HTTP service.
type Serve struct {
	// Addr is the listen address; any but a loopback one needs a token.
	Addr string `toml:"addr"`
	// TokenFile holds the bearer token clients must send (SWETUI_SERVE_TOKEN
	// also sets it); never the token itself, which `swetui config` prints.
	TokenFile string `toml:"token_file"`
	// Concurrency is how many requests are scored at once (0: sandbox.workers);
	// Queue how many more wait, past which a request is answered 429.
	Concurrency int `toml:"concurrency"`
	Queue       int `toml:"queue"`
	MaxPatches  int `toml:"max_patches"`
	MaxBodyKB   int `toml:"max_body_kb"`
	// RequestTimeoutS bounds a request's whole time, its wait included.
	RequestTimeoutS int `toml:"request_timeout_s"`
	// DrainS is how long a stopping server lets requests in flight finish
	// before it cancels their evaluations.
	DrainS int `toml:"drain_s"`
	// CacheEntries verdicts are kept by a content hash of (instance, patch,
	// phase); 0 turns the cache off.
	CacheEntries int `toml:"cache_entries"`
	// CacheMB bounds the cache by the bytes its verdicts hold, whichever
	// limit comes first.
	CacheMB int `toml:"cache_mb"`
	// InflightMB bounds the request bodies held at once (read, waiting or
	// being scored); past it a request is answered 429.
	InflightMB int `toml:"inflight_mb"`
	// BodyTimeoutS is how long a request's headers and body may take to
	// arrive (408 past it).
	BodyTimeoutS int `toml:"body_timeout_s"`
	// Agent sessions (/v1/sessions): open at once in all and for one token,
	// closed after SessionIdleS unused; a command's timeout at most and the
	// KiB of its output answered.
	MaxSessions      int `toml:"max_sessions"`
	SessionsPerToken int `toml:"sessions_per_token"`
	SessionIdleS     int `toml:"session_idle_s"`
	ExecTimeoutS     int `toml:"exec_timeout_s"`
	ExecOutputKB     int `toml:"exec_output_kb"`
	// InlineInstances accepts whole instances in a request's body.
	InlineInstances bool `toml:"inline_instances"`
}

// Phase names of the curriculum, in order.
const (
	PhaseSyntax    = "syntax"
	PhaseApplyOnly = "apply-only"
	PhaseDocker    = "docker"
)

// Task samplers (curriculum.task_sampler).
const (
	SamplerEpoch    = "epoch"
	SamplerPassRate = "pass-rate"
)

// Phases lists the curriculum's phases in the order they are taken.
var Phases = []string{PhaseSyntax, PhaseApplyOnly, PhaseDocker}

// CheckPhase is the one check that a phase name is one of Phases; every
// place that takes a phase (config, the scorer, live switches, --mode)
// calls it.
func CheckPhase(phase string) error {
	if !slices.Contains(Phases, phase) {
		return fmt.Errorf("phase %q: want one of %s", phase, strings.Join(Phases, ", "))
	}
	return nil
}

// Default returns the built-in configuration; config.toml mirrors it.
func Default() Config {
	return Config{
		Run: Run{Seed: 1, MaxSteps: 1000, OutDir: "runs", SaveEvery: 25, KeepLast: 3, Resume: "auto", SFTFirst: true, SaveDtype: "auto"},
		Data: Data{Source: "mini", Split: "train", Include: []string{}, Exclude: []string{},
			MiniSeed: 1, MiniTasks: 300, TestFrac: 0.1, Prompt: PromptOracle},
		Model: Model{Layers: 4, DModel: 128, Heads: 4, KVHeads: 2, DFF: 384, Context: 1024,
			VocabSize: 2048, RopeTheta: 10000, Device: "cpu", CUDALibs: []string{}, MicroTokens: 16384, Recompute: "auto", ShardOptimizer: true},
		Sample: Sample{Temperature: 0.9, TopP: 1.0, MaxNewTokens: 256},
		Optim: Optim{LR: 1e-4, WeightDecay: 0.0, Beta1: 0.9, Beta2: 0.99, Eps: 1e-8, GradClip: 1.0,
			Warmup: 10, Schedule: "constant"},
		GRPO: GRPO{GroupSize: 4, PromptsPerStep: 2, ClipLow: 0.2, ClipHigh: 0.28, KLCoef: 0.02,
			KLEstimator: "k3", ScaleRewards: "group", LossAgg: "token-mean", StdEps: 1e-6,
			ISCorrection: "none", ISCap: 2.0, DynamicSampling: true, MaxGroups: 8, Ratio: "token", OverlongPenalty: 1.0,
			Async: Async{MaxTrajectoryAgeSteps: 1, BufferGroups: 8}},
		Curriculum: Curriculum{Phase: PhaseSyntax, Auto: true, Window: 20, SyntaxToApply: 0.8,
			ApplyToDocker: 0.5, StepBackBelow: 0, TaskSampler: SamplerEpoch, PoolFloor: 0.05},
		Reward: Reward{ApplyBonus: 0.3, TestWeight: 0.7, P2PPenalty: 0.5, HackPenalty: 1, ApplyOnHost: true,
			SimilarityWeight: 0.5, HunkCredit: 0.5, RejectNoop: true, MaxPatchKB: 1024, MaxPatchFiles: 100, MaxPatchHunks: 2000,
			VerifierSkipBelow: 0.1, VerifierAudit: 0.1, VerifierMaxMiss: 0.05},
		Sandbox: Sandbox{Workers: 2, Queue: 64, TimeoutS: 300, MemoryMB: 2048, CPUs: 1, PidsLimit: 256,
			LogCapKB: 1024, Retries: 2, Hosts: []string{}, Image: "swetui/mini:latest",
			Kubernetes: Kubernetes{ImagePullPolicy: "IfNotPresent", ImagePullSecrets: []string{}},
			DiskMB:     1024, TmpMB: 256, CapAdd: []string{}, ReadOnlyRoot: true},
		Prepare:  Prepare{History: HistoryBase, ImagePer: ImagePerAuto, Install: []string{}, Network: "none"},
		SFT:      SFT{Steps: 1200, BatchSize: 4, LR: 1e-3, SyntheticPerTask: 8, PromptLossWeight: 1, HeldoutEvery: 100, SaveEvery: 50, Shipped: true},
		LoRA:     LoRA{Rank: 0, Alpha: 32, Targets: []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}},
		Watchdog: Watchdog{StallS: 900, BarrenEpochs: 3},
		UI:       UI{RefreshMS: 100, LogLines: 10000, History: 10000},
		Rollout:  Rollout{Mode: RolloutSingle},
		Agent: Agent{Context: 4096, Turns: 10, EvalTurns: 50, GroupSize: 8, MaxGroups: 2, CommandTimeoutS: 60, TimeoutBudget: 5, ObservationChars: 10000, ObservationTokens: 2048,
			Unfinished: UnfinishedZero, SessionMinutes: 120, BackgroundCPUS: 600, Executor: ExecutorSandbox},
		Serve: Serve{Addr: "127.0.0.1:8765", Queue: 64, MaxPatches: 64, MaxBodyKB: 16384, RequestTimeoutS: 1800,
			DrainS: 30, CacheEntries: 4096, CacheMB: 64, InflightMB: 256, BodyTimeoutS: 60, InlineInstances: true,
			MaxSessions: 8, SessionsPerToken: 8, SessionIdleS: 600, ExecTimeoutS: 120, ExecOutputKB: 64},
	}
}
