package config

import (
	"fmt"
	"math"
	"net"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// Problem is one invalid setting: the key, its value and why it is wrong.
type Problem struct {
	Key   string
	Value any
	Why   string
}

func (p Problem) String() string { return fmt.Sprintf("%s = %v: %s", p.Key, p.Value, p.Why) }

// Problems is every problem Validate found; it is an error.
type Problems []Problem

func (ps Problems) Error() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = "  " + p.String()
	}
	return fmt.Sprintf("invalid config (%d problem(s)):\n%s", len(ps), strings.Join(lines, "\n"))
}

// MaxMiniTasks bounds data.mini_tasks: the embedded suite is generated in
// memory at every start, each task a repository of its own.
const MaxMiniTasks = 2000

// Validate checks cfg and returns every problem at once, or nil.
func Validate(cfg Config) error {
	var ps Problems
	// NaN and Inf pass every comparison below unnoticed (NaN < 0 is false):
	// no float knob may hold one.
	nonFinite(reflect.ValueOf(cfg), "", &ps)
	check := func(bad bool, key string, value any, why string) {
		if bad && !ps.has(key) {
			ps = append(ps, Problem{key, value, why})
		}
	}
	oneOf := func(key, value string, allowed ...string) {
		check(!slices.Contains(allowed, value), key, fmt.Sprintf("%q", value),
			"must be one of "+strings.Join(allowed, ", "))
	}
	positive := func(key string, n int) { check(n < 1, key, n, "must be at least 1") }
	unit := func(key string, x float64) { check(x < 0 || x > 1, key, x, "must be between 0 and 1") }

	r := cfg.Run
	check(r.MaxSteps < 0, "run.max_steps", r.MaxSteps, "must be 0 (no limit) or more")
	check(r.MaxMinutes < 0, "run.max_minutes", r.MaxMinutes, "must be 0 (no limit) or more")
	check(r.OutDir == "", "run.out_dir", `""`, "must name a folder")
	check(r.SaveEvery < 0, "run.save_every", r.SaveEvery, "must be 0 (only at stop) or more")
	positive("run.keep_last", r.KeepLast)
	check(r.Resume == "", "run.resume", `""`, `must be "auto", "never" or a checkpoint path`)
	oneOf("run.save_dtype", r.SaveDtype, "auto", "bf16", "f32")

	d := cfg.Data
	check(d.Source == "", "data.source", `""`, `must be "mini" or a path to a .jsonl, .json or .parquet file`)
	oneOf("data.split", d.Split, "train", "test", "all")
	check(d.TrainLimit < 0, "data.train_limit", d.TrainLimit, "must be 0 (all) or more")
	positive("data.mini_tasks", d.MiniTasks)
	check(d.MiniTasks > MaxMiniTasks, "data.mini_tasks", d.MiniTasks,
		fmt.Sprintf("must be at most %d: the embedded suite is generated in memory at every start (default 300)", MaxMiniTasks))
	check(d.TestFrac <= 0 || d.TestFrac >= 1, "data.test_fraction", d.TestFrac, "must be strictly between 0 and 1")
	oneOf("data.prompt", d.Prompt, PromptOracle, PromptBM25, PromptText)
	check(d.PromptTokens < 0, "data.prompt_tokens", d.PromptTokens, "must be 0 (what the model context leaves) or more")
	check(d.PromptTokens > cfg.Model.Context-cfg.Sample.MaxNewTokens && cfg.Sample.MaxNewTokens < cfg.Model.Context, "data.prompt_tokens", d.PromptTokens,
		fmt.Sprintf("must be at most model.context - sample.max_new_tokens (%d): the rest of the prompt would be cut", cfg.Model.Context-cfg.Sample.MaxNewTokens))

	m := cfg.Model
	positive("model.layers", m.Layers)
	positive("model.d_model", m.DModel)
	positive("model.heads", m.Heads)
	positive("model.kv_heads", m.KVHeads)
	positive("model.d_ff", m.DFF)
	check(m.Context < 16, "model.context", m.Context, "must be at least 16")
	check(m.VocabSize < 260, "model.vocab_size", m.VocabSize, "must be at least 260 (256 bytes plus special tokens)")
	check(m.RopeTheta <= 0, "model.rope_theta", m.RopeTheta, "must be positive")
	positive("model.micro_tokens", m.MicroTokens)
	oneOf("model.recompute", m.Recompute, "auto", "on", "off")
	lo := cfg.LoRA
	check(lo.Rank < 0, "lora.rank", lo.Rank, "must be 0 (train every weight) or more")
	check(lo.Rank > 0 && !(lo.Alpha > 0), "lora.alpha", lo.Alpha, "must be more than 0")
	check(lo.Dropout != 0, "lora.dropout", lo.Dropout,
		"must be 0: GRPO's importance ratio compares the logprobs of two passes over the same tokens, which dropout would make differ")
	check(lo.Rank > 0 && len(lo.Targets) == 0, "lora.targets", "[]", "must name at least one projection")
	for _, t := range lo.Targets {
		oneOf("lora.targets", t, "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
	}
	check(!validDevice(m.Device), "model.device", fmt.Sprintf("%q", m.Device), `must be "cpu", "cuda", "cuda:N", "cuda:all" or a list "cuda:0,1" of distinct GPUs`)
	if m.Heads > 0 && m.DModel > 0 {
		check(m.DModel%m.Heads != 0, "model.d_model", m.DModel, fmt.Sprintf("must be a multiple of model.heads (%d)", m.Heads))
		check((m.DModel/m.Heads)%2 != 0, "model.d_model", m.DModel, "d_model/heads must be even for RoPE")
	}
	if m.Heads > 0 && m.KVHeads > 0 {
		check(m.Heads%m.KVHeads != 0, "model.kv_heads", m.KVHeads, fmt.Sprintf("must divide model.heads (%d)", m.Heads))
	}

	s := cfg.Sample
	if err := CheckTemperature(s.Temperature, false); err != nil {
		check(true, "sample.temperature", s.Temperature, err.Error())
	}
	check(s.TopP <= 0 || s.TopP > 1, "sample.top_p", s.TopP, "must be in (0, 1]")
	positive("sample.max_new_tokens", s.MaxNewTokens)
	check(s.MaxNewTokens >= m.Context, "sample.max_new_tokens", s.MaxNewTokens,
		fmt.Sprintf("must be below model.context (%d) to leave room for the prompt", m.Context))

	o := cfg.Optim
	check(o.LR <= 0, "optim.lr", o.LR, "must be positive")
	check(o.WeightDecay < 0, "optim.weight_decay", o.WeightDecay, "must be 0 or more")
	check(o.Beta1 < 0 || o.Beta1 >= 1, "optim.beta1", o.Beta1, "must be in [0, 1)")
	check(o.Beta2 < 0 || o.Beta2 >= 1, "optim.beta2", o.Beta2, "must be in [0, 1)")
	check(o.Eps <= 0, "optim.eps", o.Eps, "must be positive")
	check(o.GradClip < 0, "optim.grad_clip", o.GradClip, "must be 0 (off) or more")
	check(o.Warmup < 0, "optim.warmup_steps", o.Warmup, "must be 0 or more")
	oneOf("optim.schedule", o.Schedule, "constant", "cosine")

	g := cfg.GRPO
	check(g.GroupSize < 2, "grpo.group_size", g.GroupSize, "must be at least 2: advantages compare completions within a group")
	positive("grpo.prompts_per_step", g.PromptsPerStep)
	check(g.ClipLow < 0 || g.ClipLow >= 1, "grpo.clip_low", g.ClipLow, "must be in [0, 1)")
	check(g.ClipHigh < 0, "grpo.clip_high", g.ClipHigh, "must be 0 or more")
	check(g.KLCoef < 0, "grpo.kl_coef", g.KLCoef, "must be 0 (off) or more")
	oneOf("grpo.kl_estimator", g.KLEstimator, "k1", "k2", "k3")
	oneOf("grpo.scale_rewards", g.ScaleRewards, "group", "batch", "none")
	oneOf("grpo.loss_agg", g.LossAgg, "token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-sum-constant")
	check(g.StdEps <= 0, "grpo.std_eps", g.StdEps, "must be positive")
	oneOf("grpo.is_correction", g.ISCorrection, "none", "truncated")
	check(g.ISCap < 1, "grpo.is_cap", g.ISCap, "must be at least 1")
	oneOf("grpo.ratio", g.Ratio, "token", "sequence")
	check(g.OverlongBuffer < 0, "grpo.overlong_buffer", g.OverlongBuffer, "must be 0 (off) or more")
	check(g.OverlongBuffer > 0 && g.OverlongBuffer >= s.MaxNewTokens, "grpo.overlong_buffer", g.OverlongBuffer,
		fmt.Sprintf("must be below sample.max_new_tokens (%d): the punishment ramps over the last overlong_buffer tokens before the cap", s.MaxNewTokens))
	check(g.OverlongPenalty < 0, "grpo.overlong_penalty", g.OverlongPenalty, "must be 0 or more")
	if g.Async.Enabled {
		check(g.ISCorrection == "none", "grpo.is_correction", `"none"`,
			`async mode (grpo.async.enabled = true) requires importance-sampling correction: set "truncated"`)
	}
	check(g.Async.MaxTrajectoryAgeSteps < 0, "grpo.async.max_trajectory_age_steps", g.Async.MaxTrajectoryAgeSteps, "must be 0 or more")
	positive("grpo.async.buffer_groups", g.Async.BufferGroups)
	check(g.MaxGroups < g.PromptsPerStep, "grpo.max_groups", g.MaxGroups, "must be at least grpo.prompts_per_step: it counts the step's first groups too")
	for _, p := range []struct {
		key string
		n   int
	}{{"syntax", g.GroupSizeByPhase.Syntax}, {"apply_only", g.GroupSizeByPhase.ApplyOnly}, {"docker", g.GroupSizeByPhase.Docker}} {
		check(p.n == 1 || p.n < 0, "grpo.group_size_by_phase."+p.key, p.n, "must be 0 (grpo.group_size) or at least 2")
	}

	c := cfg.Curriculum
	if err := CheckPhase(c.Phase); err != nil {
		check(true, "curriculum.phase", fmt.Sprintf("%q", c.Phase), "must be one of "+strings.Join(Phases, ", "))
	}
	positive("curriculum.window", c.Window)
	unit("curriculum.syntax_to_apply", c.SyntaxToApply)
	unit("curriculum.apply_to_docker", c.ApplyToDocker)
	unit("curriculum.step_back_below", c.StepBackBelow)
	oneOf("curriculum.task_sampler", c.TaskSampler, SamplerEpoch, SamplerPassRate)
	check(c.PoolFloor <= 0 || c.PoolFloor > 1, "curriculum.pool_floor", c.PoolFloor, "must be in (0, 1]: a task the policy always or never solves is still drawn this often, relative to one at the edge")

	w := cfg.Reward
	unit("reward.apply_bonus", w.ApplyBonus)
	unit("reward.test_weight", w.TestWeight)
	check(w.ApplyBonus+w.TestWeight > 1+1e-9, "reward.test_weight", w.TestWeight,
		fmt.Sprintf("apply_bonus + test_weight must not exceed 1 (apply_bonus is %v)", w.ApplyBonus))
	unit("reward.p2p_penalty", w.P2PPenalty)
	unit("reward.hack_penalty", w.HackPenalty)
	check(w.SimilarityWeight < 0 || w.SimilarityWeight >= 1, "reward.similarity_weight", w.SimilarityWeight,
		"must be in [0, 1): at 1 an unresolved patch as similar as the gold one would earn what a resolved patch does")
	unit("reward.hunk_credit", w.HunkCredit)
	positive("reward.max_patch_kb", w.MaxPatchKB)
	positive("reward.max_patch_files", w.MaxPatchFiles)
	positive("reward.max_patch_hunks", w.MaxPatchHunks)
	unit("reward.verifier_skip_below", w.VerifierSkipBelow)
	unit("reward.verifier_audit", w.VerifierAudit)
	unit("reward.verifier_max_miss", w.VerifierMaxMiss)
	check(w.VerifierRefreshSteps < 0, "reward.verifier_refresh_steps", w.VerifierRefreshSteps, "must be 0 or more")
	check(w.VerifierRefreshSteps > 0 && w.Verifier == "", "reward.verifier_refresh_steps", w.VerifierRefreshSteps,
		"needs reward.verifier: the checkpoint each refresh starts from")

	b := cfg.Sandbox
	positive("sandbox.workers", b.Workers)
	positive("sandbox.queue", b.Queue)
	positive("sandbox.timeout_s", b.TimeoutS)
	check(b.MemoryMB < 64, "sandbox.memory_mb", b.MemoryMB, "must be at least 64")
	check(b.CPUs <= 0, "sandbox.cpus", b.CPUs, "must be positive")
	check(b.PidsLimit < 16, "sandbox.pids_limit", b.PidsLimit, "must be at least 16")
	positive("sandbox.log_cap_kb", b.LogCapKB)
	check(b.Retries < 0, "sandbox.retries", b.Retries, "must be 0 or more")
	check(b.DiskMB < 0, "sandbox.disk_mb", b.DiskMB, "must be 0 (no bound) or more")
	check(b.TmpMB < 1, "sandbox.tmp_mb", b.TmpMB, "must be at least 1")
	for i, c := range b.CapAdd {
		check(c == "" || strings.ContainsAny(c, " ,") || strings.EqualFold(c, "ALL"), fmt.Sprintf("sandbox.cap_add[%d]", i), fmt.Sprintf("%q", c),
			`must name one capability, such as "DAC_OVERRIDE"`)
	}
	check(b.Image == "", "sandbox.image", `""`, "must name the image of the embedded suite")
	for i, h := range b.Hosts {
		ok := strings.HasPrefix(h, "unix://") || strings.HasPrefix(h, "tcp://") || strings.HasPrefix(h, "ssh://") ||
			strings.HasPrefix(h, "k8s://")
		check(!ok, fmt.Sprintf("sandbox.hosts[%d]", i), fmt.Sprintf("%q", h), "must start with unix://, tcp://, ssh:// or k8s://")
	}
	k := b.Kubernetes
	for _, h := range b.Hosts {
		if strings.HasPrefix(h, "k8s://") && b.User != "" && b.User != "root" && !numericUser(b.User) {
			check(true, "sandbox.user", fmt.Sprintf("%q", b.User), fmt.Sprintf("must be numeric (uid[:gid]) with a Kubernetes host (%s): a Pod runs as a number", h))
			break
		}
	}
	oneOf("sandbox.kubernetes.image_pull_policy", k.ImagePullPolicy, "Always", "IfNotPresent", "Never")
	check(strings.Contains(k.Registry, "://"), "sandbox.kubernetes.registry", fmt.Sprintf("%q", k.Registry),
		`must be host[:port][/prefix], without a scheme`)

	pr := cfg.Prepare
	oneOf("prepare.history", pr.History, HistoryBase, HistoryFull)
	oneOf("prepare.image_per", pr.ImagePer, ImagePerAuto, ImagePerRepo, ImagePerInstance)
	check(pr.Network == "", "prepare.network", `""`, `must name a network mode ("none", "default", "host")`)
	for i, in := range pr.Install {
		repo, cmd, ok := strings.Cut(in, ":")
		check(!ok || strings.TrimSpace(cmd) == "" || (strings.TrimSpace(repo) != "*" && !strings.Contains(repo, "/")),
			fmt.Sprintf("prepare.install[%d]", i), fmt.Sprintf("%q", in), `must be "owner/name: command" or "*: command"`)
	}
	check(pr.Push && pr.Registry == "", "prepare.push", true, "needs prepare.registry to push to")
	check(strings.Contains(pr.Registry, "://"), "prepare.registry", fmt.Sprintf("%q", pr.Registry),
		`must be host[:port][/prefix], without a scheme`)

	positive("sft.steps", cfg.SFT.Steps)
	positive("sft.batch_size", cfg.SFT.BatchSize)
	check(cfg.SFT.LR <= 0, "sft.lr", cfg.SFT.LR, "must be positive")
	check(cfg.SFT.PromptLossWeight < 0, "sft.prompt_loss_weight", cfg.SFT.PromptLossWeight, "must be 0 (reply only) or more")
	check(cfg.SFT.HeldoutEvery < 0, "sft.heldout_every", cfg.SFT.HeldoutEvery, "must be 0 (off) or more")
	check(cfg.SFT.SaveEvery < 0, "sft.save_every", cfg.SFT.SaveEvery, "must be 0 (only when the run stops) or more")
	unit("sft.rename_frac", cfg.SFT.RenameFrac)
	check(cfg.SFT.ContextLines < 0, "sft.context_lines", cfg.SFT.ContextLines, "must be 0 (the gold patches as written) or more")
	check(cfg.SFT.SyntheticPerTask < 0, "sft.synthetic_per_task", cfg.SFT.SyntheticPerTask, "must be 0 (none) or more")
	check(cfg.Watchdog.StallS < 0, "watchdog.stall_s", cfg.Watchdog.StallS, "must be 0 (off) or more")
	check(cfg.Watchdog.BarrenEpochs < 0, "watchdog.barren_epochs", cfg.Watchdog.BarrenEpochs, "must be 0 (never stop) or more")
	check(cfg.UI.RefreshMS < 10, "ui.refresh_ms", cfg.UI.RefreshMS, "must be at least 10")
	check(cfg.UI.LogLines < 100, "ui.log_lines", cfg.UI.LogLines, "must be at least 100")
	check(cfg.UI.History < 100, "ui.history", cfg.UI.History, "must be at least 100")

	oneOf("rollout.mode", cfg.Rollout.Mode, RolloutSingle, RolloutAgent)
	ag := cfg.Agent
	positive("agent.context", ag.Context)
	positive("agent.turns", ag.Turns)
	positive("agent.eval_turns", ag.EvalTurns)
	check(ag.GroupSize == 1 || ag.GroupSize < 0, "agent.group_size", ag.GroupSize, "must be 0 (grpo.group_size) or at least 2")
	check(ag.MaxGroups < 0, "agent.max_groups", ag.MaxGroups, "must be 0 (grpo.max_groups) or more")
	positive("agent.command_timeout_s", ag.CommandTimeoutS)
	check(ag.TimeoutBudget < 0, "agent.timeout_budget", ag.TimeoutBudget, "must be 0 (no budget) or more")
	positive("agent.observation_chars", ag.ObservationChars)
	positive("agent.observation_tokens", ag.ObservationTokens)
	positive("agent.session_minutes", ag.SessionMinutes)
	check(ag.BackgroundCPUS < 0, "agent.background_cpu_s", ag.BackgroundCPUS, "must be 0 (no bound) or more")
	oneOf("agent.unfinished", ag.Unfinished, UnfinishedGraded, UnfinishedZero, UnfinishedMask)
	oneOf("agent.executor", ag.Executor, ExecutorSandbox)

	sv := cfg.Serve
	_, _, addrErr := net.SplitHostPort(sv.Addr)
	check(addrErr != nil, "serve.addr", fmt.Sprintf("%q", sv.Addr), "must be host:port (127.0.0.1:8765; port 0 picks a free one)")
	check(sv.Concurrency < 0, "serve.concurrency", sv.Concurrency, "must be 0 (sandbox.workers) or more")
	check(sv.Queue < 0, "serve.queue", sv.Queue, "must be 0 (no waiting: 429 when every slot is busy) or more")
	positive("serve.max_patches", sv.MaxPatches)
	positive("serve.max_body_kb", sv.MaxBodyKB)
	positive("serve.request_timeout_s", sv.RequestTimeoutS)
	check(sv.DrainS < 0, "serve.drain_s", sv.DrainS, "must be 0 (cancel at once) or more")
	check(sv.CacheEntries < 0, "serve.cache_entries", sv.CacheEntries, "must be 0 (no cache) or more")
	check(sv.CacheMB < 0, "serve.cache_mb", sv.CacheMB, "must be 0 (no cache) or more")
	positive("serve.inflight_mb", sv.InflightMB)
	positive("serve.body_timeout_s", sv.BodyTimeoutS)
	check(sv.MaxSessions < 0, "serve.max_sessions", sv.MaxSessions, "must be 0 (no agent sessions) or more")
	positive("serve.sessions_per_token", sv.SessionsPerToken)
	positive("serve.session_idle_s", sv.SessionIdleS)
	positive("serve.exec_timeout_s", sv.ExecTimeoutS)
	positive("serve.exec_output_kb", sv.ExecOutputKB)

	if len(ps) == 0 {
		return nil
	}
	return ps
}

// validDevice accepts model.device's forms (model/cuda.ParseDevices reads
// them): cpu, cuda, cuda:N, cuda:all, or cuda:N,M,... (distinct GPUs).
func validDevice(d string) bool {
	if d == "cpu" || d == "cuda" || d == "cuda:all" {
		return true
	}
	list, ok := strings.CutPrefix(d, "cuda:")
	if !ok {
		return false
	}
	seen := map[string]bool{}
	for _, n := range strings.Split(list, ",") {
		if n == "" || seen[n] || strings.Trim(n, "0123456789") != "" {
			return false
		}
		seen[n] = true
	}
	return true
}

func (ps Problems) has(key string) bool {
	return slices.ContainsFunc(ps, func(p Problem) bool { return p.Key == key })
}

// nonFinite adds a problem for every float field of v (a config struct,
// key its dotted path) that is NaN or infinite.
func nonFinite(v reflect.Value, key string, ps *Problems) {
	switch v.Kind() {
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			tag, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("toml"), ",")
			if tag == "" || tag == "-" {
				continue
			}
			k := tag
			if key != "" {
				k = key + "." + tag
			}
			nonFinite(v.Field(i), k, ps)
		}
	case reflect.Float32, reflect.Float64:
		if x := v.Float(); math.IsNaN(x) || math.IsInf(x, 0) {
			*ps = append(*ps, Problem{key, x, "must be a finite number"})
		}
	case reflect.Slice, reflect.Array:
		for i := 0; i < v.Len(); i++ {
			nonFinite(v.Index(i), fmt.Sprintf("%s[%d]", key, i), ps)
		}
	}
}

// CheckTemperature checks a sampling temperature: finite and positive, or
// 0 for greedy decoding where greedy is allowed.
func CheckTemperature(t float64, greedy bool) error {
	switch {
	case math.IsNaN(t) || math.IsInf(t, 0):
		return fmt.Errorf("must be a finite number")
	case greedy && t < 0:
		return fmt.Errorf("must be 0 (greedy) or positive")
	case !greedy && t <= 0:
		return fmt.Errorf("must be positive")
	}
	return nil
}

// numericUser says whether u is uid or uid:gid.
func numericUser(u string) bool {
	for _, part := range strings.SplitN(u, ":", 2) {
		if _, err := strconv.ParseUint(part, 10, 32); err != nil {
			return false
		}
	}
	return true
}
