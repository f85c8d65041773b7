// Package app opens what the commands run: the layer between the command
// line (package cli: argv, flags, printing, exit codes) and the packages
// that do the work (train, policy, reward, sandbox, prompt, model). Every
// front (run, sft, eval, serve, score, grade, prepare, prompt) opens its
// work here, so a run is put together in one place.
//
// In files: workspace.go (a split's tasks, their repositories on the host,
// the tokenizer, the chat format and the prompter), policy.go (the model,
// the policy and its reference on model.device, the memory plan), lora.go
// (LoRA adapters, model and adapter folders), warmstart.go (the warm start
// as a run's first stage, trained on the device GRPO runs on, and its
// partial checkpoints), rewards.go (the reward pool and scorer), run.go
// (`swetui run`'s trainer wired to all of them), score.go (scoring
// predictions as `swetui score` does), grade.go (grading one log),
// prepare.go (the images a dataset needs and how to get them).
package app
