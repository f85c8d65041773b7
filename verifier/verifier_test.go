package verifier

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/history"
	"github.com/swetui/swetui/prompt"
)

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

func TestAUC(t *testing.T) {
	for _, tt := range []struct {
		name   string
		scores []float64
		labels []bool
		want   float64
	}{
		// 4 pairs: (0.35 > 0.1), (0.35 < 0.4), (0.8 > both): 3 of 4.
		{"textbook", []float64{0.1, 0.4, 0.35, 0.8}, []bool{false, false, true, true}, 0.75},
		{"perfect", []float64{0.1, 0.2, 0.9}, []bool{false, false, true}, 1},
		{"a tie counts half", []float64{0.5, 0.5}, []bool{true, false}, 0.5},
		{"inverted", []float64{0.9, 0.1}, []bool{false, true}, 0},
	} {
		if got := AUC(tt.scores, tt.labels); !near(got, tt.want, 1e-12) {
			t.Errorf("%s: AUC %v, want %v", tt.name, got, tt.want)
		}
	}
	if !math.IsNaN(AUC([]float64{0.3}, []bool{true})) {
		t.Error("AUC of one label is not NaN")
	}
}

func TestECE(t *testing.T) {
	// Bins 2, 8 and 9 of 10: |0-0.2| + |1-0.8| + |0-0.9|, each a third.
	if got := ECE([]float64{0.2, 0.8, 0.9}, []bool{false, true, false}, 10); !near(got, 1.3/3, 1e-12) {
		t.Errorf("ECE %v, want %v", got, 1.3/3)
	}
	if got := ECE([]float64{1, 0}, []bool{true, false}, 10); got != 0 {
		t.Errorf("ECE of a sure, right verifier %v, want 0", got)
	}
}

func TestTemperature(t *testing.T) {
	if got := NLL([]float64{0}, []bool{true}, 1); !near(got, math.Ln2, 1e-12) {
		t.Errorf("NLL at logit 0: %v, want ln 2", got)
	}
	// Logits of ±4, right 6 times in 8: the best probability of the side
	// the logit takes is 0.75, so 4/t = ln 3.
	logits := []float64{4, -4, 4, -4, 4, -4, 4, -4}
	labels := []bool{true, false, true, false, true, false, false, true}
	if got, want := FitTemperature(logits, labels), 4/math.Log(3); !near(got, want, 1e-6) {
		t.Errorf("temperature %v, want %v", got, want)
	}
}

func TestBestThreshold(t *testing.T) {
	// At 0.3: 2 true positives, 1 false: precision 2/3, recall 1, F1 0.8,
	// the best of the four thresholds (0.667, 0.5, 0.8, 0.667).
	got := BestThreshold([]float64{0.9, 0.8, 0.3, 0.2}, []bool{true, false, true, false})
	if got.At != 0.3 || !near(got.Precision, 2.0/3, 1e-12) || got.Recall != 1 || !near(got.F1, 0.8, 1e-12) {
		t.Errorf("threshold %+v, want at 0.3 with precision 2/3, recall 1, F1 0.8", got)
	}
}

func TestFitLogistic(t *testing.T) {
	x := [][]float64{{0, 1}, {0, 2}, {1, 1}, {1, 3}}
	y := []bool{false, false, true, true}
	m := FitLogistic(x, y)
	if AUC([]float64{m.Score(x[0]), m.Score(x[1]), m.Score(x[2]), m.Score(x[3])}, y) != 1 || m.W[0] <= 0 {
		t.Errorf("a logistic regression that does not separate the applied: %+v", m)
	}
	if f := BaselineFeatures(Example{Applied: true, Patch: "a\nb\nc\n"}); f[0] != 1 || !near(f[1], math.Log(4), 1e-12) {
		t.Errorf("features %v", f)
	}
}

func TestSplitAndBalance(t *testing.T) {
	var exs []Example
	for _, id := range []string{"a__x-1", "a__x-2", "a__x-3", "a__x-4", "a__x-5", "a__x-6", "a__x-7", "a__x-8"} {
		exs = append(exs, Example{InstanceID: id}, Example{InstanceID: id, Resolved: true})
	}
	train, held := Split(exs, 0.5)
	if len(train)+len(held) != len(exs) || len(held) == 0 || len(train) == 0 {
		t.Fatalf("split %d/%d of %d", len(train), len(held), len(exs))
	}
	in := map[string]bool{}
	for _, e := range held {
		in[e.InstanceID] = true
	}
	for _, e := range train {
		if in[e.InstanceID] {
			t.Errorf("task %s on both sides", e.InstanceID)
		}
	}
	if tr, h := Split(exs, 0); len(h) != 0 || len(tr) != len(exs) {
		t.Errorf("share 0 held out %d", len(h))
	}
	b := Balance([]Example{{}, {}, {}, {Resolved: true}})
	pos := 0
	for _, e := range b {
		if e.Resolved {
			pos++
		}
	}
	if len(b) != 6 || pos != 3 {
		t.Errorf("balanced: %d examples, %d resolved; want 6 and 3", len(b), pos)
	}
}

