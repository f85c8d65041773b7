package cli

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/swetui/swetui/event"
)

// TestSFTThenEval runs the warm start and the held-out evaluation end to end
// on a small embedded suite and a tiny model.
func TestSFTThenEval(t *testing.T) {
	out := t.TempDir()
	common := []string{"run.out_dir=" + out, "data.mini_tasks=20", "model.layers=1", "model.d_model=32",
		"model.heads=2", "model.kv_heads=1", "model.d_ff=64", "model.vocab_size=400", "sample.max_new_tokens=160"}
	code, stdout, stderr := runCLI(t, append([]string{"sft", "sft.steps=3", "sft.synthetic_per_task=2", "sft.heldout_every=2"}, common...)...)
	if code != ExitOK {
		t.Fatalf("sft: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "sft: 3 steps on ") || !strings.Contains(stdout, "synthetic fixes") ||
		!regexp.MustCompile(`held-out loss .*: 2:\d+\.\d+ 3:\d+\.\d+ \n`).MatchString(stdout) {
		t.Errorf("sft summary:\n%s", stdout)
	}
	for _, f := range []string{"sft/tokenizer.json", "sft/config.json", "tokenizer.json"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("sft did not write %s: %v", f, err)
		}
	}

	preds := filepath.Join(out, "preds.jsonl")
	args := append([]string{"eval", "--ckpt", filepath.Join(out, "sft"), "--mode", "syntax", "--samples", "2", "--score-samples", "--out", preds}, common...)
	code, stdout, stderr = runCLI(t, args...)
	if code != ExitOK {
		t.Fatalf("eval: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "x 2 samples") || !strings.Contains(stdout, "syntax-valid") {
		t.Errorf("eval summary:\n%s", stdout)
	}
	f, err := os.Open(preds)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	for sc := bufio.NewScanner(f); sc.Scan(); n++ {
		var p struct {
			InstanceID string  `json:"instance_id"`
			Patch      *string `json:"model_patch"`
		}
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil || !strings.HasPrefix(p.InstanceID, "mini__") || p.Patch == nil {
			t.Fatalf("prediction %d: %s (%v)", n+1, sc.Text(), err)
		}
	}
	if n == 0 {
		t.Fatal("no predictions for the held-out split")
	}
	if _, err := os.Stat(filepath.Join(out, "preds.report.json")); err != nil {
		t.Errorf("no score report: %v", err)
	}
	// --score-samples: every reply scored, two a task, the second marked.
	var all struct {
		Summary   struct{ Total int }
		Instances []struct {
			InstanceID string `json:"instance_id"`
			Sample     int    `json:"sample"`
		}
	}
	data, err := os.ReadFile(filepath.Join(out, "preds.samples.report.json"))
	if err != nil || json.Unmarshal(data, &all) != nil {
		t.Fatalf("no report of every reply: %v", err)
	}
	if all.Summary.Total != 2*n || all.Instances[1].Sample != 1 || all.Instances[1].InstanceID != all.Instances[0].InstanceID {
		t.Errorf("report of every reply: %d entries for %d tasks x 2; first two %+v", all.Summary.Total, n, all.Instances[:2])
	}
	if !strings.Contains(stdout, "every reply:") {
		t.Errorf("eval does not print the summary of every reply:\n%s", stdout)
	}

	code, _, stderr = runCLI(t, append([]string{"eval", "--ckpt", filepath.Join(out, "sft"), "--samples", "0"}, common...)...)
	if code != ExitUsage || !strings.Contains(stderr, "--samples must be at least 1") {
		t.Errorf("--samples 0: exit %d, stderr %s", code, stderr)
	}
}

func TestSFTProgressLine(t *testing.T) {
	cases := []struct {
		ev   event.SFTStep
		want string
	}{
		{event.SFTStep{Step: 1, Steps: 200, Loss: 7.6666, Elapsed: 14 * time.Second},
			"sft: step 1/200 · loss 7.667 · 14.0 s a step · about 46m26s left"},
		{event.SFTStep{Step: 100, Steps: 200, Loss: 2.5, Heldout: 3.25, HeldoutOK: true, Elapsed: 50 * time.Second, Resumed: 50},
			"sft: step 100/200 · loss 2.500 · held-out 3.250 · 1.0 s a step · about 1m40s left"},
		{event.SFTStep{Step: 200, Steps: 200, Loss: 0.1, Elapsed: 400 * time.Second},
			"sft: step 200/200 · loss 0.100 · 2.0 s a step"},
		{event.SFTStep{Step: 3, Steps: 5, Loss: 1}, "sft: step 3/5 · loss 1.000"},
	}
	for _, tc := range cases {
		if got := sftProgressLine(tc.ev); got != tc.want {
			t.Errorf("sftProgressLine(%+v)\n got %q\nwant %q", tc.ev, got, tc.want)
		}
	}
}
