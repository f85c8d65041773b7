package kube

import (
	"context"
	"testing"
	"time"

	"github.com/swetui/swetui/internal/kubetest"
	"github.com/swetui/swetui/sandbox"
)

// BenchmarkEvaluation runs one trivial evaluation at a time on the local
// Docker daemon and on the test cluster: the difference is the latency a
// Pod adds per evaluation (create, schedule, start, exec through the API
// server, delete).
//
//	go test ./sandbox/kube -run '^$' -bench Evaluation -benchtime 20x
func BenchmarkEvaluation(b *testing.B) {
	c := kubetest.Up(b)
	c.Push(b, sandbox.BaseImage)
	for _, host := range []struct{ name, endpoint string }{{"docker", "unix:///var/run/docker.sock"}, {"k8s", c.Host()}} {
		b.Run(host.name, func(b *testing.B) {
			p, err := sandbox.NewPool(context.Background(), sandbox.Options{Hosts: []string{host.endpoint}, Workers: 1,
				Limits: limits(), Kubernetes: kubeConfig(c), Timeout: time.Minute})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close(context.Background())
			var create, run time.Duration
			b.ResetTimer()
			for b.Loop() {
				res, err := p.Run(context.Background(), shell("echo ok", time.Minute))
				if err != nil || res.Infra != nil || res.Log != "ok\n" {
					b.Fatalf("exit %d infra %v err %v: %s", res.ExitCode, res.Infra, err, res.Log)
				}
				create += res.Durations.Create
				run += res.Durations.Run
			}
			b.ReportMetric(create.Seconds()*1000/float64(b.N), "create-ms/op")
			b.ReportMetric(run.Seconds()*1000/float64(b.N), "run-ms/op")
		})
	}
}
