package event

import "time"

// LogBatch is a batch of complete output lines of one container evaluation.
type LogBatch struct {
	EvalID     string
	Worker     int
	InstanceID string
	Lines      []string
}

// WorkerState is one reward worker as the pool last saw it.
type WorkerState struct {
	ID          int
	Host        string
	Busy        bool
	InstanceID  string
	ContainerID string
	EvalID      string
	Since       time.Time // start of the current evaluation, or of idleness
	Status      string    // idle, creating, running, backoff (retry n)
}

// HostState is one Docker endpoint's health.
type HostState struct {
	Endpoint string
	Up       bool
	Active   int       // evaluations running there
	Err      string    // the last error seen there; kept after it comes back
	Since    time.Time // when it last went up or down
	RetryAt  time.Time // while down: when it is probed again
}

// PoolState is a snapshot of the reward pool.
type PoolState struct {
	Workers       []WorkerState
	Hosts         []HostState
	Queue         int // evaluations waiting
	Done          int // evaluations finished, whatever their outcome
	P50, P95      time.Duration
	Timeouts      int
	InfraFailures int // evaluations that ended in an infrastructure failure
	Retries       int // attempts retried after an infrastructure failure
	Sessions      int // agent sessions open on the hosts (agent mode, serve's /v1/sessions)
}
