package cli

import (
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/swetui/swetui/app"
	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/model"
	"github.com/swetui/swetui/model/cuda"
)

// tinyPretrained writes a Qwen2-shaped Hugging Face model folder as users
// have them: bf16 weights in two shards and their index, config.json,
// tokenizer.json, tokenizer_config.json with Qwen2.5's chat template and
// generation_config.json with its end tokens.
func tinyPretrained(t *testing.T, dir string) { tinyPretrainedAt(t, dir, 1024) }

// tinyPretrainedAt is tinyPretrained declaring maxPositions as its
// max_position_embeddings.
func tinyPretrainedAt(t *testing.T, dir string, maxPositions int) {
	t.Helper()
	// The shipped warm start's tokenizer: trained on the embedded suite, so
	// its prompts and diffs are short and the test is quick.
	tok, err := model.LoadTokenizer("../warmstart/shipped/tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.New(model.Config{Layers: 1, DModel: 32, Heads: 2, KVHeads: 1, DFF: 64, Context: maxPositions,
		VocabSize: tok.VocabSize(), RopeTheta: 1e6, NormEps: 1e-6, AttnBias: true}, 5)
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range m.Weights() { // bf16 values, as a bf16 checkpoint holds them
		m.Weights()[i] = math.Float32frombits(math.Float32bits(w) &^ 0xffff)
	}
	tc, err := os.ReadFile("../prompt/testdata/chat/qwen2.5-coder-7b-instruct/tokenizer_config.json")
	if err != nil {
		t.Fatal(err)
	}
	imEnd, _ := tok.SpecialID(model.ImEnd)
	eot, _ := tok.SpecialID(model.EndOfText)
	gen, _ := json.Marshal(map[string]any{"eos_token_id": []int{imEnd, eot}, "bos_token_id": eot})
	err = model.Save(dir, model.Checkpoint{Model: m, Tokenizer: tok, Format: model.Format{Dtype: model.BF16,
		MaxShard: int64(m.NumParams()) * 6 / 5, // bf16: 2 bytes a weight, so two or three shards
		Files:    map[string][]byte{"tokenizer_config.json": tc, "generation_config.json": gen}}})
	if err != nil {
		t.Fatal(err)
	}
	shards, _ := filepath.Glob(filepath.Join(dir, "model-0000?-of-0000?.safetensors"))
	if _, err := os.Stat(filepath.Join(dir, "model.safetensors.index.json")); err != nil || len(shards) < 2 {
		t.Fatalf("the test model is not sharded: %v, %v", shards, err)
	}
}

