package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/internal/durable"
	"github.com/swetui/swetui/model"
	"github.com/swetui/swetui/model/cuda"
	"github.com/swetui/swetui/policy"
	"github.com/swetui/swetui/reward"
	"github.com/swetui/swetui/sandbox"
	"github.com/swetui/swetui/task"
	"github.com/swetui/swetui/train"
	"github.com/swetui/swetui/warmstart"
)

// workspace is what run, sft and eval share: the tasks of a split, their
// repositories on the host, the prompter and the tokenizer.
type workspace struct {
	cfg      config.Config
	tasks    []*task.Instance
	repos    map[string]string // instance id -> host repository (mini suite, or reward.repos_dir clones)
	prompter train.Prompter    // newPrompter's
	tok      *model.Tokenizer
	// chat is the format prompts are written in: model.init_ckpt's own
	// chat template when it is a Hugging Face folder, else ChatML.
	chat train.ChatFormat
	// shipped is the shipped warm start this run uses (its tokenizer is
	// ws.tok); notShipped says why a run that could use one does not.
	// plan is the device memory plan of the policy last opened on a
	// device (devicePolicy), for the logs.
	plan cuda.MemoryPlan
	// sampleOnly > 0 opens the policy to sample that many completions a
	// task and nothing else (eval): on a device, no gradients or moments.
	sampleOnly int
	// source is where a device LoRA run's frozen base is read from, one
	// tensor at a time, straight onto the device (streamsBase).
	source     *model.Weights
	shipped    *warmstart.Provenance
	notShipped string
}

// maxContextBytes bounds the code shown in a prompt: about three bytes a
// token for the byte-level BPE, leaving room for the issue and the reply.
func maxContextBytes(cfg config.Config) int {
	return max(256, 3*(cfg.Model.Context-cfg.Sample.MaxNewTokens)-1024)
}

// openWorkspace loads the split's tasks, finds their repositories and
// loads or trains the tokenizer (saved as <run.out_dir>/tokenizer.json so a
// resumed run tokenises as before), or takes model.init_ckpt's tokenizer
// and chat format when that is a Hugging Face model folder.
func openWorkspace(ctx context.Context, cfg config.Config, split string) (*workspace, error) {
	cfg.Data.Split = split
	insts, err := task.Load(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("dataset %s: %w", cfg.Data.Source, err)
	}
	ws := &workspace{cfg: cfg, repos: map[string]string{}}
	for i := range insts {
		ws.tasks = append(ws.tasks, &insts[i])
	}
	if cfg.Data.Source == task.MiniSource {
		if ws.repos, err = task.MaterializeMini(ctx, task.DefaultCacheDir(), cfg); err != nil {
			return nil, err
		}
	} else {
		ws.findRepos(ws.tasks)
	}
	// The tokenizer is trained on the prompts, so their budget is first
	// counted by an estimate, then by the tokenizer.
	ws.prompter = ws.newPrompter(nil)
	if err := ws.loadTokenizer(ctx); err != nil {
		return nil, err
	}
	ws.prompter = ws.newPrompter(func(s string) int { return len(ws.tok.Encode(s)) })
	return ws, nil
}

// promptBudget is the prompt's token budget: data.prompt_tokens, or what
// model.context leaves after sample.max_new_tokens; 0 for the default
// oracle prompts, cut by maxContextBytes as the shipped warm start's were.
func promptBudget(cfg config.Config) int {
	switch {
	case cfg.Data.PromptTokens > 0:
		return cfg.Data.PromptTokens
	case cfg.Data.Prompt == config.PromptOracle:
		return 0
	}
	return cfg.Model.Context - cfg.Sample.MaxNewTokens
}

