package cli

import "context"

// runRun implements `swetui run`.
func runRun(ctx context.Context, env Env, args []string) error {
	return notYet(env, "run", args, 7)
}
