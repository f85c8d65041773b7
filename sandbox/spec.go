package sandbox

import (
	"errors"
	"time"
)

// Labels on every container the sandbox creates.
const (
	LabelManaged  = "swetui.managed"  // always "true"
	LabelRun      = "swetui.run"      // the run id
	LabelOwner    = "swetui.owner"    // hostname/pid/start of the process that made it
	LabelEval     = "swetui.eval"     // the evaluation id
	LabelDeadline = "swetui.deadline" // unix seconds after which it is stale whoever owns it
)

var (
	// ErrImageMissing marks an evaluation whose image is not on the host.
	ErrImageMissing = errors.New("image missing")
	// ErrBadSpec marks an evaluation that cannot run as specified.
	ErrBadSpec = errors.New("bad evaluation spec")
	// ErrPanic marks an evaluation during which the caller's code (a log
	// consumer) panicked: a bug, so it is not retried.
	ErrPanic = errors.New("panicked")
)

// Limits are the resources one evaluation's container may use, and how it
// is locked down.
type Limits struct {
	MemoryMB  int
	CPUs      float64
	PidsLimit int
	LogCap    int // bytes of log kept; output past it kills the container
	// DiskMB bounds what the evaluation writes to disk (0: no bound): no
	// file may grow past it (RLIMIT_FSIZE), the writable layer is capped by
	// the storage driver where it can (--storage-opt size), and the
	// writable folders are measured every DiskEvery; when they have grown
	// past the bound the container is killed and the result says DiskLimit.
	DiskMB int
	TmpMB  int // size of the tmpfs at /tmp (default 256)
	// CapAdd are the capabilities given back after dropping all of them.
	CapAdd []string
	// WritableRoot keeps the image's root filesystem writable; otherwise it
	// is read-only and only the workdir (a volume filled from the image),
	// /swetui and /tmp can be written.
	WritableRoot bool
}

// DiskEvery is how often the writable folders of a running evaluation are
// measured against Limits.DiskMB.
var DiskEvery = 2 * time.Second

// Spec is one evaluation: a script run as the entry point of a fresh
// container of Image, with Files copied in first.
type Spec struct {
	ID         string            // unique evaluation id (labels, logs, state)
	InstanceID string            // the task, for display
	Image      string            // image to run; must be on the host
	Workdir    string            // working directory ("" = the image's)
	Files      map[string][]byte // absolute path in the container -> content
	Script     string            // bash script, copied to ScriptPath and run first
	// Tests, with Nonce, makes it an eval (see script.go): Script is the
	// prepare script, and when its exit status says so, Tests (a bash
	// command line) runs next, its output framed by protocol lines of Nonce
	// that the host writes.
	Tests   string
	Nonce   string
	Timeout time.Duration // wall-clock limit from start; the container is killed at it
	Env     []string      // KEY=value
	User    string        // user to run as ("" = the image's)
	// WritableRoot keeps the root filesystem writable for this evaluation
	// (its setup writes system files), whatever Limits say.
	WritableRoot bool
	// Background lets what a session's command leaves running go on
	// between commands (agent.background); otherwise it is killed when the
	// command returns.
	Background bool
	// CPUTime bounds a session's CPU time where Background is set (0:
	// none), checked as each command returns: past it the sandbox is
	// stopped.
	CPUTime time.Duration
}

// Durations say where an evaluation's time went.
type Durations struct {
	Queue  time.Duration // waiting in the pool's queue
	Create time.Duration // container create + copy of the files
	Start  time.Duration // attach + start
	Run    time.Duration // start to exit
	Remove time.Duration
	Total  time.Duration // dequeue (or Run call) to result, removal included unless deferred
}

// Result is the outcome of one evaluation. A test failure is ExitCode != 0
// with Infra nil; Infra is set only when the sandbox itself failed (daemon
// error, missing image, panic), so the caller can mask it instead of
// scoring it.
type Result struct {
	ID          string
	InstanceID  string
	Host        string // endpoint that ran it
	ContainerID string
	ExitCode    int    // the script's exit status; -1 if it never exited
	Log         string // demultiplexed stdout+stderr, at most Limits.LogCap bytes
	Truncated   bool   // output passed the cap; the container was killed
	TimedOut    bool   // the deadline passed; the container was killed
	DiskLimit   bool   // it wrote more than Limits.DiskMB; the container was killed
	Canceled    bool   // the caller's context ended first
	Infra       error
	Attempts    int // tries, retries after infrastructure failures included
	Durations   Durations
}
