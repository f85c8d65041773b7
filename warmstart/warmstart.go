// Package warmstart owns the warm starts shipped with swetui for its
// embedded task suite: checkpoints that `swetui sft` made from the suite's
// training split, so that the README's first run reaches GRPO in seconds
// instead of training a warm start first. One is single-shot's (shipped/);
// agent mode's (shipped-agent/) went on from it on a scripted expert's
// trajectories. It holds the files (embedded in the binary), their
// provenance, and the recipe a run must match to use them.
//
// `make warmstart` and `make warmstart-agent` regenerate the files; a test
// fails when the suite, the prompts, the tokenizer or the model's defaults
// change without that.
package warmstart

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/internal/durable"
)

//go:embed shipped shipped-agent
var shipped embed.FS

// The shipped warm starts' folders.
const (
	singleDir = "shipped"
	agentDir  = "shipped-agent"
)

// dirOf is the folder of the warm start a recipe makes.
func dirOf(r Recipe) string {
	if r.Agent != nil { // agent mode's recipe
		return agentDir
	}
	return singleDir
}

// ProvenanceFile is the provenance's name beside the checkpoint's files.
const ProvenanceFile = "provenance.json"

// Provenance says what the shipped checkpoint was made from and how.
type Provenance struct {
	Recipe Recipe `json:"recipe"`
	// SFTSteps the warm start ran (often more than the sft.steps default: it
	// is trained once, offline).
	SFTSteps int `json:"sft_steps"`
	// InputsHash is the SHA-256 of every text the tokenizer and the warm
	// start were trained from (InputsHash), so a change to the suite or the
	// prompts shows.
	InputsHash string `json:"inputs_hash"`
	// TrainInstances are the tasks it was trained on: the train split only.
	TrainInstances []string          `json:"train_instances"`
	Commit         string            `json:"commit"`
	Build          string            `json:"build"` // the GEMM build that trained it
	FinalLoss      float64           `json:"final_loss"`
	HeldoutLoss    float64           `json:"heldout_loss,omitempty"`
	Files          map[string]string `json:"files"` // name → SHA-256
}

// Recipe is every setting the checkpoint depends on: a run whose recipe
// differs (another model, dataset, reply length, warm-start data or seed)
// trains its own warm start.
type Recipe struct {
	Data         config.Data `json:"data"`
	Model        Arch        `json:"model"`
	MaxNewTokens int         `json:"max_new_tokens"`
	BatchSize    int         `json:"sft_batch_size"`
	LR           float64     `json:"sft_lr"`
	Synthetic    int         `json:"sft_synthetic_per_task"`
	PromptWeight float64     `json:"sft_prompt_loss_weight"`
	ContextLines int         `json:"sft_context_lines,omitempty"` // absent: the gold patches as written
	RenameFrac   float64     `json:"sft_rename_frac,omitempty"`
	Seed         int64       `json:"seed"`
	// Mode is "agent" for agent mode's warm start ("" single-shot's), and
	// Agent what its expert's trajectories depend on.
	Mode  string       `json:"rollout_mode,omitempty"`
	Agent *AgentRecipe `json:"agent,omitempty"`
}

// AgentRecipe is what agent mode's warm start depends on beyond the rest:
// the limits its expert's trajectories were played under, and the
// single-shot warm start it went on from.
type AgentRecipe struct {
	EvalTurns         int `json:"eval_turns"`
	ObservationChars  int `json:"observation_chars"`
	ObservationTokens int `json:"observation_tokens"`
	CommandTimeoutS   int `json:"command_timeout_s"`
	// Init is the SHA-256 of the single-shot warm start's weights
	// (model.safetensors) it started from.
	Init string `json:"init"`
}

// Arch is the [model] section's architecture.
type Arch struct {
	Layers, DModel, Heads, KVHeads, DFF, Context, VocabSize int
	RopeTheta                                               float64
}

// RecipeOf is cfg's recipe.
func RecipeOf(cfg config.Config) Recipe {
	d := cfg.Data
	d.Split = "" // the warm start always reads the train split
	if d.Include == nil {
		d.Include = []string{}
	}
	if d.Exclude == nil {
		d.Exclude = []string{}
	}
	m := cfg.Model
	r := Recipe{Data: d, Model: Arch{m.Layers, m.DModel, m.Heads, m.KVHeads, m.DFF, m.Context, m.VocabSize, m.RopeTheta},
		MaxNewTokens: cfg.Sample.MaxNewTokens, BatchSize: cfg.SFT.BatchSize, LR: cfg.SFT.LR,
		Synthetic: cfg.SFT.SyntheticPerTask, PromptWeight: cfg.SFT.PromptLossWeight,
		ContextLines: cfg.SFT.ContextLines, RenameFrac: cfg.SFT.RenameFrac, Seed: cfg.Run.Seed}
	if cfg.Rollout.Mode == config.RolloutAgent {
		a := cfg.Agent
		r.Mode = config.RolloutAgent
		r.Agent = &AgentRecipe{EvalTurns: a.EvalTurns, ObservationChars: a.ObservationChars, ObservationTokens: a.ObservationTokens,
			CommandTimeoutS: a.CommandTimeoutS, Init: singleWeights()}
		// The expert's examples are not the synthetic fixes of single-shot.
		r.Synthetic, r.ContextLines, r.RenameFrac = 0, 0, 0
	}
	return r
}