// newPrompter builds data.prompt's prompter; count is the run's token
// count (nil: an estimate).
func (ws *workspace) newPrompter(count func(string) int) train.Prompter {
	rp := train.RepoPrompter{Setting: ws.cfg.Data.Prompt, Budget: promptBudget(ws.cfg), Count: count, Chat: ws.chat,
		RepoDir: func(ctx context.Context, in *task.Instance) (string, error) {
			if dir, ok := ws.repos[in.InstanceID]; ok {
				return dir, nil
			}
			return "", fmt.Errorf("no repository for %s on this host (set reward.repos_dir to a folder of clones named %s)",
				in.InstanceID, reward.RepoDirName(in.Repo))
		}}
	if rp.Budget > 0 {
		rp.Cache = train.NewPromptCache()
	} else {
		rp.MaxContextBytes = maxContextBytes(ws.cfg)
	}
	if ws.cfg.Data.Prompt == config.PromptText {
		return train.TextPrompter{Fallback: rp}
	}
	return rp
}

// findRepos records the reward.repos_dir clones of tasks' repositories.
func (ws *workspace) findRepos(tasks []*task.Instance) {
	if ws.cfg.Reward.ReposDir == "" {
		return
	}
	for _, in := range tasks {
		dir := filepath.Join(ws.cfg.Reward.ReposDir, reward.RepoDirName(in.Repo))
		if _, err := os.Stat(dir); err == nil {
			ws.repos[in.InstanceID] = dir
		}
	}
}

// maxHeldout bounds the held-out tasks the warm start scores, so that the
// measurement stays a small share of its time on a large dataset.
const maxHeldout = 64

// heldoutExamples are the test split's (prompt, gold reply) pairs whose loss
// the warm start reports (the first maxHeldout, whatever data.include and
// data.train_limit select for training); none when sft.heldout_every is 0 or
// the dataset has no test split.
func (ws *workspace) heldoutExamples(ctx context.Context) ([]train.SFTExample, error) {
	c := ws.cfg
	if c.SFT.HeldoutEvery == 0 {
		return nil, nil
	}
	c.Data.Split, c.Data.Include, c.Data.TrainLimit = task.SplitTest, nil, maxHeldout
	insts, err := task.Load(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("held-out split: %w", err)
	}
	tasks := make([]*task.Instance, len(insts))
	for i := range insts {
		tasks[i] = &insts[i]
	}
	if c.Data.Source != task.MiniSource {
		ws.findRepos(tasks)
	}
	ex, _, err := train.SFTExamples(ctx, tasks, ws.prompter, ws.tok, train.SFTData{Context: c.Model.Context, MaxNew: c.Sample.MaxNewTokens,
		ContextLines: c.SFT.ContextLines, Chat: ws.chat})
	return ex, err
}

// loadTokenizer loads model.tokenizer; else model.init_ckpt's tokenizer
// and chat format (hfFolder); else <run.out_dir>/tokenizer.json, trained
// there first when there is none. Only a model folder changes the chat
// format: a tokenizer named by model.tokenizer or trained by swetui writes
// ChatML, as it always has.
func (ws *workspace) loadTokenizer(ctx context.Context) error {
	path := ws.cfg.Model.Tokenizer
	if dir, ok := hfFolder(ws.cfg.Model.InitCkpt); ok && path == "" {
		if err := ws.loadTokenizerFile(filepath.Join(dir, "tokenizer.json")); err != nil {
			return err
		}
		chat, err := train.LoadChatFormat(dir, ws.tok)
		if err != nil {
			return fmt.Errorf("model.init_ckpt: %w", err)
		}
		ws.chat = chat
		return nil
	}
	if path == "" {
		path = filepath.Join(ws.cfg.Run.OutDir, "tokenizer.json")
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			return ws.trainTokenizer(ctx, path)
		}
	}
	return ws.loadTokenizerFile(path)
}

// hfFolder is the model folder of model.init_ckpt (a run checkpoint's
// policy/, as loadModel reads it) when it holds a tokenizer.json: a Hugging
// Face model, a checkpoint swetui wrote, or an adapter folder (which
// carries its base's tokenizer and chat template).
func hfFolder(initCkpt string) (string, bool) {
	if initCkpt == "" {
		return "", false
	}
	dir := modelDir(initCkpt)
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		return "", false
	}
	return dir, true
}

func (ws *workspace) loadTokenizerFile(path string) error {
	tok, err := model.LoadTokenizer(path)
	if err != nil {
		return fmt.Errorf("tokenizer: %w", err)
	}
	ws.tok = tok
	return nil
}

