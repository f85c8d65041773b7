package cli

import "context"

// runSFT implements `swetui sft`.
func runSFT(ctx context.Context, env Env, args []string) error {
	return notYet(env, "sft", args, 6)
}
