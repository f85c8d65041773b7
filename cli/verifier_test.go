package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/swetui/swetui/app"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/history"
	"github.com/swetui/swetui/serve"
	"github.com/swetui/swetui/serve/client"
	"github.com/swetui/swetui/serve/servetest"
	"github.com/swetui/swetui/task"
)

// verdictRun writes a run folder whose rollouts.jsonl holds docker
// verdicts of the embedded suite's tasks: each task's gold patch
// resolved, an empty one not, and an apply-only verdict, which teaches
// nothing.
func verdictRun(t *testing.T, tasks []task.Instance) string {
	t.Helper()
	dir := t.TempDir()
	var b strings.Builder
	for _, in := range tasks {
		for _, c := range []event.CompletionScored{
			{Verdict: event.Verdict{InstanceID: in.InstanceID, Phase: "docker", Patch: in.Patch, Applied: true, Resolved: true, Reward: 1}},
			{Verdict: event.Verdict{InstanceID: in.InstanceID, Phase: "docker"}},
			{Verdict: event.Verdict{InstanceID: in.InstanceID, Phase: "apply-only", Patch: in.Patch, Applied: true}},
		} {
			line, _ := json.Marshal(c)
			b.Write(append(line, '\n'))
		}
	}
	if err := os.WriteFile(filepath.Join(dir, history.RolloutsFile), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// `swetui verifier train` fine-tunes the shipped warm start on a run's
// docker verdicts, split by task, and writes a checkpoint with its
// held-out measures; bad input is a clear usage error or names the file.
func TestVerifierTrain(t *testing.T) {
	var tasks []task.Instance
	for _, in := range miniTasks(t) {
		if in.Patch != "" && len(tasks) < 24 {
			tasks = append(tasks, in)
		}
	}
	run := verdictRun(t, tasks)
	out := filepath.Join(t.TempDir(), "verifier")
	code, stdout, stderr := runCLI(t, "verifier", "train", run, "--ckpt", "../warmstart/shipped", "--steps", "4", "--out", out, "sft.batch_size=4")
	if code != ExitOK || !strings.Contains(stdout, "48 docker verdicts (24 resolved) of 1 runs") || !strings.Contains(stdout, "held out: AUC") {
		t.Fatalf("verifier train: exit %d\n%s%s", code, stdout, stderr)
	}
	b, err := os.ReadFile(filepath.Join(out, app.VerifierFile))
	if err != nil {
		t.Fatal(err)
	}
	var rep app.VerifierReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Examples != 48 || rep.Train+rep.Heldout != 48 || rep.HeldTasks == 0 || rep.TrainTasks+rep.HeldTasks != 24 ||
		rep.AUC < 0 || rep.AUC > 1 || rep.Temperature <= 0 || rep.YesToken == rep.NoToken {
		t.Errorf("verifier.json: %+v", rep)
	}
	if _, err := os.Stat(filepath.Join(out, "tokenizer.json")); err != nil {
		t.Errorf("the verifier's checkpoint: %v", err)
	}
	// Best-of-N: the verifier's pick of two samples a task is each
	// task's prediction, every sample scored, the three counts said.
	var held []string
	for _, in := range miniTasks(t) {
		if in.Split == task.SplitTest && len(held) < 3 {
			held = append(held, in.InstanceID)
		}
	}
	preds := filepath.Join(t.TempDir(), "preds.jsonl")
	code, stdout, stderr = runCLI(t, "eval", "--ckpt", "../warmstart/shipped", "--samples", "2", "--select", "verifier", "--verifier", out,
		"--phase", "apply-only", "--out", preds, `data.include=["`+strings.Join(held, `","`)+`"]`)
	if code != ExitOK || !strings.Contains(stdout, "best of 2 by the verifier on 3 tasks, resolved: the first sample 0") {
		t.Errorf("eval --select verifier: exit %d\n%s%s", code, stdout, stderr)
	}
	if _, err := os.Stat(strings.TrimSuffix(preds, ".jsonl") + ".samples.report.json"); err != nil {
		t.Errorf("every sample's report: %v", err)
	}
	// Served: the verifier's score of each patch, none of them run.
	srv := startServe(t, "--verifier", out)
	var v serve.VerifyResponse
	if code, body := call(t, "POST", srv.url+"/v1/verify", serve.ScoreRequest{InstanceID: tasks[0].InstanceID, Patches: []string{tasks[0].Patch, ""}}, &v); code != 200 ||
		len(v.Scores) != 2 || v.Scores[0] < 0 || v.Scores[0] > 1 || v.Scores[1] < 0 || v.Scores[1] > 1 {
		t.Errorf("POST /v1/verify: %d %s", code, body)
	}
	if r, err := (&client.Client{URL: srv.url}).Verify(context.Background(), serve.ScoreRequest{InstanceID: tasks[0].InstanceID, Patches: []string{tasks[0].Patch}}); err != nil || len(r.Scores) != 1 {
		t.Errorf("the Go client's Verify: %+v %v", r, err)
	}
	// The Python client's verify: a predictions file in, a score a line out;
	// a server without a verifier is a 404 for each.
	predsIn := filepath.Join(t.TempDir(), "predictions.jsonl")
	var lines []string
	for _, in := range tasks[:2] {
		line, _ := json.Marshal(app.Prediction{InstanceID: in.InstanceID, Model: "gold", Patch: &in.Patch})
		lines = append(lines, string(line))
	}
	if err := os.WriteFile(predsIn, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	scoresOut := filepath.Join(t.TempDir(), "scores.jsonl")
	if summary := servetest.PythonClient(t, srv.url, "verify", predsIn, "--out", scoresOut); !strings.Contains(summary, "verified 2 of 2 predictions") {
		t.Errorf("python client verify: %s", summary)
	}
	scored, err := os.ReadFile(scoresOut)
	if err != nil {
		t.Fatal(err)
	}
	for i, line := range strings.Split(strings.TrimSpace(string(scored)), "\n") {
		var r struct {
			InstanceID string   `json:"instance_id"`
			Score      *float64 `json:"score"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil || i >= 2 || r.InstanceID != tasks[i].InstanceID || r.Score == nil || *r.Score < 0 || *r.Score > 1 {
			t.Errorf("python client verify, line %d: %s (%v)", i, line, err)
		}
	}
	// A verifier whose YES and NO are not its tokenizer's (built for
	// another one): its verifier.json says other token ids.
	other := t.TempDir()
	files, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(out, f.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if f.Name() == app.VerifierFile {
			r := rep
			r.YesToken, r.NoToken = rep.NoToken, rep.YesToken
			b, _ = json.Marshal(r)
		}
		if err := os.WriteFile(filepath.Join(other, f.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	empty := t.TempDir()
	for _, tt := range []struct {
		name string
		args []string
		code int
		says string
	}{
		{"no subcommand", []string{"verifier"}, ExitUsage, "verifier train"},
		{"no run", []string{"verifier", "train", "--ckpt", "../warmstart/shipped"}, ExitUsage, "at least one run folder"},
		{"no checkpoint", []string{"verifier", "train", run}, ExitFailure, "model.init_ckpt must name"},
		{"no rollouts", []string{"verifier", "train", empty, "--ckpt", "../warmstart/shipped"}, ExitFailure, filepath.Join(empty, history.RolloutsFile)},
		{"select without a verifier", []string{"eval", "--ckpt", "../warmstart/shipped", "--select", "verifier"}, ExitUsage, "go together"},
		{"not a verifier", []string{"eval", "--ckpt", "../warmstart/shipped", "--select", "verifier", "--verifier", empty, "--out", filepath.Join(empty, "p.jsonl")},
			ExitFailure, filepath.Join(empty, app.VerifierFile)},
		{"another tokenizer's", []string{"eval", "--ckpt", "../warmstart/shipped", "--select", "verifier", "--verifier", other, "--out", filepath.Join(empty, "p.jsonl")},
			ExitFailure, filepath.Join(other, app.VerifierFile) + ": trained with YES and NO as tokens"},
	} {
		code, _, stderr := runCLI(t, tt.args...)
		if code != tt.code || !strings.Contains(stderr, tt.says) {
			t.Errorf("%s: exit %d, stderr %q; want %d saying %q", tt.name, code, stderr, tt.code, tt.says)
		}
	}
}
