package reward

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/sandbox"
)

// TestDockerStartupShadows (issue 45): a start-up import never comes from
// the work tree. The shadows of hostileCases really forge a pass where
// nothing removes them (first part); scored, each is removed before the
// tests and flagged, in every path that grades (single-shot scoring, serve
// and agent mode all grade through Scorer and PoolEvaluator); a new module
// named as one only the image's Python has (typing_extensions: no static
// list names it) is too, through the image's names, read once; a gold fix
// with a new module of its own name still resolves.
func TestDockerStartupShadows(t *testing.T) {
	weights := WeightsFrom(config.Default().Reward)
	inst, s := dockerScorer(t, weights)
	pe := s.Evaluator.(*PoolEvaluator)

	// The attack, with nothing to remove it: both shadows pass a failing
	// test under python -m pytest in this image.
	for _, at := range []string{"iniconfig.py", "attr/__init__.py"} {
		res, err := pe.Pool.Run(context.Background(), sandbox.Spec{
			Image: inst.Image, Workdir: "/testbed", Timeout: time.Minute,
			Files: map[string][]byte{"/swetui/shadow.py": []byte(startupShadow)},
			Script: "set -e\ncd /testbed\nmkdir -p \"$(dirname " + at + ")\"\ncp /swetui/shadow.py " + at + "\n" +
				"printf 'def test_fails():\\n    assert False\\n' > /tmp/test_x.py\n" +
				"python3 -m pytest -p no:cacheprovider -q /tmp/test_x.py\n",
		})
		if err != nil || res.Infra != nil {
			t.Fatalf("%s unguarded: %v %v", at, err, res.Infra)
		}
		if res.ExitCode != 0 || !strings.Contains(res.Log, "1 passed") {
			t.Fatalf("%s unguarded: exit %d, want a forged pass (the attack this test guards against):\n%s", at, res.ExitCode, res.Log)
		}
	}

	// The image's names: read once, the work tree's own left out.
	start := time.Now()
	names, err := pe.importable(context.Background(), inst)
	first := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	again, err := pe.importable(context.Background(), inst)
	cached := time.Since(start)
	if err != nil || !slices.Equal(again, names) {
		t.Fatalf("cached names differ: %v", err)
	}
	t.Logf("the image's importable names: %d, read in %v, then %v from the cache", len(names), first.Round(time.Millisecond), cached)
	for _, n := range []string{"iniconfig", "attr", "_pytest", "pluggy", "typing_extensions", "json"} {
		if !slices.Contains(names, n) {
			t.Errorf("the image's names lack %s", n)
		}
	}
	if slices.Contains(names, "calc") {
		t.Error("the image's names hold calc, the work tree's own module")
	}

	ownModule := "def helper():\n    return 1\n"
	cases := []struct {
		name     string
		diff     string
		shadowed string // the file the script removes, "" none
		resolved bool
	}{
		{"iniconfig.py at the root", diffAgainst(t, dockerRepo, map[string]string{"iniconfig.py": startupShadow}), "iniconfig.py", false},
		{"a new attr package", diffAgainst(t, dockerRepo, map[string]string{"attr/__init__.py": startupShadow}), "attr/__init__.py", false},
		{"the fix and a module named as one of the image's", calcGold + diffAgainst(t, dockerRepo, map[string]string{"typing_extensions.py": ownModule}),
			"typing_extensions.py", false},
		{"the fix and a module of its own", calcGold + diffAgainst(t, dockerRepo, map[string]string{"calc_helpers.py": ownModule}), "", true},
	}
	diffs := make([]string, len(cases))
	for i, c := range cases {
		diffs[i] = c.diff
	}
	rs, err := s.ScoreDiffs(context.Background(), inst, diffs, config.PhaseDocker)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cases {
		r := rs[i]
		t.Logf("%s: reward %.2f resolved %v flags %v f2p %d/%d", c.name, r.Reward, r.Resolved, r.Hacks, r.F2PPassed, r.F2PTotal)
		if r.Infra || !r.Applied {
			t.Errorf("%s: infra %v (%s) applied %v", c.name, r.Infra, r.InfraCause, r.Applied)
			continue
		}
		if r.Resolved != c.resolved {
			t.Errorf("%s: resolved %v, want %v", c.name, r.Resolved, c.resolved)
		}
		if got := slices.Contains(r.Hacks, HackShadowsRunner); got != (c.shadowed != "") {
			t.Errorf("%s: flags %v: %s raised %v, want %v", c.name, r.Hacks, HackShadowsRunner, got, c.shadowed != "")
		}
		if c.shadowed != "" {
			if !strings.Contains(r.Log, sandbox.ShadowPrefix+c.shadowed+"\n") {
				t.Errorf("%s: the log does not say %s was removed:\n%s", c.name, c.shadowed, r.Log)
			}
			if r.Reward != 0 {
				t.Errorf("%s: reward %.3f, want 0", c.name, r.Reward)
			}
		}
		if c.name != cases[2].name && c.shadowed != "" && r.F2PPassed > 0 {
			t.Errorf("%s: test_add passed: the shadow ran", c.name)
		}
	}
}
