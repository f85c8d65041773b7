package policy_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/swetui/swetui/model"
	"github.com/swetui/swetui/policy"
	"github.com/swetui/swetui/policy/policytest"
	"github.com/swetui/swetui/train"
)

// A checkpoint in either dtype resumes bit-exactly: the policy, optimiser,
// reference and sampler go on as the uninterrupted policy does, while
// policy/ and reference/ hold the weights in the dtype asked for, as
// transformers lays them out.
func TestCheckpointResumesExactlyInEveryDtype(t *testing.T) {
	ctx := context.Background()
	gen := []byte(`{"eos_token_id": [1, 2]}`)
	for _, dtype := range []model.Dtype{model.F32, model.BF16} {
		t.Run(string(dtype), func(t *testing.T) {
			straight, tok := policytest.Tiny(t, 7, 1e-2)
			straight.Ref = &policy.ModelReference{Model: straight.Model.Clone(), Temp: 1}
			straight.Format = model.Format{Dtype: dtype, MaxShard: 4096, Files: map[string][]byte{"generation_config.json": gen}}
			for range 3 {
				stepOnce(t, straight, tok)
			}
			dir := t.TempDir()
			if err := straight.Save(ctx, dir); err != nil {
				t.Fatal(err)
			}
			for _, sub := range []string{"policy", "reference"} {
				var hc struct {
					TorchDtype string `json:"torch_dtype"`
				}
				raw, err := os.ReadFile(filepath.Join(dir, sub, "config.json"))
				if err != nil {
					t.Fatal(err)
				}
				if err := json.Unmarshal(raw, &hc); err != nil {
					t.Fatal(err)
				}
				want := map[model.Dtype]string{model.F32: "float32", model.BF16: "bfloat16"}[dtype]
				if hc.TorchDtype != want {
					t.Errorf("%s/config.json: torch_dtype %q, want %q", sub, hc.TorchDtype, want)
				}
				if got, err := os.ReadFile(filepath.Join(dir, sub, "generation_config.json")); err != nil || string(got) != string(gen) {
					t.Errorf("%s/generation_config.json = %q (%v)", sub, got, err)
				}
				if _, err := os.Stat(filepath.Join(dir, sub, "model.safetensors.index.json")); err != nil {
					t.Errorf("%s: not sharded at 4 KB: %v", sub, err)
				}
			}

			resumed, _ := policytest.Tiny(t, 99, 1e-2) // another seed: all must come from the checkpoint
			resumed.Ref = &policy.ModelReference{Model: resumed.Model.Clone(), Temp: 1}
			if err := resumed.Load(ctx, dir); err != nil {
				t.Fatal(err)
			}
			prompt := tok.Encode("fix the bug")
			opts := train.SampleOptions{Temperature: 1, TopP: 1, MaxNewTokens: 8}
			for step := range 3 {
				a, err := straight.Sample(ctx, prompt, 2, opts)
				if err != nil {
					t.Fatal(err)
				}
				b, err := resumed.Sample(ctx, prompt, 2, opts)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(a, b) {
					t.Fatalf("step %d after resuming: samples differ", step)
				}
				stepOnce(t, straight, tok)
				stepOnce(t, resumed, tok)
			}
			if !slices.Equal(straight.Model.Weights(), resumed.Model.Weights()) || straight.Version() != resumed.Version() ||
				!slices.Equal(straight.Ref.Model.Weights(), resumed.Ref.Model.Weights()) {
				t.Fatal("the resumed policy left the uninterrupted one's trajectory")
			}
		})
	}
}
