package sandbox

import "time"

// What the external tests (package sandbox_test, which may import
// sandbox/kube and run a case on every kind of host) use of this
// package's own test helpers.
var (
	DockerForTest  = realDocker
	PyImageForTest = pyImage
)

// KilledStatus is a process killed by SIGKILL, as the shell reports it.
const KilledStatus = killedStatus

// SetKillBoundForTest sets how long the kill script may take before the
// sandbox is killed instead, and returns the old bound.
func SetKillBoundForTest(d time.Duration) time.Duration {
	old := killBound
	killBound = d
	return old
}