// TestPretrainedFolderOnTheDevicePath walks the GPU box's workflow on the
// device engine's CPU kernels: a pretrained Hugging Face folder is warm
// started on the device (saved back as bf16 with its chat template), GRPO
// trains LoRA adapters on it (saved as a PEFT folder, resumed), adapters
// in that folder merge into a full checkpoint whose logits equal base +
// adapters, and eval scores the merged model.
func TestPretrainedFolderOnTheDevicePath(t *testing.T) {
	if testing.Short() {
		t.Skip("the pretrained workflow: sft, run, merge and eval on the CPU kernels, about 20 s")
	}
	useCPUKernels(t)
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	out := t.TempDir()
	hf := filepath.Join(out, "hf")
	tinyPretrained(t, hf)
	common := []string{"model.device=cuda", "data.mini_tasks=20", "data.train_limit=1", "sample.max_new_tokens=256"}

	// Warm start on the device.
	sftDir := filepath.Join(out, "sft")
	code, stdout, stderr := runCLI(t, append([]string{"sft", "model.init_ckpt=" + hf, "run.out_dir=" + out, "sft.out=" + sftDir,
		"sft.steps=50", "sft.lr=1e-2", "sft.synthetic_per_task=0", "sft.batch_size=1", "sft.heldout_every=0"}, common...)...)
	if code != ExitOK {
		t.Fatalf("sft: exit %d\n%s\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"trains on the device engine on its CPU kernels", "memory plan:", "AdamW moments (fp32)", "activations (one micro-batch of 16384 tokens)"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("sft stderr lacks %q:\n%s", want, stderr)
		}
	}
	m := regexp.MustCompile(`loss: 1:(\d+\.\d+) .* 50:(\d+\.\d+)`).FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("no loss curve:\n%s", stdout)
	}
	first, _ := strconv.ParseFloat(m[1], 64)
	last, _ := strconv.ParseFloat(m[2], 64)
	t.Logf("warm start of the pretrained folder on the device engine: loss %.3f -> %.3f", first, last)
	if last > first*0.7 {
		t.Errorf("loss %v -> %v: the warm start did not learn", first, last)
	}
	var cj map[string]any
	raw, _ := os.ReadFile(filepath.Join(sftDir, "config.json"))
	json.Unmarshal(raw, &cj)
	if cj["torch_dtype"] != "bfloat16" || cj["model_type"] != "qwen2" {
		t.Errorf("the warm start saved %v %v, want a bf16 qwen2 folder like its init", cj["model_type"], cj["torch_dtype"])
	}
	if _, err := os.Stat(filepath.Join(sftDir, "tokenizer_config.json")); err != nil {
		t.Errorf("the chat template did not follow the weights: %v", err)
	}

	// Greedy replies of the warm-started model are its gold diff: it learned
	// on the prompt it is sampled from (cut to leave sample.max_new_tokens).
	code, stdout, stderr = runCLI(t, append([]string{"eval", "--ckpt", sftDir, "--phase", "syntax", "--samples", "2", "--temperature", "0",
		"--split", "train", "--out", filepath.Join(out, "sft-preds.jsonl"), "run.out_dir=" + out}, common...)...)
	if code != ExitOK || !strings.Contains(stdout, "2 replies with a well-formed diff (100%)") {
		t.Errorf("greedy eval of the warm start: exit %d\n%s\n%s", code, stdout, stderr)
	}
	// GRPO with LoRA adapters on the warm-started model, then resumed.
	runDir := filepath.Join(out, "run")
	grpo := append([]string{"run", "--headless", "run.out_dir=" + runDir, "model.init_ckpt=" + sftDir, "lora.rank=4", "lora.alpha=8",
		"curriculum.phase=apply-only", "curriculum.auto=false", "grpo.group_size=8", "grpo.prompts_per_step=1",
		"optim.lr=1e-3", "run.save_every=2", "watchdog.barren_epochs=0"}, common...)
	code, stdout, stderr = runCLI(t, append(grpo, "run.max_steps=2")...)
	if code != ExitOK {
		t.Fatalf("run: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout+stderr, "LoRA adapters (") {
		t.Errorf("the run does not print its memory plan with the adapters:\n%s\n%s", stdout, stderr)
	}
	ckpt := filepath.Join(runDir, "checkpoints", "step-00000002")
	if !model.IsAdapter(filepath.Join(ckpt, "policy")) {
		t.Fatalf("the run's checkpoint holds no adapter folder: %s", ckpt)
	}
	if _, err := os.Stat(filepath.Join(ckpt, "reference")); err == nil {
		t.Error("a LoRA checkpoint saved a reference copy: the reference is the base")
	}
	code, stdout, stderr = runCLI(t, append(grpo, "run.max_steps=3")...)
	if code != ExitOK {
		t.Fatalf("resumed run: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if lines := readMetrics(t, filepath.Join(runDir, "metrics.jsonl")); len(lines) != 3 || lines[2].Step != 3 {
		t.Errorf("resumed run: %d GRPO steps logged, want 3 ending at step 3: %+v", len(lines), lines)
	}

	// Merge, and check the merged logits against base + adapters on the
	// engine. Whether GRPO moved the adapters depends on its groups having
	// reward variance (the engine tests check the training itself), so B
	// is drawn here: a merge of B = 0 would be the base whatever it did.
	base, err := model.Load(sftDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	ad, err := model.LoadAdapter(filepath.Join(ckpt, "policy"), base.Model)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 1))
	for i := 1; i < len(ad.LoRA.Params); i += 2 {
		for j := range ad.LoRA.Params[i].W {
			ad.LoRA.Params[i].W[j] = float32(0.05 * r.NormFloat64())
		}
	}
	drawn := filepath.Join(out, "drawn-adapter")
	if err := model.SaveAdapter(drawn, *ad); err != nil {
		t.Fatal(err)
	}
	merged := filepath.Join(out, "merged")
	code, stdout, stderr = runCLI(t, "merge", "--adapter", drawn, "--out", merged)
	if code != ExitOK {
		t.Fatalf("merge: exit %d\n%s\n%s", code, stdout, stderr)
	}
	mck, err := model.Load(merged, nil)
	if err != nil {
		t.Fatal(err)
	}
	e, err := cuda.NewEngine(cuda.NewCPU(), base.Model, cuda.Options{Act: cuda.F32, LoRA: ad.LoRA})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	b := model.Batch{Temperature: 1}
	for _, n := range []int{40, 25} {
		seq := make([]int, n)
		for j := range seq {
			seq[j] = r.IntN(base.Model.Cfg.VocabSize)
		}
		b.Tokens, b.PromptLen = append(b.Tokens, seq), append(b.PromptLen, 5)
	}
	want, err := e.Logprobs(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	got, err := mck.Model.Logprobs(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	var worst, fromBase float64
	baseLP, err := base.Model.Logprobs(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want.Logprobs {
		for j := range want.Logprobs[i] {
			fromBase = math.Max(fromBase, math.Abs(float64(baseLP.Logprobs[i][j]-want.Logprobs[i][j])))
		}
	}
	if fromBase < 1e-3 {
		t.Fatalf("the drawn adapters change the logprobs by %g only: the merge check would not see them", fromBase)
	}
	for i := range want.Logprobs {
		for j := range want.Logprobs[i] {
			worst = math.Max(worst, math.Abs(float64(got.Logprobs[i][j]-want.Logprobs[i][j])))
		}
	}
	// The merged weights are bf16 like the base: rounding W + s·A·B once.
	t.Logf("merged checkpoint against base + adapters: max |Δ logprob| = %.2g", worst)
	if worst > 2e-2 {
		t.Errorf("merged checkpoint logprobs differ from base + adapters by %g", worst)
	}

	// Eval of the merged model on the device.
	preds := filepath.Join(out, "preds.jsonl")
	code, stdout, stderr = runCLI(t, append([]string{"eval", "--ckpt", merged, "--phase", "syntax", "--samples", "2",
		"--split", "train", "--out", preds, "run.out_dir=" + out}, common...)...)
	if code != ExitOK {
		t.Fatalf("eval: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "eval: sampling on the device engine on its CPU kernels") || !strings.Contains(stdout, "syntax-valid") {
		t.Errorf("eval of the merged model:\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
	}
	// The merged checkpoint carries its base's chat template, and eval
	// prompts in it (not in swetui's ChatML).
	if !strings.Contains(stderr, "prompts in the chat_template of "+merged) {
		t.Errorf("eval does not prompt in the model's own template:\n%s", stderr)
	}
}

// TestDeviceWeightsAreNeverOnTheHost: a run on a device takes a model
// folder as a layout whose weights go from the files straight to the
// device engine, LoRA or not; CPU runs load the weights.
func TestDeviceWeightsAreNeverOnTheHost(t *testing.T) {
	hf := filepath.Join(t.TempDir(), "hf")
	tinyPretrained(t, hf)
	for _, tc := range []struct {
		device string
		rank   int
		onHost bool
	}{{"cuda", 4, false}, {"cuda", 0, false}, {"cpu", 4, true}, {"cpu", 0, true}} {
		cfg := config.Default()
		cfg.Model.Device, cfg.LoRA.Rank, cfg.Model.InitCkpt = tc.device, tc.rank, hf
		ws := &app.Workspace{Cfg: cfg}
		m, err := ws.NewModel()
		if err != nil {
			t.Fatal(err)
		}
		if m.HasWeights() != tc.onHost || (ws.Source != nil) == tc.onHost {
			t.Errorf("device %s, lora.rank %d: weights on the host %v (source %v), want %v", tc.device, tc.rank, m.HasWeights(), ws.Source != nil, tc.onHost)
		}
	}
}

// TestFullFineTuneStreamedCheckpoints: a run that trains every weight of a
// model folder on the device writes its checkpoints (policy, moments,
// reference) from the device a tensor at a time and resumes from them.
func TestFullFineTuneStreamedCheckpoints(t *testing.T) {
	if testing.Short() {
		t.Skip("GRPO steps on the device engine's CPU kernels")
	}
	useCPUKernels(t)
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	out := t.TempDir()
	hf := filepath.Join(out, "hf")
	tinyPretrained(t, hf)
	runDir := filepath.Join(out, "run")
	args := []string{"run", "--headless", "run.out_dir=" + runDir, "model.init_ckpt=" + hf, "model.device=cuda",
		"data.mini_tasks=20", "data.train_limit=1", "sample.max_new_tokens=64", "curriculum.phase=syntax", "curriculum.auto=false",
		"grpo.group_size=4", "grpo.prompts_per_step=1", "grpo.dynamic_sampling=false", "run.save_every=2", "watchdog.barren_epochs=0"}
	code, stdout, stderr := runCLI(t, append(args, "run.max_steps=2")...)
	if code != ExitOK {
		t.Fatalf("run: exit %d\n%s\n%s", code, stdout, stderr)
	}
	ckpt := filepath.Join(runDir, "checkpoints", "step-00000002")
	for _, sub := range []string{"policy", "reference"} {
		ck, err := model.Load(filepath.Join(ckpt, sub), nil)
		if err != nil {
			t.Fatalf("%s: %v", sub, err)
		}
		if sub == "policy" && (ck.Optim == nil || len(momentsOf(ck.Optim)) != ck.Model.NumParams()) {
			t.Errorf("policy/ has no optimiser state: the device's moments were not saved")
		}
		if ck.Dtype != model.BF16 {
			t.Errorf("%s/ saved as %s, want bf16 like the model folder", sub, ck.Dtype)
		}
	}
	code, stdout, stderr = runCLI(t, append(args, "run.max_steps=3")...)
	if code != ExitOK {
		t.Fatalf("resumed run: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if lines := readMetrics(t, filepath.Join(runDir, "metrics.jsonl")); len(lines) != 3 || lines[2].Step != 3 {
		t.Errorf("resumed run: %+v, want 3 GRPO steps ending at step 3", lines)
	}
}

func momentsOf(o *model.AdamW) []float32 {
	m, _ := o.State()
	return m
}

// A checkpoint runs at model.context, not at the max_position_embeddings
// its config.json declares: past it (a warm start on longer prompts than
// the model saw; it used to stop at the first step, "6646 tokens exceed
// context 1024") with a note, and below it (a device plans its KV cache
// for the run's context, not the model's 32k).
func TestInitCkptRunsAtModelContext(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a tiny model on the CPU, about 10 s")
	}
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	out := t.TempDir()
	short := filepath.Join(out, "short")
	tinyPretrainedAt(t, short, 128)
	common := []string{"data.mini_tasks=20", "data.train_limit=2", "model.context=1024", "sample.max_new_tokens=256",
		"sft.steps=2", "sft.synthetic_per_task=0", "sft.batch_size=2", "sft.heldout_every=0"}
	for _, device := range []string{"cpu", "cuda"} {
		t.Run(device, func(t *testing.T) {
			if device == "cuda" {
				useCPUKernels(t)
			}
			sftDir := filepath.Join(out, "sft-"+device)
			code, stdout, stderr := runCLI(t, append([]string{"sft", "model.init_ckpt=" + short, "model.device=" + device,
				"run.out_dir=" + out, "sft.out=" + sftDir}, common...)...)
			if code != ExitOK {
				t.Fatalf("sft past the checkpoint's positions: exit %d\n%s\n%s", code, stdout, stderr)
			}
			if want := "model.context = 1024 is past model.init_ckpt's max_position_embeddings = 128"; !strings.Contains(stderr, want) {
				t.Errorf("sft stderr lacks %q:\n%s", want, stderr)
			}
			var cj struct {
				MaxPositions int `json:"max_position_embeddings"`
			}
			raw, _ := os.ReadFile(filepath.Join(sftDir, "config.json"))
			if err := json.Unmarshal(raw, &cj); err != nil || cj.MaxPositions != 1024 {
				t.Errorf("the warm start saved max_position_embeddings %d (%v), want the context it trained at, 1024", cj.MaxPositions, err)
			}
		})
	}

	long := filepath.Join(out, "long")
	tinyPretrainedAt(t, long, 32768)
	useCPUKernels(t)
	code, stdout, stderr := runCLI(t, "eval", "--ckpt", long, "--phase", "syntax", "--samples", "2", "--split", "train",
		"--out", filepath.Join(out, "preds.jsonl"), "run.out_dir="+out, "model.device=cuda", "data.mini_tasks=20",
		"data.train_limit=1", "model.context=1024", "sample.max_new_tokens=16")
	if code != ExitOK {
		t.Fatalf("eval: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if want := "KV cache (2 completions × 1024 positions)"; !strings.Contains(stderr, want) {
		t.Errorf("eval's memory plan lacks %q (it planned for the model's 32768):\n%s", want, stderr)
	}
	if strings.Contains(stderr, "is past model.init_ckpt") {
		t.Errorf("a context below the model's was noted as past it:\n%s", stderr)
	}
}
