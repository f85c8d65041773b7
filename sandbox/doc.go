// Package sandbox owns every Docker call: the client behind a small interface,
// the container lifecycle of one evaluation, the pool of workers, timeouts, log
// streaming, labels and the reaper, and image preparation. It knows nothing of
// rewards or models.
//
// One evaluation (Runner.Run, or Pool.Submit/Run) is a Spec: an image, files
// copied in, a bash script run as the container's entry point, a timeout. Its
// container has no network, memory, CPU and pids limits, the log driver off
// (output reaches only the attach stream, capped), no-new-privileges, and the
// labels swetui.managed, swetui.run, swetui.owner, swetui.eval and
// swetui.deadline. The container is removed on every path; at the deadline,
// on cancellation or when the output passes the cap it is killed first. The
// Result tells a test failure (ExitCode) from an infrastructure failure
// (Infra), a timeout, a truncation and a cancellation.
//
// EvalScript writes the harness-shaped script (model patch through the
// fallback chain, test files reset, test patch, tests between nonce markers)
// and ParseOutput reads its protocol, described in script.go.
//
// A Pool spreads evaluations over Options.Workers workers and the Docker
// hosts of Options.Hosts (unix://, tcp:// with TLS from DOCKER_CERT_PATH,
// ssh:// through `ssh host docker system dial-stdio`). Preparers create the
// next containers while workers run the current ones; removal happens in the
// background. A host that fails is taken out and probed again after
// HostRetry; infrastructure failures are retried with backoff. The pool
// publishes on Options.Events (package event): every evaluation's log
// batches, its state when it changes, hosts going down and coming back, and
// retries; State is the same snapshot on demand.
//
// Reap removes the managed containers whose owner process is gone (kill -9,
// a crash) or whose deadline has passed, leaving live runs of other processes
// alone; NewPool calls it at start and Pool.Close removes what is left of its
// own run. Prepare builds (from a tar context) or pulls the images a dataset
// needs; the official SWE-bench names are InstanceImage and RemoteImage.
package sandbox
