package model

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// TestForwardMatchesPyTorch compares one forward pass (loaded through the
// Hugging Face checkpoint path) with reference values that an independent
// PyTorch implementation produced: testdata/torch_reference.py, run with
// Debian's python3-torch, wrote testdata/torch_reference.json.
func TestForwardMatchesPyTorch(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "torch_reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Tokens []int `json:"tokens"`
		Cases  []struct {
			Name        string         `json:"name"`
			Config      map[string]any `json:"config"`
			Temperature float32        `json:"temperature"`
			BF16        bool           `json:"bf16"`
			Logprobs    []float64      `json:"logprobs"`
			Entropy     []float64      `json:"entropy"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	if len(ref.Cases) == 0 {
		t.Fatal("no reference cases")
	}
	for _, tc := range ref.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			c := tc.Config
			n := func(k string) int { return int(c[k].(float64)) }
			base := Config{Layers: n("num_hidden_layers"), DModel: n("hidden_size"), Heads: n("num_attention_heads"),
				KVHeads: n("num_key_value_heads"), DFF: n("intermediate_size"), VocabSize: n("vocab_size")}
			tied := c["tie_word_embeddings"].(bool)
			dir := filepath.Join(t.TempDir(), "hf")
			weight := lcgWeight
			if tc.BF16 {
				weight = func(name string, i int) float32 { return bf16Round(lcgWeight(name, i)) }
			}
			writeHF(t, dir, c, hfTensors(base, c["model_type"] == "qwen2", tied), "F32", weight)
			ck, err := Load(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.BF16 {
				// Saved as a pretrained model's folder is (bf16 weights in two
				// shards and their index) and read back from it.
				ck = bf16TwoShards(t, ck)
			}
			for _, mb := range []int{1, 2} { // also padded inside a 2-row bucket
				ck.Model.MicroBatch = mb
				b := Batch{Tokens: [][]int{ref.Tokens}, PromptLen: []int{1}, Temperature: tc.Temperature}
				if mb == 2 {
					b.Tokens = append(b.Tokens, ref.Tokens[:5])
					b.PromptLen = append(b.PromptLen, 2)
				}
				res, err := ck.Model.Logprobs(context.Background(), b)
				if err != nil {
					t.Fatal(err)
				}
				var worst float64
				for j, want := range tc.Logprobs {
					worst = math.Max(worst, math.Abs(float64(res.Logprobs[0][j])-want))
					worst = math.Max(worst, math.Abs(float64(res.Entropy[0][j])-tc.Entropy[j]))
				}
				if worst > 1e-4 {
					t.Errorf("micro-batch %d: max |Δ| against PyTorch = %g", mb, worst)
				}
				t.Logf("micro-batch %d: max |Δ| against PyTorch = %.2g", mb, worst)
			}
		})
	}
}

// bf16Round is v rounded to the nearest bfloat16, as PyTorch's cast does.
func bf16Round(v float32) float32 { return math.Float32frombits(uint32(bf16(v)) << 16) }

// bf16TwoShards saves ck's model in bf16 across (at least) two shards and loads it
// back, checking that the folder is what a Hugging Face bf16 model holds:
// shards and their index, no fp32 masters (rounding lost nothing).
func bf16TwoShards(t *testing.T, ck *Checkpoint) *Checkpoint {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "bf16")
	total := int64(2 * ck.Model.NumParams())
	if err := Save(dir, Checkpoint{Model: ck.Model, Format: Format{Dtype: BF16, MaxShard: total/2 + 1}}); err != nil {
		t.Fatal(err)
	}
	shards, _ := filepath.Glob(filepath.Join(dir, "model-0000?-of-0000?.safetensors"))
	if _, err := os.Stat(filepath.Join(dir, "model.safetensors.index.json")); err != nil || len(shards) < 2 {
		t.Fatalf("bf16 save is not sharded: %v, %v", shards, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "state", "master.safetensors")); err == nil {
		t.Fatal("bf16 save of bf16 values wrote fp32 masters: the load would not read the bf16 shards")
	}
	out, err := Load(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
