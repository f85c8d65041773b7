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
// resolves and no empty one does; swetui serve's agent sessions run there
// too (the gold fix through exec resolves, nothing does not).
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
	// The agent's environment on the cluster: swetui serve's sessions are
	// Pods, their diffs graded in fresh ones.
	srv := startServe(t, on...)
	in := &miniTasks(t)[0]
	gold := fmt.Sprintf("cat > /tmp/fix.patch <<'EOF'\n%sEOF\ngit apply /tmp/fix.patch && echo applied", in.Patch)
	v, outs := agentSession(t, srv.url, in, gold)
	if outs[0].Output != "applied\n" || !v.Verdicts[0].Resolved || v.Verdicts[0].Infra {
		t.Errorf("the gold fix through a session on %s: %+v, verdict %+v", c.Host(), outs[0], v.Verdicts[0])
	}
	if v, _ = agentSession(t, srv.url, in); v.Verdicts[0].Resolved || v.Verdicts[0].Infra {
		t.Errorf("nothing done in a session on %s: verdict %+v", c.Host(), v.Verdicts[0])
	}
}
