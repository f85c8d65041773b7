package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/history"
	"github.com/swetui/swetui/internal/durable"
	"github.com/swetui/swetui/model"
	"github.com/swetui/swetui/model/cuda"
	"github.com/swetui/swetui/prompt"
	"github.com/swetui/swetui/reward"
	"github.com/swetui/swetui/task"
	"github.com/swetui/swetui/train"
	"github.com/swetui/swetui/warmstart"
)

// Workspace is what run, sft and eval share: the tasks of a split, their
// repositories on the host, the prompter and the tokenizer.
type Workspace struct {
	Cfg      config.Config
	Tasks    []*task.Instance
	Repos    map[string]string // instance id -> host repository (mini suite, or reward.repos_dir clones)
	Prompter prompt.Prompter   // newPrompter's
	Tok      *model.Tokenizer
	// chat is the format prompts are written in: model.init_ckpt's own
	// chat template when it is a Hugging Face folder, else ChatML.
	Chat prompt.ChatFormat
	// shipped is the shipped warm start this run uses (its tokenizer is
	// ws.Tok); notShipped says why a run that could use one does not.
	// plan is the device memory plan of the policy last Opened on a
	// device (devicePolicy), for the logs.
	Plan cuda.MemoryPlan
	// sampleOnly > 0 opens the policy to sample that many completions a
	// task and nothing else (eval): on a device, no gradients or moments.
	SampleOnly int
	// source is where a device LoRA run's frozen base is read from, one
	// tensor at a time, straight onto the device (streamsBase).
	Source     *model.Weights
	Shipped    *warmstart.Provenance
	NotShipped string
}

// MaxContextBytes bounds the code shown in a prompt: about three bytes a
// token for the byte-level BPE, leaving room for the issue and the reply.
func MaxContextBytes(cfg config.Config) int {
	return max(256, 3*(cfg.Model.Context-cfg.Sample.MaxNewTokens)-1024)
}

// Open loads the split's tasks, finds their repositories and
// loads or trains the tokenizer (saved as <run.out_dir>/tokenizer.json so a
// resumed run tokenises as before), or takes model.init_ckpt's tokenizer
// and chat format when that is a Hugging Face model folder.
func Open(ctx context.Context, cfg config.Config, split string) (*Workspace, error) {
	cfg.Data.Split = split
	ws, err := loadTasks(ctx, cfg)
	if err != nil {
		return nil, err
	}
	// The tokenizer is trained on the prompts, so their budget is first
	// counted by an estimate, then by the tokenizer.
	ws.Prompter = ws.newPrompter(nil)
	if err := ws.loadTokenizer(ctx); err != nil {
		return nil, err
	}
	ws.Prompter = ws.newPrompter(func(s string) int { return len(ws.Tok.Encode(s)) })
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
func (ws *Workspace) newPrompter(count func(string) int) prompt.Prompter {
	rp := prompt.Repo{Setting: ws.Cfg.Data.Prompt, Budget: promptBudget(ws.Cfg), Count: count, Chat: ws.Chat,
		RepoDir: func(ctx context.Context, in *task.Instance) (string, error) {
			if dir, ok := ws.Repos[in.InstanceID]; ok {
				return dir, nil
			}
			return "", fmt.Errorf("no repository for %s on this host (set reward.repos_dir to a folder of clones named %s)",
				in.InstanceID, reward.RepoDirName(in.Repo))
		}}
	if rp.Budget > 0 {
		rp.Cache = prompt.NewCache()
	} else {
		rp.MaxContextBytes = MaxContextBytes(ws.Cfg)
	}
	if ws.Cfg.Data.Prompt == config.PromptText {
		return prompt.Text{Fallback: rp}
	}
	return rp
}

// FindRepos records the reward.repos_dir clones of tasks' repositories.
func (ws *Workspace) FindRepos(tasks []*task.Instance) {
	if ws.Cfg.Reward.ReposDir == "" {
		return
	}
	for _, in := range tasks {
		dir := filepath.Join(ws.Cfg.Reward.ReposDir, reward.RepoDirName(in.Repo))
		if _, err := os.Stat(dir); err == nil {
			ws.Repos[in.InstanceID] = dir
		}
	}
}

// maxHeldout bounds the held-out tasks the warm start scores, so that the
// measurement stays a small share of its time on a large dataset.
const maxHeldout = 64

// HeldoutExamples are the test split's (prompt, gold reply) pairs whose loss
// the warm start reports (the first maxHeldout, whatever data.include and
// data.train_limit select for training); none when sft.heldout_every is 0 or
// the dataset has no test split.
func (ws *Workspace) HeldoutExamples(ctx context.Context) ([]train.SFTExample, error) {
	c := ws.Cfg
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
		ws.FindRepos(tasks)
	}
	ex, _, err := train.SFTExamples(ctx, tasks, ws.Prompter, ws.Tok, train.SFTData{Context: c.Model.Context, MaxNew: c.Sample.MaxNewTokens,
		ContextLines: c.SFT.ContextLines, Chat: ws.Chat})
	return ex, err
}

