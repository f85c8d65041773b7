// Package train owns the GRPO loop (sync and async): advantages, the clipped
// surrogate loss and KL penalty, the curriculum, pause/resume, checkpoints,
// metrics sinks and the events the console and headless printer consume. It
// knows nothing about terminals.
package train