// tokenizerTexts are what the policy reads and writes: every training
// task's prompt and gold reply.
func (ws *workspace) tokenizerTexts(ctx context.Context) ([]string, error) {
	var texts []string
	for _, in := range ws.tasks {
		p, err := ws.prompter.Prompt(ctx, in)
		if err != nil {
			return nil, err
		}
		texts = append(texts, p, ws.chat.GoldCompletion(in.Patch))
	}
	return texts, nil
}

// trainTokenizer trains the byte-level BPE on the tokenizer texts, or, when
// the run can use the shipped warm start, takes that one's tokenizer.
func (ws *workspace) trainTokenizer(ctx context.Context, path string) error {
	texts, err := ws.tokenizerTexts(ctx)
	if err != nil {
		return err
	}
	if ws.cfg.SFT.Shipped && ws.cfg.Run.SFTFirst && ws.cfg.Model.InitCkpt == "" && ws.cfg.Data.Source == task.MiniSource {
		prov, ok, err := warmstart.Shipped()
		switch {
		case err != nil:
			return err
		case !ok:
			ws.notShipped = "this build ships no warm start"
		default:
			ws.notShipped = prov.Mismatch(warmstart.RecipeOf(ws.cfg), warmstart.InputsHash(texts))
		}
		if ok && ws.notShipped == "" {
			data, err := warmstart.Tokenizer()
			if err != nil {
				return err
			}
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return fmt.Errorf("tokenizer: %w", err)
			}
			if err := durable.ReplaceFile(path, data); err != nil {
				return fmt.Errorf("tokenizer: %w", err)
			}
			ws.shipped = &prov
			return ws.loadTokenizerFile(path)
		}
	}
	tok, err := model.TrainBPE(ctx, slices.Values(texts), ws.cfg.Model.VocabSize, nil)
	if err != nil {
		return fmt.Errorf("tokenizer: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("tokenizer: %w", err)
	}
	if err := tok.Save(path); err != nil {
		return fmt.Errorf("tokenizer: %w", err)
	}
	ws.tok = tok
	return nil
}

// newModel builds the policy's network: from model.init_ckpt, or freshly
// initialised with the tokenizer's vocabulary.
func (ws *workspace) newModel() (*model.Model, error) {
	m, err := ws.buildModel()
	if err != nil {
		return nil, err
	}
	m.MicroTokens = ws.cfg.Model.MicroTokens
	return m, nil
}

// buildModel is newModel's network before its run settings: loaded (at
// model.context) or fresh.
func (ws *workspace) buildModel() (*model.Model, error) {
	if ws.cfg.Model.InitCkpt != "" {
		load := func() (*model.Model, error) { return loadModel(ws.cfg.Model.InitCkpt, ws.tok) }
		if ws.streamsWeights() {
			load = ws.openWeights
		}
		m, err := load()
		if err != nil {
			return nil, err
		}
		// The run's model.context, not the checkpoint's max_position_embeddings:
		// prompts are cut to it, and a device plans its KV cache for it.
		if err := m.SetContext(ws.cfg.Model.Context); err != nil {
			return nil, err
		}
		return m, nil
	}
	mc := model.ConfigFrom(ws.cfg.Model)
	mc.VocabSize = ws.tok.VocabSize()
	m, err := model.New(mc, uint64(ws.cfg.Run.Seed))
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	return m, nil
}

// contextNote says when model.context runs m past the positions its
// checkpoint declares ("" when it does not).
func contextNote(m *model.Model) string {
	c := m.Cfg
	if c.MaxPositions == 0 || c.Context <= c.MaxPositions {
		return ""
	}
	return fmt.Sprintf("model.context = %d is past model.init_ckpt's max_position_embeddings = %d: "+
		"positions beyond %d are new to the model (RoPE runs them; training teaches them)", c.Context, c.MaxPositions, c.MaxPositions)
}

