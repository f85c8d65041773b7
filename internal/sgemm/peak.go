package sgemm

import (
	"runtime"
	"sync"
	"time"
)

var (
	peakOnce sync.Once
	peak     float64
)

// PeakGFLOPS is the machine's fp32 FMA peak: one core's measured
// throughput (the best of ten 20 ms rounds of 12 independent 8-wide FMA
// chains) times GOMAXPROCS, measured once per process. One core is measured
// because on a shared box a round on all cores is rarely undisturbed (on
// this 2-core box both agree within 5% when it is quiet).
func PeakGFLOPS() float64 {
	peakOnce.Do(func() {
		var one float64
		for range 10 {
			one = max(one, MeasurePeak(1, 20*time.Millisecond))
		}
		peak = one * float64(runtime.GOMAXPROCS(0))
	})
	return peak
}

// MeasurePeak runs the FMA loop on workers goroutines for about d and
// returns GFLOP/s.
func MeasurePeak(workers int, d time.Duration) float64 {
	const iters = 1 << 16 // 12.6 MFLOP per call
	var wg sync.WaitGroup
	flops := make([]float64, workers)
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(start) < d {
				fmaLoop(iters)
				flops[w] += iters * 12 * 16
			}
		}()
	}
	wg.Wait()
	el := time.Since(start).Seconds()
	var total float64
	for _, f := range flops {
		total += f
	}
	return total / el / 1e9
}
