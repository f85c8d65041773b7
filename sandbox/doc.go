// Package sandbox owns every Docker call: the client behind a small interface,
// the container lifecycle of one evaluation, the pool of workers, timeouts, log
// streaming, labels and the reaper, and image preparation. It knows nothing of
// rewards or models.
//
// One evaluation (Runner.Run, or Pool.Submit/Run) is a Spec: an image, files
// copied in, a bash script, for an eval a test command, a timeout. Its
// container's own process is an init (PID 1) and a sleep; the script, then
// the tests, run as processes the Docker daemon starts in it, so their
// output streams and exit statuses come from the daemon, out of the tests'
// reach. The container has no network, no capabilities (Limits.CapAdd gives
// some back), no new privileges, memory, CPU and pids limits, a read-only
// root with the workdir and /swetui as volumes and a size-limited /tmp
// (unless the root must stay writable), a disk bound (RLIMIT_FSIZE per file,
// the storage driver's size option where there is one, else the writable
// folders measured and the container killed past it), the log driver off,
// and the labels swetui.managed, swetui.run, swetui.owner, swetui.eval and
// swetui.deadline. The container is removed on every path; at the deadline,
// on cancellation, when the output passes the cap or past the disk bound it
// is killed first. The Result tells a test failure (ExitCode) from an
// infrastructure failure (Infra), a timeout, a truncation, a disk limit and
// a cancellation.
//
// EvalScript writes the harness-shaped scripts (model patch through the
// fallback chain, test infrastructure and test files reset, test patch;
// then the tests); the host writes the protocol lines around their output
// with a nonce that never enters the container, and ParseOutput reads
// them, as described in script.go. RunnerConfig and ShadowsRunner say what
// the script resets (protect.go), for the reward's hack flags too.
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
//
// The files: the runner is spec.go (what an evaluation is and what it
// gives back), eval.go (one evaluation's container on one host), disk.go
// (the disk bound), output.go (the log cap and line batches), script.go and
// protect.go (the eval script, its protocol and what it resets), pool.go
// and hosts.go (workers over hosts, the hosts' health), reaper.go, and
// docker.go and ssh.go (the client). Images are image*.go, which the runner
// never calls: naming, building, pulling and Prepare (image.go), registry
// credentials, push and host-to-host streaming (image_registry.go), images
// built from a repository (image_repo.go), and CopyOut (image_copyout.go).
package sandbox