// loadModel reads a checkpoint folder: an SFT or eval checkpoint, a run
// checkpoint (its policy/ subfolder) or a Hugging Face model.
func loadModel(dir string, tok *model.Tokenizer) (*model.Model, error) {
	if isAdapterDir(dir) {
		return loadMerged(dir, tok)
	}
	dir = modelDir(dir)
	ck, err := model.Load(dir, nil)
	if err != nil {
		return nil, err
	}
	// Hugging Face models pad their embeddings past the tokenizer's ids
	// (Qwen2.5-Coder-7B: 152064 rows for 151665 tokens); fewer rows than
	// ids is a tokenizer that is not the model's.
	if tok != nil && ck.Model.Cfg.VocabSize < tok.VocabSize() {
		return nil, fmt.Errorf("checkpoint %s: vocab_size %d is less than the tokenizer's %d ids", dir, ck.Model.Cfg.VocabSize, tok.VocabSize())
	}
	return ck.Model, nil
}

// newPolicy wraps m with a fresh AdamW at lr for steps updates.
func (ws *workspace) newPolicy(m *model.Model, lr float64, steps int) (*policy.Model, error) {
	oc := ws.cfg.Optim
	oc.LR = lr
	sched, err := model.NewSchedule(oc, steps)
	if err != nil {
		return nil, err
	}
	n := m.NumParams()
	if !m.HasWeights() {
		n = 0 // a layout streamed to the device: the moments live there (or only the adapters train)
	}
	p := policy.NewModel(m, model.NewAdamW(oc, n), sched, ws.tok, oc.GradClip, uint64(ws.cfg.Run.Seed))
	p.Temp = ws.cfg.Sample.Temperature
	p.SetStopTokens(ws.chat.StopTokens(ws.tok))
	if p.Format, err = model.FormatOf(baseDir(ws.cfg.Model.InitCkpt), ws.cfg.Run.SaveDtype); err != nil {
		return nil, err
	}
	return p, nil
}

// sft runs the supervised warm start on pol (from step start, when an
// earlier one was cut short) and writes its checkpoint to dir.
func (ws *workspace) sft(ctx context.Context, pol *opened, dir string, start int, h train.WarmupHooks) (train.SFTResult, error) {
	c := ws.cfg
	examples, skipped, err := train.SFTExamples(ctx, ws.tasks, ws.prompter, ws.tok, train.SFTData{
		Context: c.Model.Context, MaxNew: c.Sample.MaxNewTokens, Synthetic: c.SFT.SyntheticPerTask, Seed: c.Run.Seed,
		ContextLines: c.SFT.ContextLines, RenameFrac: c.SFT.RenameFrac, Chat: ws.chat})
	if err != nil {
		return train.SFTResult{}, err
	}
	if h.Publish != nil {
		lvl, text := keptGoldText(skipped, c.Sample.MaxNewTokens)
		h.Publish(event.Message{Level: lvl, Time: time.Now(), Text: text})
	}
	heldout, err := ws.heldoutExamples(ctx)
	if err != nil {
		return train.SFTResult{}, err
	}
	res, err := train.RunSFT(ctx, train.SFTOptions{Steps: c.SFT.Steps, BatchSize: c.SFT.BatchSize, Seed: c.Run.Seed,
		Context: c.Model.Context, MaxNewTokens: c.Sample.MaxNewTokens, PromptWeight: c.SFT.PromptLossWeight,
		Heldout: heldout, HeldoutEvery: c.SFT.HeldoutEvery, Start: start}, pol.Policy, examples, h)
	res.Skipped = skipped
	if err != nil {
		return res, err
	}
	if err := pol.Sync(); err != nil {
		return res, fmt.Errorf("sft: the weights back from %s: %w", pol.Device, err)
	}
	if l := pol.Host.LoRA(); l != nil {
		return res, model.SaveAdapter(dir, model.Adapter{LoRA: l, BaseModel: pol.Host.BasePath(), Tokenizer: ws.tok, Files: pol.Host.Format.Files})
	}
	ck := model.Checkpoint{Model: pol.Host.Model, Tokenizer: ws.tok, Format: pol.Host.Format}
	if pol.Dev != nil && !pol.Host.Model.HasWeights() { // streamed from the device a tensor at a time
		e := pol.Dev.P.Engine
		ck.ReadWeight = func(i int, dst []float32) error { return e.ReadParam(i, cuda.Weights, dst) }
	}
	if err := model.Save(dir, ck); err != nil {
		return res, err
	}
	return res, nil
}

