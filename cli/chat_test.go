package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/swetui/swetui/app"
	"github.com/swetui/swetui/model"
	"github.com/swetui/swetui/prompt"
	"github.com/swetui/swetui/task"
)

// writeHFModel writes a small Hugging Face model folder: a model and a BPE
// trained on the embedded suite's texts with specials, saved as swetui
// saves them, then fixture's tokenizer_config.json (its chat template and
// special tokens) and a generation_config.json whose eos_token_id are eos's
// ids in that tokenizer.
func writeHFModel(t *testing.T, fixture string, specials, eos []string) string {
	t.Helper()
	cfg := defaultConfig(t)
	cfg.Run.OutDir = t.TempDir()
	ws, err := app.Open(context.Background(), cfg, task.SplitTrain)
	if err != nil {
		t.Fatal(err)
	}
	texts, err := ws.TokenizerTexts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	tok, err := model.TrainBPE(context.Background(), slices.Values(texts), 1024, specials)
	if err != nil {
		t.Fatal(err)
	}
	mc := model.ConfigFrom(cfg.Model)
	mc.Layers, mc.VocabSize = 1, tok.VocabSize()
	m, err := model.New(mc, 1)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := model.Save(dir, model.Checkpoint{Model: m, Tokenizer: tok}); err != nil {
		t.Fatal(err)
	}
	tc, err := os.ReadFile(filepath.Join("..", "prompt", "testdata", "chat", fixture, "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ids []int
	for _, s := range eos {
		id, ok := tok.SpecialID(s)
		if !ok {
			t.Fatalf("%s is not a special token", s)
		}
		ids = append(ids, id)
	}
	gc, _ := json.Marshal(map[string]any{"eos_token_id": ids})
	for name, body := range map[string][]byte{"tokenizer_config.json": tc, "generation_config.json": gc} {
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// A Hugging Face model.init_ckpt is prompted in its own chat template, its
// warm-start replies end its turns and sampling stops at its end tokens.
func TestHFModelFolderChatFormat(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	const id = "mini__juniper-0000"
	llama := []string{"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}
	tests := []struct {
		fixture         string
		specials, stops []string
		head, genPrompt string
		end             string
	}{
		{"qwen2.5-coder-7b-instruct", model.DefaultSpecials, []string{prompt.ImEnd, prompt.EndOfText},
			"<|im_start|>system\n" + prompt.System + "<|im_end|>\n<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n", prompt.ImEnd},
		{"meta-llama-3-8b-instruct", llama, []string{"<|eot_id|>", "<|end_of_text|>"},
			"<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n" + prompt.System + "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n",
			"<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>"},
	}
	for _, tt := range tests {
		dir := writeHFModel(t, tt.fixture, tt.specials, []string{tt.stops[1], tt.stops[0]})
		code, stdout, stderr := runCLI(t, "prompt", "--instance", id, "run.out_dir="+t.TempDir(), "model.init_ckpt="+dir)
		if code != ExitOK {
			t.Fatalf("%s: exit %d\n%s", tt.fixture, code, stderr)
		}
		cfg := defaultConfig(t)
		cfg.Run.OutDir, cfg.Model.InitCkpt = t.TempDir(), dir
		ws, err := app.Open(context.Background(), cfg, task.SplitTrain)
		if err != nil {
			t.Fatal(err)
		}
		if !ws.Chat.Templated() {
			t.Fatalf("%s: chat format %s, want the folder's template", tt.fixture, ws.Chat.Name())
		}
		inst, err := ws.FindInstance(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		want, err := ws.Prompter.Prompt(context.Background(), inst)
		if err != nil {
			t.Fatal(err)
		}
		prompt, summary, _ := strings.Cut(stdout, "--- "+id+": ")
		if prompt != want || !strings.HasPrefix(want, tt.head) || !strings.HasSuffix(want, tt.genPrompt) {
			t.Fatalf("%s: printed prompt\n%q\nworkspace's\n%q\nwant it to begin %q and end %q", tt.fixture, prompt, want, tt.head, tt.genPrompt)
		}
		if s := "chat format: the chat_template of " + dir; !strings.Contains(summary, s) {
			t.Errorf("%s: summary lacks %q:\n%s", tt.fixture, s, summary)
		}
		// The policy stops at the format's end tokens.
		m, err := ws.NewModel()
		if err != nil {
			t.Fatal(err)
		}
		pol, err := ws.NewPolicy(m, 1e-3, 1)
		if err != nil {
			t.Fatal(err)
		}
		var wantIDs []int
		for _, s := range tt.stops {
			id, _ := ws.Tok.SpecialID(s)
			wantIDs = append(wantIDs, id)
		}
		if got := pol.StopTokens(); !slices.Equal(got, wantIDs) {
			t.Errorf("%s: stop tokens %v, want %v (%q)", tt.fixture, got, wantIDs, tt.stops)
		}
		// The warm start's examples: prompts in the template, replies
		// closed by its end of turn.
		ex, err := ws.HeldoutExamples(context.Background())
		if err != nil || len(ex) == 0 {
			t.Fatalf("%s: %d held-out examples, %v", tt.fixture, len(ex), err)
		}
		p, c := ws.Tok.Decode(ex[0].Seq.Prompt), ws.Tok.Decode(ex[0].Seq.Completion)
		if !strings.HasPrefix(p, tt.head) || !strings.HasPrefix(c, "```diff\n") || !strings.HasSuffix(c, "```"+tt.end) {
			t.Errorf("%s: example prompt %.80q... reply ...%q", tt.fixture, p, c[max(0, len(c)-40):])
		}
		if got := ws.Chat.CompletionText(ws.Tok, ex[0].Seq.Completion); got != strings.TrimSuffix(c, tt.end) {
			t.Errorf("%s: completion text %q", tt.fixture, got)
		}
	}
}

// A model folder without a chat template whose tokenizer lacks ChatML's
// specials is refused, naming the folder and what is missing.
func TestHFModelFolderWithoutChatTemplate(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	dir := writeHFModel(t, "meta-llama-3-8b-instruct", []string{"<|begin_of_text|>", "<|eot_id|>"}, []string{"<|eot_id|>"})
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(`{"eos_token": "<|eot_id|>"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCLI(t, "prompt", "--instance", "mini__juniper-0000", "run.out_dir="+t.TempDir(), "model.init_ckpt="+dir)
	if code == ExitOK || !strings.Contains(stderr, dir) || !strings.Contains(stderr, "<|im_start|> and <|im_end|>") {
		t.Fatalf("exit %d, stderr %q; want an error naming %s and the missing ChatML tokens", code, stderr, dir)
	}
}
