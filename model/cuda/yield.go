package cuda

import (
	"context"
	"sync"
	"time"
)

// A background job that shares a GPU with a run in the same process (the
// learned verifier's refresh, reward.verifier_refresh_steps) opens its
// handle under WithYield: each of its Do calls starts only once the GPU's
// other handles in this process have done no work for yieldQuiet. It
// fills the run's gaps (a docker-phase step waits on containers most of
// its time) and a run's call never waits on a lock of the job's: at most
// on the GPU finishing the one batch of kernels the job has in flight.
// The run's memory plan counts the job's memory (Workload.Beside).

// yieldQuiet is how long a GPU's other work must have been idle before a
// yielding handle's next call starts: longer than the gaps between one
// step's calls, shorter than a wait on Docker.
const yieldQuiet = 50 * time.Millisecond

type yieldKey struct{}

// WithYield marks the devices OpenCUDA opens under ctx as yielding.
func WithYield(ctx context.Context) context.Context {
	return context.WithValue(ctx, yieldKey{}, true)
}

func yielding(ctx context.Context) bool {
	y, _ := ctx.Value(yieldKey{}).(bool)
	return y
}

// gpuWork is the process's work on each GPU by handles that do not yield,
// by ordinal.
var gpuWork sync.Map // int -> *work

// work counts the calls under way on one GPU and when the last ended.
type work struct {
	mu   sync.Mutex
	busy int
	last time.Time
}

func workOn(ordinal int) *work {
	w, _ := gpuWork.LoadOrStore(ordinal, &work{})
	return w.(*work)
}

func (w *work) enter() {
	w.mu.Lock()
	w.busy++
	w.mu.Unlock()
}

func (w *work) leave(now time.Time) {
	w.mu.Lock()
	w.busy--
	w.last = now
	w.mu.Unlock()
}

// idle reports whether nothing has run for quiet at now.
func (w *work) idle(now time.Time, quiet time.Duration) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.busy == 0 && now.Sub(w.last) >= quiet
}

// waitIdle returns once the GPU's other work has been idle for quiet.
func (w *work) waitIdle(quiet time.Duration) {
	for !w.idle(time.Now(), quiet) {
		time.Sleep(quiet / 4)
	}
}
