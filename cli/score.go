package cli

import "context"

// runScore implements `swetui score`.
func runScore(ctx context.Context, env Env, args []string) error {
	return notYet(env, "score", args, 4)
}