// singleWeights is the SHA-256 the single-shot warm start's provenance
// records for its weights ("" when none ships).
func singleWeights() string {
	p, ok, err := Shipped()
	if err != nil || !ok {
		return ""
	}
	return p.Files["model.safetensors"]
}

// SingleWeightsSum is the SHA-256 of a checkpoint folder's weights, to
// tell whether it is the shipped single-shot warm start.
func SingleWeightsSum(dir string) (string, bool, error) {
	data, err := os.ReadFile(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		return "", false, fmt.Errorf("warm start: %w", err)
	}
	s := sum(data)
	return s, s == singleWeights(), nil
}

// InputsHash is the SHA-256 of texts, each length-prefixed.
func InputsHash(texts []string) string {
	h := sha256.New()
	for _, t := range texts {
		fmt.Fprintf(h, "%d\n%s", len(t), t)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Shipped returns the single-shot checkpoint's provenance; ok is false when
// this build ships none.
func Shipped() (Provenance, bool, error) { return shippedIn(singleDir) }

// ShippedAgent returns agent mode's checkpoint's provenance; ok is false
// when this build ships none.
func ShippedAgent() (Provenance, bool, error) { return shippedIn(agentDir) }

func shippedIn(dir string) (Provenance, bool, error) {
	data, err := shipped.ReadFile(dir + "/" + ProvenanceFile)
	if errors.Is(err, fs.ErrNotExist) {
		return Provenance{}, false, nil
	}
	if err != nil {
		return Provenance{}, false, fmt.Errorf("shipped warm start: %w", err)
	}
	var p Provenance
	if err := json.Unmarshal(data, &p); err != nil {
		return Provenance{}, false, fmt.Errorf("shipped warm start: %s: %w", ProvenanceFile, err)
	}
	return p, true, nil
}

// Mismatch says why a run with this recipe and these inputs cannot use the
// checkpoint, or "" when it can.
func (p Provenance) Mismatch(r Recipe, inputsHash string) string {
	if !reflect.DeepEqual(p.Recipe, r) {
		return describeDiff(p.Recipe, r)
	}
	if p.InputsHash != inputsHash {
		return "the embedded suite's prompts or gold patches differ from the ones it was trained on (make warmstart regenerates it)"
	}
	return ""
}

// describeDiff names the first recipe field that differs.
func describeDiff(shipped, run Recipe) string {
	a, b := reflect.ValueOf(shipped), reflect.ValueOf(run)
	for i := range a.NumField() {
		if !reflect.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()) {
			return fmt.Sprintf("its %s is %+v, this run's %+v", a.Type().Field(i).Tag.Get("json"), a.Field(i).Interface(), b.Field(i).Interface())
		}
	}
	return "the recipes differ"
}

// Tokenizer is the shipped tokenizer.json (agent mode's warm start went on
// from single-shot's, with its tokenizer).
func Tokenizer() ([]byte, error) { return shipped.ReadFile(singleDir + "/tokenizer.json") }

// checkpointFiles are the files of the shipped checkpoint (besides the
// provenance).
var checkpointFiles = []string{"config.json", "model.safetensors", "tokenizer.json"}

// WriteTo writes the shipped checkpoint into dir (a model checkpoint folder
// model.Load reads), each file checked against its recorded hash.
func WriteTo(dir string, p Provenance) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("shipped warm start: %w", err)
	}
	for _, name := range append(slices.Clone(checkpointFiles), ProvenanceFile) {
		data, err := shipped.ReadFile(dirOf(p.Recipe) + "/" + name)
		if err != nil {
			return fmt.Errorf("shipped warm start: %w", err)
		}
		if want, ok := p.Files[name]; ok && want != sum(data) {
			return fmt.Errorf("shipped warm start: %s does not match its recorded hash: the binary's copy is damaged", name)
		}
		if err := durable.ReplaceFile(filepath.Join(dir, name), data); err != nil {
			return fmt.Errorf("shipped warm start: %w", err)
		}
	}
	return durable.SyncDir(dir)
}

// Export copies a finished warm start's checkpoint from src into dst (the
// repository's warmstart/shipped) with p, the file hashes filled in.
func Export(src, dst string, p Provenance) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return fmt.Errorf("export warm start: %w", err)
	}
	p.Files = map[string]string{}
	for _, name := range checkpointFiles {
		data, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			return fmt.Errorf("export warm start: %w", err)
		}
		p.Files[name] = sum(data)
		if err := durable.ReplaceFile(filepath.Join(dst, name), data); err != nil {
			return fmt.Errorf("export warm start: %w", err)
		}
	}
	data, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return fmt.Errorf("export warm start: %w", err)
	}
	return durable.ReplaceFile(filepath.Join(dst, ProvenanceFile), append(data, '\n'))
}

func sum(data []byte) string {
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:])
}
