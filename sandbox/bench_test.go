package sandbox

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/swetui/swetui/internal/hoststat"
)

// BenchmarkEvalOverhead measures one evaluation end to end on the real
// engine (create, copy, attach, start, exec of a trivial test, wait,
// remove) and reports the median of each stage.
//
//	go test ./sandbox -run '^$' -bench EvalOverhead -benchtime 20x
func BenchmarkEvalOverhead(b *testing.B) {
	for _, bc := range []struct{ name, script string }{
		{"shell", "echo ok"},
		{"pytest", "cd /testbed && " + testCmd + " -q -k test_mul"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			r := testRunner(b)
			spec := shellSpec(b, bc.script, time.Minute)
			ctx := context.Background()
			var ds []Durations
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				res := r.Run(ctx, spec, nil)
				if res.Infra != nil || res.ExitCode != 0 {
					b.Fatalf("exit %d infra %v\n%s", res.ExitCode, res.Infra, res.Log)
				}
				ds = append(ds, res.Durations)
			}
			b.StopTimer()
			report(b, ds)
		})
	}
}

func report(b *testing.B, ds []Durations) {
	med := func(f func(Durations) time.Duration) float64 {
		v := make([]time.Duration, len(ds))
		for i, d := range ds {
			v[i] = f(d)
		}
		sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
		return float64(v[len(v)/2]) / 1e6
	}
	b.ReportMetric(med(func(d Durations) time.Duration { return d.Total }), "median-ms")
	b.ReportMetric(med(func(d Durations) time.Duration { return d.Create }), "create+copy-ms")
	b.ReportMetric(med(func(d Durations) time.Duration { return d.Start }), "attach+start-ms")
	b.ReportMetric(med(func(d Durations) time.Duration { return d.Run }), "run-ms")
	b.ReportMetric(med(func(d Durations) time.Duration { return d.Remove }), "remove-ms")
}

// BenchmarkThroughput runs 20 harness-shaped evaluations (gold patch, test
// patch, pytest) through a pool of 1 and of 2 workers.
//
//	go test ./sandbox -run '^$' -bench Throughput -benchtime 1x
func BenchmarkThroughput(b *testing.B) {
	const n = 20
	gold := diffOf(b, pyRepo, map[string]string{"calc.py": goldCalc})
	for _, workers := range []int{1, 2} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			realDocker(b)
			ctx := context.Background()
			p, err := NewPool(ctx, Options{Workers: workers, Queue: n, Timeout: time.Minute, RunID: testRunID + "-bench",
				Limits: Limits{MemoryMB: 512, CPUs: 1, PidsLimit: 128, LogCap: 256 << 10}})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close(ctx)
			specs := make([]Spec, n)
			for j := range specs {
				specs[j], _ = evalSpec(b, gold)
			}
			var ds []Durations
			busy0, total0 := hoststat.CPUTimes()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				chans := make([]<-chan Result, n)
				for j := range chans {
					if chans[j], err = p.Submit(ctx, specs[j]); err != nil {
						b.Fatal(err)
					}
				}
				for _, ch := range chans {
					res := <-ch
					if res.Infra != nil || res.ExitCode != 0 {
						b.Fatalf("exit %d infra %v\n%s", res.ExitCode, res.Infra, res.Log)
					}
					ds = append(ds, res.Durations)
				}
			}
			b.StopTimer()
			busy1, total1 := hoststat.CPUTimes()
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "evals/s")
			// How busy the whole machine was: other work on a shared box
			// shows here, and a saturated CPU caps what a second worker adds.
			if total1 > total0 {
				b.ReportMetric(100*float64(busy1-busy0)/float64(total1-total0), "host-busy-%")
			}
			report(b, ds)
		})
	}
}