func writeRollouts(t *testing.T, lines ...any) string {
	t.Helper()
	dir := t.TempDir()
	var b strings.Builder
	for _, l := range lines {
		if s, ok := l.(string); ok {
			b.WriteString(s + "\n")
			continue
		}
		j, _ := json.Marshal(l)
		b.Write(append(j, '\n'))
	}
	if err := os.WriteFile(filepath.Join(dir, history.RolloutsFile), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// The labels are the docker phase's grades, both rollout modes: a syntax
// verdict and an infrastructure failure teach nothing; a trajectory's
// summary says how it went.
func TestLabels(t *testing.T) {
	dir := writeRollouts(t,
		event.CompletionScored{Verdict: event.Verdict{InstanceID: "a__x-1", Phase: "syntax", Patch: "p"}},
		event.CompletionScored{Verdict: event.Verdict{InstanceID: "a__x-1", Phase: "docker", Patch: "fix\n", Applied: true, Resolved: true}},
		event.CompletionScored{Verdict: event.Verdict{InstanceID: "a__x-1", Phase: "docker", Infra: true}},
		event.CompletionScored{Verdict: event.Verdict{InstanceID: "a__x-2", Phase: "docker", Patch: "bad\n", Applied: true},
			Agent: &event.Trajectory{End: event.EndTurnLimit, Turns: []event.Turn{{Command: "ls -la\nmore", ExitCode: 0}, {Reply: "hm"}}}})
	exs, err := Labels(dir)
	if err != nil || len(exs) != 2 {
		t.Fatalf("%d examples (%v), want 2", len(exs), err)
	}
	if e := exs[0]; !e.Resolved || e.Patch != "fix\n" || e.Summary != "" || !strings.HasSuffix(e.Where, "rollouts.jsonl:2") {
		t.Errorf("the resolved reply: %+v", e)
	}
	if e := exs[1]; e.Resolved || e.Summary != "The agent ran 2 turns and ended: turn_limit.\n$ ls -la  (exit 0)" {
		t.Errorf("the trajectory: %+v", e)
	}
	// A run still training: its last line is being written; and a patch
	// the gate spared was graded by no container.
	spared, _ := json.Marshal(event.CompletionScored{Verdict: event.Verdict{InstanceID: "a__x-3", Phase: "docker", Applied: true, Gate: event.GateSpared}})
	growing := writeRollouts(t, string(spared), event.CompletionScored{Verdict: event.Verdict{InstanceID: "a__x-1", Phase: "docker", Patch: "p\n"}})
	f, err := os.OpenFile(filepath.Join(growing, history.RolloutsFile), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"verdict": {"instance_id": "a__x-2", "pha`)
	f.Close()
	if exs, err := Labels(growing); err != nil || len(exs) != 1 || exs[0].InstanceID != "a__x-1" {
		t.Errorf("a growing rollouts.jsonl: %+v %v, want the one whole, graded line", exs, err)
	}
	for _, tt := range []struct {
		name string
		dir  string
		says string
	}{
		{"no docker verdict", writeRollouts(t, event.CompletionScored{Verdict: event.Verdict{Phase: "apply-only"}}), "holds no docker-phase verdict (1 lines)"},
		{"a broken line", writeRollouts(t, "{not json"), "rollouts.jsonl:1"},
		{"no run", t.TempDir(), "no such file"},
	} {
		if _, err := Labels(tt.dir); err == nil || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("%s: %v, want an error saying %q", tt.name, err, tt.says)
		}
	}
}

func TestQuestion(t *testing.T) {
	q, err := Question(prompt.ChatFormat{}, "add is wrong\n", Example{Patch: "diff --git a/c.py b/c.py\n", Summary: "The agent ran 1 turns"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Issue:\nadd is wrong\n\nWhat the agent did:\nThe agent ran 1 turns", "Candidate patch:\ndiff --git", "Answer YES or NO."} {
		if !strings.Contains(q, want) {
			t.Errorf("the question lacks %q:\n%s", want, q)
		}
	}
	if Answer(true) != Yes || Answer(false) != No {
		t.Error("answers")
	}
}
