// Package serve owns `swetui serve`: swetui's reward engine as an HTTP/JSON
// service for trainers that are not swetui (TRL, verl, SkyRL). It owns the
// API (POST /v1/score, GET /v1/tasks, GET /healthz, GET /metrics), the
// bearer token (required off loopback), request size and time limits, the
// bounded admission queue that answers 429 with Retry-After when full, the
// verdict cache keyed by a content hash of (instance, patch, phase), the
// Prometheus series and the graceful stop.
//
// It scores through a Scorer (reward.Scorer over the sandbox pool, which
// cli wires exactly as `swetui score` and training do), so a patch earns
// over HTTP what it earns in training, verdict for verdict: the answer
// carries event.Verdict, the JSON of rollouts.jsonl. It loads no dataset,
// starts no container and draws nothing itself: it publishes a line per
// request (event.Message) and each scored request as a step
// (StepStarted, CompletionScored, StepFinished) on an event.Publisher, so
// the console and the headless printer show requests as they show GRPO
// steps. *Server implements the console's controls (pause holds the
// queue, quit stops the server, replay re-scores a completion).
//
// Stopping (ctx cancelled, or Stop): the listener closes, waiting requests
// are answered 503, requests being scored get serve.drain_s to finish and
// are then cancelled (their evaluations cancelled; the pool removes the
// containers). Serve returns when every handler has.
package serve
