package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

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
	ws, err := openWorkspace(context.Background(), cfg, task.SplitTrain)
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
	for _, in := range ws.tasks {
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
	m, err := loadModel(dir, ws.tok)
	if err != nil {
		t.Fatal(err)
	}
	if want := model.ConfigFrom(cfg.Model); m.Cfg.Layers != want.Layers || m.Cfg.DModel != want.DModel || m.Cfg.VocabSize != ws.tok.VocabSize() {
		t.Fatalf("shipped model %+v, defaults %+v", m.Cfg, want)
	}
}

func mustInputsHash(t *testing.T, ws *workspace) string {
	t.Helper()
	texts, err := ws.tokenizerTexts(context.Background())
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