// loadTokenizer loads model.tokenizer; else model.init_ckpt's tokenizer
// and chat format (HFFolder); else <run.out_dir>/tokenizer.json, trained
// there first when there is none. Only a model folder changes the chat
// format: a tokenizer named by model.tokenizer or trained by swetui writes
// ChatML, as it always has.
func (ws *Workspace) loadTokenizer(ctx context.Context) error {
	path := ws.Cfg.Model.Tokenizer
	if dir, ok := HFFolder(ws.Cfg.Model.InitCkpt); ok && path == "" {
		if err := ws.loadTokenizerFile(filepath.Join(dir, model.TokenizerFile)); err != nil {
			return err
		}
		chat, err := prompt.LoadChatFormat(dir, ws.Tok)
		if err != nil {
			return fmt.Errorf("model.init_ckpt: %w", err)
		}
		ws.Chat = chat
		return nil
	}
	if path == "" {
		path = history.RunDir(ws.Cfg.Run.OutDir).Tokenizer()
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			return ws.trainTokenizer(ctx, path)
		}
	}
	return ws.loadTokenizerFile(path)
}

// HFFolder is the model folder of model.init_ckpt (a run checkpoint's
// policy/, as LoadModel reads it) when it holds a tokenizer.json: a Hugging
// Face model, a checkpoint swetui wrote, or an adapter folder (which
// carries its base's tokenizer and chat template).
func HFFolder(initCkpt string) (string, bool) {
	if initCkpt == "" {
		return "", false
	}
	dir := ModelDir(initCkpt)
	if _, err := os.Stat(filepath.Join(dir, model.TokenizerFile)); err != nil {
		return "", false
	}
	return dir, true
}

func (ws *Workspace) loadTokenizerFile(path string) error {
	tok, err := model.LoadTokenizer(path)
	if err != nil {
		return fmt.Errorf("tokenizer: %w", err)
	}
	ws.Tok = tok
	return nil
}

// TokenizerTexts are what the policy reads and writes: every training
// task's prompt and gold reply.
func (ws *Workspace) TokenizerTexts(ctx context.Context) ([]string, error) {
	var texts []string
	for _, in := range ws.Tasks {
		p, err := ws.Prompter.Prompt(ctx, in)
		if err != nil {
			return nil, err
		}
		texts = append(texts, p, ws.Chat.GoldCompletion(in.Patch))
	}
	return texts, nil
}