// keptGoldText says how many gold patches the warm start trains on and why
// it left the others out; a warning when it left out most.
func keptGoldText(s train.SFTSkips, maxNew int) (event.Level, string) {
	text := fmt.Sprintf("warm start: %d of %d gold patches kept", s.Gold-s.TooLong, s.Gold)
	if s.TooLong == 0 {
		return event.Info, text
	}
	text += fmt.Sprintf("; %d left out: their reply is longer than sample.max_new_tokens = %d tokens (the longest %d), "+
		"which the policy could never finish; raise sample.max_new_tokens and model.context to keep them", s.TooLong, maxNew, s.Longest)
	if 2*s.TooLong > s.Gold {
		return event.Warn, text
	}
	return event.Info, text
}

func (ws *workspace) sftDir() string {
	if ws.cfg.SFT.Out != "" {
		return ws.cfg.SFT.Out
	}
	return filepath.Join(ws.cfg.Run.OutDir, "sft")
}

// rewards opens the reward engine: the Docker pool when a daemon answers
// (dockerErr says why not otherwise) and the scorer with the tasks'
// repositories registered for host-side apply checks.
func (ws *workspace) rewards(ctx context.Context, runID string, events event.Publisher) (sc *reward.Scorer, pool *sandbox.Pool, dockerErr error) {
	opts := sandbox.FromConfig(ws.cfg, runID)
	opts.Events = events
	pool, dockerErr = sandbox.NewPool(ctx, opts)
	var ev reward.Evaluator
	if dockerErr == nil {
		ev = &reward.PoolEvaluator{Pool: pool}
	}
	sc = reward.NewScorer(ws.cfg.Reward, ev)
	if sc.Applier != nil {
		for id, path := range ws.repos {
			sc.Applier.RegisterInstance(id, path)
		}
		if dockerErr == nil {
			sc.Applier.Fill = imageFill(ws.cfg, runID, func(repo string) *task.Instance {
				for _, in := range ws.tasks {
					if in.Repo == repo {
						return in
					}
				}
				return nil
			})
		}
	}
	return sc, pool, dockerErr
}

// imageFill fills the apply-check cache of a repository that has no local
// clone once, by copying its working tree out of a task's image (the first
// Docker host's copy).
func imageFill(cfg config.Config, runID string, instanceOf func(repo string) *task.Instance) func(ctx context.Context, repo, dst string) error {
	return func(ctx context.Context, repo, dst string) error {
		in := instanceOf(repo)
		if in == nil {
			return fmt.Errorf("no task of %s names an image to copy it from", repo)
		}
		d, err := sandbox.Connect(ctx, firstHost(cfg.Sandbox.Hosts))
		if err != nil {
			return err
		}
		defer d.Close()
		return sandbox.CopyOut(ctx, d, runID, in.ImageName(), in.WorkdirOrDefault(), dst)
	}
}

