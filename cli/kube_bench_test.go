package cli

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/swetui/swetui/internal/kubetest"
)

// BenchmarkScoreGoldOnHosts scores the embedded suite's gold patches in the
// docker phase on the local Docker daemon and on the test cluster, with
// the same workers and CPU per evaluation: evaluations per second of each.
//
//	go test ./cli -run '^$' -bench ScoreGoldOnHosts -benchtime 1x
func BenchmarkScoreGoldOnHosts(b *testing.B) {
	c := kubetest.Up(b)
	b.Setenv("XDG_CACHE_HOME", b.TempDir())
	common := []string{"prepare.registry=" + c.Registry, "sandbox.cpus=0.5", "sandbox.workers=4"}
	for _, host := range []struct{ name, endpoint string }{{"docker", "unix:///var/run/docker.sock"}, {"k8s", c.Host()}} {
		on := append([]string{fmt.Sprintf(`sandbox.hosts=["%s"]`, host.endpoint)}, common...)
		b.Run(host.name, func(b *testing.B) {
			if code, _, stderr := runCLI(b, append([]string{"prepare"}, on...)...); code != ExitOK {
				b.Fatalf("prepare: %s", stderr)
			}
			var evals, wall float64
			for b.Loop() {
				out := filepath.Join(b.TempDir(), "gold.json")
				code, _, stderr := runCLI(b, append([]string{"score", "--predictions", "gold", "--mode", "docker", "--out", out}, on...)...)
				if code != ExitOK {
					b.Fatalf("score: %s", stderr)
				}
				s := readScoreReport(b, out).Summary
				if s.Resolved != s.Total {
					b.Fatalf("%d of %d resolved", s.Resolved, s.Total)
				}
				evals += float64(s.Total)
				wall += s.WallSeconds
			}
			b.ReportMetric(evals/wall, "evals/s")
		})
	}
}
