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

// BenchmarkSessionExec is one command's round trip in an agent's session,
// on the local Docker daemon and on the test cluster: on Docker the exec
// created, attached, run, output read and status taken; on the cluster the
// same through the API server and the kubelet (pods/exec).
//
//	go test ./sandbox/kube -run '^$' -bench SessionExec -benchtime 50x
func BenchmarkSessionExec(b *testing.B) {
	c := kubetest.Up(b)
	c.Push(b, sandbox.BaseImage)
	for _, host := range []struct{ name, endpoint string }{{"docker", "unix:///var/run/docker.sock"}, {"k8s", c.Host()}} {
		b.Run(host.name, func(b *testing.B) {
			ctx := context.Background()
			p, err := sandbox.NewPool(ctx, sandbox.Options{Hosts: []string{host.endpoint}, Workers: 1,
				Limits: limits(), Kubernetes: kubeConfig(c), Timeout: time.Minute})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close(ctx)
			s, err := p.OpenSession(ctx, sandbox.Spec{ID: "bench-" + sandbox.NewNonce()[:8], Image: sandbox.BaseImage, Workdir: "/work",
				User: "1000", Timeout: 10 * time.Minute})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			for b.Loop() {
				res, err := s.Exec(ctx, "echo ok", sandbox.ExecOptions{Timeout: 30 * time.Second})
				if err != nil || res.Output != "ok\n" {
					b.Fatalf("%q %v", res.Output, err)
				}
			}
		})
	}
}