// closePool tears the pool down with its own deadline: the run's context
// is usually cancelled by then.
func closePool(ctx context.Context, pool *sandbox.Pool) {
	if pool == nil {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	_ = pool.Close(cctx)
}

// openDevice opens model.device's engine; tests put the engine's CPU
// implementation of the kernels here to run the device path without a GPU.
var openDevice = func(ctx context.Context, cfg config.Config) (cuda.Device, error) {
	return cuda.Open(ctx, cfg.Model.Device, cfg.Model.CUDALibs)
}

// onDevice reports whether the policy runs on model.device's engine
// rather than on gorgonia.
func (ws *workspace) onDevice() bool { return ws.cfg.Model.Device != "cpu" }

// opened is a policy on the device it runs on, the one way run, sft and eval
// get theirs: on the CPU the gorgonia model itself; elsewhere its copy on
// model.device, whose Sync brings the weights back into Host.
type opened struct {
	train.Policy
	Store  train.Store
	Ref    train.Reference // nil without a reference
	Host   *policy.Model
	Device string         // where it runs, for the logs and the header
	Sync   func() error   // device weights -> Host.Model (a no-op on the CPU)
	Dev    *policy.Device // the device policy, nil on the CPU
	Close  func()
}

// openPolicy puts pol (and ref, nil for none) where model.device says.
func (ws *workspace) openPolicy(ctx context.Context, pol *policy.Model, ref *policy.ModelReference) (*opened, error) {
	if !ws.onDevice() {
		o := &opened{Policy: pol, Store: pol, Host: pol, Device: "cpu (gorgonia)", Sync: func() error { return nil }, Close: func() {}}
		if ref != nil {
			o.Ref = ref
		}
		return o, nil
	}
	dp, closeDev, err := ws.devicePolicy(ctx, pol, ref)
	if err != nil {
		return nil, err
	}
	dp.Format = pol.Format
	where := dp.P.Engine.Device().Info().String()
	if dp.P.Engine.Device().Info().Kind == "cpu" {
		where = "the device engine on its CPU kernels"
	}
	o := &opened{Policy: dp, Store: dp, Host: pol, Dev: dp, Device: where, Close: closeDev,
		Sync: func() error { return dp.P.Sync(pol.Model) }}
	if !pol.Model.HasWeights() && pol.LoRA() == nil {
		o.Sync = func() error { return nil } // streamed: checkpoints read the device (deviceCheckpoint)
	}
	if dp.Ref != nil {
		o.Ref = dp.Ref
	}
	return o, nil
}

// devicePolicy puts the policy and the reference (ref nil: none) on
// model.device (bf16 activations, fp32 master weights): the GPU path. close
// frees the device.
func (ws *workspace) devicePolicy(ctx context.Context, pol *policy.Model, ref *policy.ModelReference) (dp *policy.Device, close func(), err error) {
	dev, err := openDevice(ctx, ws.cfg)
	if err != nil {
		return nil, nil, err
	}
	prec := cuda.BF16
	if dev.Info().Kind == "cpu" {
		prec = cuda.F32 // the engine's CPU kernels compute in fp32
	}
	lora := pol.LoRA()
	// The plan is counted, and a run that cannot fit refused, before
	// anything is allocated.
	w := ws.workload(pol.Model.Cfg, prec, lora, ref != nil)
	if ws.sampleOnly > 0 {
		w.Inference, w.Completions = true, ws.sampleOnly
	}
	if ws.plan, err = cuda.Check(w, int64(dev.Info().FreeBytes), dev.Info().String()); err != nil {
		dev.Close()
		return nil, nil, err
	}
	o := cuda.Options{Act: prec, LoRA: lora, MicroTokens: ws.cfg.Model.MicroTokens, Source: ws.source}
	var p *cuda.Policy
	if ws.sampleOnly > 0 {
		p, err = cuda.NewSampler(dev, pol.Base(), o, pol.Temp, pol.StopTokens(), uint64(ws.cfg.Run.Seed))
	} else {
		p, err = cuda.NewPolicy(dev, pol.Base(), o, pol.Optim, pol.Schedule, pol.GradClip, pol.StopTokens(), uint64(ws.cfg.Run.Seed))
	}
	if err != nil {
		dev.Close()
		return nil, nil, err
	}
	p.Temp = pol.Temp
	dp = &policy.Device{P: p, Host: pol.Base(), Tokenizer: ws.tok, BasePath: pol.BasePath()}
	if ref == nil { // grpo.kl_coef = 0
		return dp, func() { p.Close(); dev.Close() }, nil
	}
	if lora != nil { // the frozen base: the policy's own engine, adapters off
		dp.Ref = &policy.DeviceReference{R: cuda.BaseReference(p, ref.Temp)}
		return dp, func() { p.Close(); dev.Close() }, nil
	}
	r, err := cuda.NewReference(dev, ref.Model, o, ref.Temp)
	if err != nil {
		p.Close()
		dev.Close()
		return nil, nil, err
	}
	dp.Ref = &policy.DeviceReference{R: r}
	return dp, func() { r.Engine.Close(); p.Close(); dev.Close() }, nil
}
