package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/swetui/swetui/app"
)

// mergeOptions are `swetui merge`'s inputs.
type mergeOptions struct {
	Adapter, Base, Out, Dtype string
}

func newMergeOptions(env Env, args []string) (mergeOptions, error) {
	fs := newFlags(env, "merge")
	adapter := fs.String("adapter", "", "LoRA adapter folder (PEFT layout), or a run checkpoint whose policy/ holds one (required)")
	base := fs.String("base", "", "base model folder (default: the adapter's base_model_name_or_path)")
	out := fs.String("out", "", "folder to write the merged checkpoint to (required)")
	dtype := fs.String("dtype", "auto", "weights of the merged checkpoint: auto (the base's), bf16 or f32")
	rest, err := parseFlags(fs, args)
	if err != nil {
		return mergeOptions{}, err
	}
	switch {
	case len(rest) > 0:
		return mergeOptions{}, UsageErrorf("merge takes no config overrides (%s)", strings.Join(rest, " "))
	case *adapter == "" || *out == "":
		return mergeOptions{}, UsageErrorf("--adapter and --out are required")
	case !slices.Contains([]string{"auto", "bf16", "f32"}, *dtype):
		return mergeOptions{}, UsageErrorf("--dtype %q: want auto, bf16 or f32", *dtype)
	}
	return mergeOptions{Adapter: *adapter, Base: *base, Out: *out, Dtype: *dtype}, nil
}

// mergeRun implements `swetui merge`: the adapters folded into their base
// model's weights (W + s·A·B), saved as a full Hugging Face checkpoint in
// the base's layout (dtype, chat template and end-token files) that vLLM,
// transformers and model.init_ckpt load.
func mergeRun(ctx context.Context, env Env, o mergeOptions) error {
	m, err := app.Merge(o.Adapter, o.Base, o.Dtype, o.Out)
	if err != nil {
		return fmt.Errorf("merge: %w", err)
	}
	fmt.Fprintf(env.Stdout, "merged %d adapters (rank %d, alpha %g) of %s into %s: %s (%s)\n",
		m.Adapters, m.Rank, m.Alpha, m.Adapter, m.Base, o.Out, m.Dtype)
	return nil
}
