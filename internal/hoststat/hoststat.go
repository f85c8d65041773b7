// Package hoststat reads how busy the machine's CPUs are, for benchmarks
// that must say whether a result is bound by the cores it ran on.
package hoststat

import (
	"os"
	"strconv"
	"strings"
)

// ClockTicks is USER_HZ, the unit of /proc/stat's times (100 on every Linux
// architecture Go supports).
const ClockTicks = 100

// CPUTimes reads the machine's busy and total CPU time, summed over all
// cores, in ClockTicks from /proc/stat; zeros where there is none.
func CPUTimes() (busy, total uint64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	fields := strings.Fields(line)
	if len(fields) < 5 || fields[0] != "cpu" {
		return 0, 0
	}
	for i, f := range fields[1:] {
		v, _ := strconv.ParseUint(f, 10, 64)
		total += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return busy, total
}
