package cli

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/swetui/swetui/app"
	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/task"
)

func readScoreReport(t testing.TB, path string) app.ScoreReport {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep app.ScoreReport
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatalf("report: %v", err)
	}
	return rep
}

// TestScoreGoldAndEmptyOnMini is the acceptance check on a small
// embedded suite: every gold patch applies, no empty one does.
func TestScoreGoldAndEmptyOnMini(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir()) // materialised repositories go here
	tmp := t.TempDir()
	for _, tt := range []struct {
		preds   string
		applied int
		reward  float64
	}{{"gold", 6, 0.65}, {"empty", 0, 0}} { // gold: apply_bonus + test_weight·similarity_weight·1
		t.Run(tt.preds, func(t *testing.T) {
			out := filepath.Join(tmp, tt.preds+".json")
			code, stdout, stderr := runCLI(t, "score", "--predictions", tt.preds, "--mode", "apply-only", "--out", out, "data.mini_tasks=6")
			if code != ExitOK {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			if !strings.Contains(stdout, "applied") || !strings.Contains(stdout, "mean reward") {
				t.Errorf("summary lacks its lines:\n%s", stdout)
			}
			rep := readScoreReport(t, out)
			s := rep.Summary
			if s.Total != 6 || s.Applied != tt.applied || math.Abs(s.MeanReward-tt.reward) > 1e-9 || s.Infra != 0 {
				t.Errorf("summary %+v", s)
			}
			for _, e := range rep.Instances {
				if e.PatchSuccessfullyApplied != (tt.preds == "gold") || e.PatchExists != (tt.preds == "gold") || e.Verdict == nil {
					t.Errorf("%s: %+v", e.InstanceID, e)
				}
			}
		})
	}
}

func TestScorePredictionsFile(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	cfg := config.Default()
	cfg.Data.MiniTasks = 3
	suite, err := task.GenerateMiniFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	gold := suite.Tasks[0].Instance
	tmp := t.TempDir()
	lines := []map[string]any{
		{"instance_id": gold.InstanceID, "model_name_or_path": "m", "model_patch": gold.Patch},
		{"instance_id": suite.Tasks[1].Instance.InstanceID, "model_name_or_path": "m", "model_patch": nil},
		{"instance_id": suite.Tasks[2].Instance.InstanceID, "model_name_or_path": "m", "model_patch": "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-nothing\n+here\n"},
		{"instance_id": "mini__absent-9999", "model_name_or_path": "m", "model_patch": "x"},
	}
	var b strings.Builder
	for _, l := range lines {
		j, _ := json.Marshal(l)
		b.Write(j)
		b.WriteByte('\n')
	}
	preds := filepath.Join(tmp, "preds.jsonl")
	if err := os.WriteFile(preds, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(tmp, "rep.json")
	code, _, stderr := runCLI(t, "score", "--predictions", preds, "--mode", "apply-only", "--out", out, "data.mini_tasks=3")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	rep := readScoreReport(t, out)
	byID := map[string]app.ScoreEntry{}
	for _, e := range rep.Instances {
		byID[e.InstanceID] = e
	}
	if e := byID[gold.InstanceID]; !e.PatchSuccessfullyApplied || e.Verdict.ApplyMethod != "git-apply" {
		t.Errorf("gold: %+v", e)
	}
	if e := byID[suite.Tasks[1].Instance.InstanceID]; !e.PatchIsNone || e.PatchExists || e.PatchSuccessfullyApplied {
		t.Errorf("null patch: %+v", e)
	}
	if e := byID[suite.Tasks[2].Instance.InstanceID]; e.PatchSuccessfullyApplied || !e.Verdict.SyntaxOK || !e.Verdict.ApplyChecked {
		t.Errorf("patch to a missing file: %+v", e)
	}
	if e := byID["mini__absent-9999"]; e.Error == "" {
		t.Errorf("unknown instance: %+v", e)
	}
	if s := rep.Summary; s.Total != 4 || s.Applied != 1 || s.Errors != 1 {
		t.Errorf("summary %+v", s)
	}

	for _, args := range [][]string{
		{"score"},
		{"score", "--predictions", "gold", "--mode", "tests"},
	} {
		if code, _, _ := runCLI(t, args...); code != ExitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, ExitUsage)
		}
	}
	dup := filepath.Join(tmp, "dup.jsonl")
	one, _ := json.Marshal(lines[0])
	if err := os.WriteFile(dup, append(append(one, '\n'), append(one, '\n')...), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runCLI(t, "score", "--predictions", dup, "--mode", "syntax", "data.mini_tasks=3"); code != ExitFailure || !strings.Contains(stderr, "twice") {
		t.Errorf("duplicate app.Prediction: exit %d, %s", code, stderr)
	}
}

// TestScoreInfraFailures: without local repositories apply checks go to
// Docker; an unreachable daemon makes every one an infrastructure failure,
// reported with its cause, masked from the mean, and the command fails.
func TestScoreInfraFailures(t *testing.T) {
	lite := filepath.Join(sharedRealdata(t), "swebench_lite_sample30.jsonl")
	out := filepath.Join(t.TempDir(), "rep.json")
	code, stdout, stderr := runCLI(t, "score", "--predictions", "gold", "--dataset", lite, "--mode", "apply-only",
		"--out", out, `sandbox.hosts=["unix:///nonexistent/docker.sock"]`)
	if code != ExitFailure || !strings.Contains(stderr, "infrastructure") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if !strings.Contains(stdout, "n/a") {
		t.Errorf("mean of nothing is not n/a:\n%s", stdout)
	}
	rep := readScoreReport(t, out)
	if s := rep.Summary; s.Total != 30 || s.Infra != 30 || s.SyntaxValid != 30 || s.Scored != 0 {
		t.Errorf("summary %+v", s)
	}
	if r := rep.Instances[0].Verdict; r == nil || !r.Infra || !strings.Contains(r.InfraCause, "docker") {
		t.Errorf("first entry %+v", rep.Instances[0])
	}
	// Syntax mode needs neither repositories nor Docker.
	code, _, stderr = runCLI(t, "score", "--predictions", "gold", "--dataset", lite, "--mode", "syntax", "--out", out)
	if code != ExitOK {
		t.Fatalf("syntax mode: exit %d: %s", code, stderr)
	}
	if s := readScoreReport(t, out).Summary; s.SyntaxValid != 30 || s.MeanReward != 0.3 {
		t.Errorf("syntax summary %+v", s)
	}
}