// trainTokenizer trains the byte-level BPE on the tokenizer texts, or, when
// the run can use the shipped warm start, takes that one's tokenizer.
func (ws *Workspace) trainTokenizer(ctx context.Context, path string) error {
	texts, err := ws.TokenizerTexts(ctx)
	if err != nil {
		return err
	}
	if ws.Cfg.SFT.Shipped && ws.Cfg.Run.SFTFirst && ws.Cfg.Model.InitCkpt == "" && ws.Cfg.Data.Source == task.MiniSource {
		shipped, inputs := warmstart.Shipped, texts
		if ws.Cfg.Rollout.Mode == config.RolloutAgent {
			shipped = warmstart.ShippedAgent
			if inputs, err = ws.AgentWarmStartTexts(ctx, texts); err != nil {
				return err
			}
		}
		prov, ok, err := shipped()
		switch {
		case err != nil:
			return err
		case !ok:
			ws.NotShipped = "this build ships none for " + ws.Cfg.Rollout.Mode + " rollouts"
		default:
			ws.NotShipped = prov.Mismatch(warmstart.RecipeOf(ws.Cfg), warmstart.InputsHash(inputs))
		}
		if ok && ws.NotShipped == "" {
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
			ws.Shipped = &prov
			return ws.loadTokenizerFile(path)
		}
	}
	tok, err := model.TrainBPE(ctx, slices.Values(texts), ws.Cfg.Model.VocabSize, nil)
	if err != nil {
		return fmt.Errorf("tokenizer: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("tokenizer: %w", err)
	}
	if err := tok.Save(path); err != nil {
		return fmt.Errorf("tokenizer: %w", err)
	}
	ws.Tok = tok
	return nil
}

// OpenTasks loads the tasks `swetui serve` offers: every split of
// data.source (data.include and data.exclude still apply), with their
// repositories on the host for the apply checks (the embedded suite's, or
// reward.repos_dir's clones). It trains and loads no tokenizer.
func OpenTasks(ctx context.Context, cfg config.Config) (*Workspace, error) {
	cfg.Data.Split, cfg.Data.TrainLimit = task.SplitAll, 0
	return loadTasks(ctx, cfg)
}

// loadTasks is the workspace of cfg's tasks (data.split's) and their
// repositories on the host: the embedded suite's, materialised, or
// reward.repos_dir's clones.
func loadTasks(ctx context.Context, cfg config.Config) (*Workspace, error) {
	insts, err := task.Load(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("dataset %s: %w", cfg.Data.Source, err)
	}
	ws := &Workspace{Cfg: cfg, Repos: map[string]string{}}
	for i := range insts {
		ws.Tasks = append(ws.Tasks, &insts[i])
	}
	if cfg.Data.Source != task.MiniSource {
		ws.FindRepos(ws.Tasks)
		return ws, nil
	}
	if ws.Repos, err = task.MaterializeMini(ctx, task.DefaultCacheDir(), cfg); err != nil {
		return nil, err
	}
	return ws, nil
}

// ErrNoInstance is FindInstance's error for an id the dataset lacks.
var ErrNoInstance = errors.New("no such instance")

// FindInstance finds id in the dataset, whatever its split and
// data.include or data.exclude say, with its repository on this host.
func (ws *Workspace) FindInstance(ctx context.Context, id string) (*task.Instance, error) {
	for _, in := range ws.Tasks {
		if in.InstanceID == id {
			return in, nil
		}
	}
	c := ws.Cfg
	c.Data.Split, c.Data.Include, c.Data.Exclude, c.Data.TrainLimit = task.SplitAll, nil, nil, 0
	all, err := task.Load(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("dataset %s: %w", c.Data.Source, err)
	}
	for i := range all {
		if in := &all[i]; in.InstanceID == id {
			if c.Data.Source != task.MiniSource {
				ws.FindRepos([]*task.Instance{in})
			}
			return in, nil
		}
	}
	return nil, fmt.Errorf("instance %q is not in %s (%d instances): %w", id, c.Data.Source, len(all), ErrNoInstance)
}

// WithoutRunFolder is cfg for a command that reads a run's setting but
// runs none (`swetui prompt`): where run.out_dir holds no tokenizer, the
// one a run would train or take from the shipped warm start is made in a
// temporary folder that done removes, not left in run.out_dir.
func WithoutRunFolder(cfg config.Config) (_ config.Config, done func(), err error) {
	done = func() {}
	if cfg.Model.Tokenizer != "" {
		return cfg, done, nil
	}
	if _, err := os.Stat(history.RunDir(cfg.Run.OutDir).Tokenizer()); !errors.Is(err, os.ErrNotExist) {
		return cfg, done, nil
	}
	tmp, err := os.MkdirTemp("", "swetui-prompt-")
	if err != nil {
		return cfg, done, err
	}
	cfg.Run.OutDir = tmp
	return cfg, func() { os.RemoveAll(tmp) }, nil
}
