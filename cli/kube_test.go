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
//
// On 40 tasks spread over the suite, two Pods at a time: all 300 at four
// took 30 minutes of the 2-core CI box, and held the single node's CPU from
// the other packages' Pods (their sessions waited minutes to be
// scheduled). The suite itself stays whole (prepare builds and pushes the
// image every other test uses); the whole suite's gold patches resolve in
// Docker in TestDockerMiniSuite, and the backend is the same for every task.
func TestScoreGoldAndEmptyOnKubernetes(t *testing.T) {
	if testing.Short() {
		t.Skip("the whole suite on the cluster: a few minutes")
	}
	c := kubetest.Up(t)
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	on := []string{fmt.Sprintf(`sandbox.hosts=["%s"]`, c.Host()), "prepare.registry=" + c.Registry,
		"sandbox.cpus=0.5", "sandbox.workers=2"}
	code, stdout, stderr := runCLI(t, append([]string{"prepare"}, on...)...)
	if code != ExitOK || !strings.Contains(stdout, "1 image(s) pushed for "+c.Host()) {
		t.Fatalf("prepare: exit %d\n%s\n%s", code, stdout, stderr)
	}
	all := miniTasks(t)
	var gold, empty []map[string]string
	for i := range 40 {
		in := all[i*len(all)/40]
		gold = append(gold, map[string]string{"instance_id": in.InstanceID, "model_name_or_path": "gold", "model_patch": in.Patch})
		empty = append(empty, map[string]string{"instance_id": in.InstanceID, "model_name_or_path": "empty", "model_patch": ""})
	}
	dir := t.TempDir()
	for _, tt := range []struct {
		name     string
		preds    []map[string]string
		resolved int
	}{{"gold", gold, len(gold)}, {"empty", empty, 0}} {
		preds := filepath.Join(dir, tt.name+".jsonl")
		writeJSONL(t, preds, tt.preds)
		out := filepath.Join(dir, tt.name+".json")
		code, stdout, stderr := runCLI(t, append([]string{"score", "--predictions", preds, "--mode", "docker", "--out", out}, on...)...)
		if code != ExitOK {
			t.Fatalf("%s: exit %d: %s", tt.name, code, stderr)
		}
		s := readScoreReport(t, out).Summary
		if s.Total != len(tt.preds) || s.Resolved != tt.resolved || s.Infra != 0 {
			t.Errorf("%s on %s: %+v\n%s", tt.name, c.Host(), s, stdout)
		}
		t.Logf("%s: %d resolved of %d in %.1f s on %s", tt.name, s.Resolved, s.Total, s.WallSeconds, c.Host())
	}
	// The agent's environment on the cluster: swetui serve's sessions are
	// Pods, their diffs graded in fresh ones.
	srv := startServe(t, on...)
	in := &all[0]
	fix := fmt.Sprintf("cat > /tmp/fix.patch <<'EOF'\n%sEOF\ngit apply /tmp/fix.patch && echo applied", in.Patch)
	v, outs := agentSession(t, srv.url, in, fix)
	if outs[0].Output != "applied\n" || !v.Verdicts[0].Resolved || v.Verdicts[0].Infra {
		t.Errorf("the gold fix through a session on %s: %+v, verdict %+v", c.Host(), outs[0], v.Verdicts[0])
	}
	if v, _ = agentSession(t, srv.url, in); v.Verdicts[0].Resolved || v.Verdicts[0].Infra {
		t.Errorf("nothing done in a session on %s: verdict %+v", c.Host(), v.Verdicts[0])
	}
}
