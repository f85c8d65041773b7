package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/swetui/swetui/app"
	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/model"
	"github.com/swetui/swetui/task"
	"github.com/swetui/swetui/warmstart"
)

// TestShippedWarmStartIsCurrent fails when the embedded suite, the prompts,
// the tokenizer or the model's defaults changed since the shipped warm
// start was made (run make warmstart), or when it is not what its
// provenance says: trained on the train split only, files as hashed.
func TestShippedWarmStartIsCurrent(t *testing.T) {
	prov, ok, err := warmstart.Shipped()
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Fatal("no shipped warm start: run make warmstart")
	}
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	cfg := defaultConfig(t)
	cfg.Run.OutDir = t.TempDir()
	cfg.SFT.Shipped = false // train the tokenizer afresh, as make warmstart does
	ws, err := app.Open(context.Background(), cfg, task.SplitTrain)
	if err != nil {
		t.Fatal(err)
	}
	if why := prov.Mismatch(warmstart.RecipeOf(cfg), mustInputsHash(t, ws)); why != "" {
		t.Fatalf("the shipped warm start no longer fits the defaults (run make warmstart): %s", why)
	}
	shippedTok, err := warmstart.Tokenizer()
	if err != nil {
		t.Fatal(err)
	}
	retrained, err := os.ReadFile(filepath.Join(cfg.Run.OutDir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(shippedTok, retrained) {
		t.Fatal("the tokenizer trained on the suite today differs from the shipped one (run make warmstart)")
	}
	var train []string
	for _, in := range ws.Tasks {
		train = append(train, in.InstanceID)
	}
	if !slices.Equal(prov.TrainInstances, train) {
		t.Fatalf("trained on %d tasks, the train split has %d: not the same tasks", len(prov.TrainInstances), len(train))
	}
	cfg.Data.Split = task.SplitTest
	heldout, err := task.Load(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range heldout {
		if slices.Contains(prov.TrainInstances, in.InstanceID) {
			t.Fatalf("held-out task %s is among the shipped warm start's training tasks", in.InstanceID)
		}
	}
	// The files are whole and load as the run would load them.
	dir := t.TempDir()
	if err := warmstart.WriteTo(dir, prov); err != nil {
		t.Fatal(err)
	}
	m, err := app.LoadModel(dir, ws.Tok)
	if err != nil {
		t.Fatal(err)
	}
	if want := model.ConfigFrom(cfg.Model); m.Cfg.Layers != want.Layers || m.Cfg.DModel != want.DModel || m.Cfg.VocabSize != ws.Tok.VocabSize() {
		t.Fatalf("shipped model %+v, defaults %+v", m.Cfg, want)
	}
}

func mustInputsHash(t *testing.T, ws *app.Workspace) string {
	t.Helper()
	texts, err := ws.TokenizerTexts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return warmstart.InputsHash(texts)
}

func defaultConfig(t *testing.T) config.Config {
	t.Helper()
	cfg, err := config.Load("config.toml", defaultConfigForTest(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestShippedAgentWarmStartIsCurrent fails when agent mode's shipped warm
// start no longer fits a default run in agent mode (run make
// warmstart-agent): the suite, the prompts, the expert's replies, the
// limits it played under or the single-shot warm start it went on from
// changed. It loads as the run would, at agent mode's context, and a
// default agent-mode workspace takes it.
func TestShippedAgentWarmStartIsCurrent(t *testing.T) {
	prov, ok, err := warmstart.ShippedAgent()
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Fatal("no shipped agent warm start: run make warmstart-agent")
	}
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	cfg, err := config.Load("config.toml", defaultConfigForTest(t), []string{"rollout.mode=agent"})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Run.OutDir = t.TempDir()
	ws, err := app.Open(context.Background(), cfg, task.SplitTrain)
	if err != nil {
		t.Fatal(err)
	}
	if ws.Shipped == nil || ws.NotShipped != "" {
		t.Fatalf("a default run in agent mode does not take the shipped agent warm start (run make warmstart-agent): %s", ws.NotShipped)
	}
	if !reflect.DeepEqual(*ws.Shipped, prov) {
		t.Fatal("the workspace took another warm start than the agent one")
	}
	dir := t.TempDir()
	if err := warmstart.WriteTo(dir, prov); err != nil {
		t.Fatal(err)
	}
	m, err := app.LoadModel(dir, ws.Tok)
	if err != nil {
		t.Fatal(err)
	}
	if m.Cfg.Context != cfg.Agent.Context {
		t.Errorf("the agent warm start runs at %d positions, agent.context is %d", m.Cfg.Context, cfg.Agent.Context)
	}
}
