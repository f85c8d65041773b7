package cli

import "context"

// runPrepare implements `swetui prepare`.
func runPrepare(ctx context.Context, env Env, args []string) error {
	return notYet(env, "prepare", args, 5)
}
