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
			writeHF(t, dir, c, hfTensors(base, c["model_type"] == "qwen2", tied), "F32", lcgWeight)
			ck, err := Load(dir, nil)
			if err != nil {
				t.Fatal(err)
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
