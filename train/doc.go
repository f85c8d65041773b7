// Package train owns the GRPO loop (sync and async): advantages, the clipped
// surrogate loss and KL penalty, the curriculum, pause/resume, checkpoints
// and the metrics sinks. It publishes what happens as package event's
// values on the run's bus and knows nothing about terminals, Docker or diffs.
//
// The trainer in files: trainer.go (wiring, Run and its single exit path,
// the loop), step.go (one step: advantages, loss inputs, the update),
// metrics.go (a step's numbers), controls.go (pause, phase, save, stop,
// replay), watchdog.go (stalls and barren epochs), checkpoint.go, rollout.go
// (sampling and scoring groups, sync and async).
package train
