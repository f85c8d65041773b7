package hoststat

import (
	"os"
	"testing"
	"time"
)

func TestCPUTimesCountsWork(t *testing.T) {
	if _, err := os.Stat("/proc/stat"); err != nil {
		t.Skip("no /proc/stat")
	}
	busy0, total0 := CPUTimes()
	if total0 == 0 || busy0 > total0 {
		t.Fatalf("busy %d total %d", busy0, total0)
	}
	for end := time.Now().Add(100 * time.Millisecond); time.Now().Before(end); {
	}
	busy1, total1 := CPUTimes()
	// 100 ms of spinning is 10 ticks of one core; allow for tick granularity.
	if busy1-busy0 < 5 || total1 <= total0 {
		t.Fatalf("100 ms of work added %d busy ticks (total %d)", busy1-busy0, total1-total0)
	}
}
