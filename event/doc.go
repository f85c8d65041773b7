// Package event is the vocabulary that crosses packages: the events a run
// publishes and the console, the headless printer and the sinks consume; a
// completion's Verdict (with its extracted, normalised patch) from the reward
// engine to rollouts.jsonl, the score report and the console; the reward
// pool's log batches and pool and host state; and the Bus that carries them.
//
// It imports nothing of ours, so that train, reward, sandbox and ui can all
// speak it without importing each other (docs/ARCHITECTURE.md §2). Events
// are plain values: a consumer may keep one without copying, and a producer
// must not change a slice after publishing it.
package event
