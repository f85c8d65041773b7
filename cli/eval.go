package cli

import "context"

// runEval implements `swetui eval`.
func runEval(ctx context.Context, env Env, args []string) error {
	return notYet(env, "eval", args, 6)
}
