package cli

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/swetui/swetui/internal/kubetest"
)

// TestScoreGoldAndEmptyOnKubernetes is the Kubernetes backend's acceptance
// check: swetui prepare pushes the embedded suite's image to the registry
// the cluster pulls from, and on the cluster alone every gold patch
// resolves and no empty one does.
func TestScoreGoldAndEmptyOnKubernetes(t *testing.T) {
	if testing.Short() {
		t.Skip("the whole suite on the cluster: a few minutes")
	}
	c := kubetest.Up(t)
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	on := []string{fmt.Sprintf(`sandbox.hosts=["%s"]`, c.Host()), "prepare.registry=" + c.Registry,
		"sandbox.cpus=0.5", "sandbox.workers=4"}
	code, stdout, stderr := runCLI(t, append([]string{"prepare"}, on...)...)
	if code != ExitOK || !strings.Contains(stdout, "1 image(s) pushed for "+c.Host()) {
		t.Fatalf("prepare: exit %d\n%s\n%s", code, stdout, stderr)
	}
	for _, tt := range []struct {
		preds    string
		resolved int
	}{{"gold", 300}, {"empty", 0}} {
		out := filepath.Join(t.TempDir(), tt.preds+".json")
		code, stdout, stderr := runCLI(t, append([]string{"score", "--predictions", tt.preds, "--mode", "docker", "--out", out}, on...)...)
		if code != ExitOK {
			t.Fatalf("%s: exit %d: %s", tt.preds, code, stderr)
		}
		s := readScoreReport(t, out).Summary
		if s.Total != 300 || s.Resolved != tt.resolved || s.Infra != 0 {
			t.Errorf("%s on %s: %+v\n%s", tt.preds, c.Host(), s, stdout)
		}
		t.Logf("%s: %d resolved of %d in %.1f s on %s", tt.preds, s.Resolved, s.Total, s.WallSeconds, c.Host())
	}
}
