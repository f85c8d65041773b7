package cli

import "context"

// runGrade implements `swetui grade`.
func runGrade(ctx context.Context, env Env, args []string) error {
	return notYet(env, "grade", args, 4)
}
