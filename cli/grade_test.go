package cli

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/swetui/swetui/app"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/internal/realdata"
	"github.com/swetui/swetui/sandbox"
)

func sharedRealdata(t *testing.T) string { return realdata.Dir(t) }

// TestGradeCommandOnHarnessLogs grades every real harness log through the
// command and compares with the harness's report.json.
func TestGradeCommandOnHarnessLogs(t *testing.T) {
	dir := filepath.Join(sharedRealdata(t), "harness_logs")
	f, err := os.Open(filepath.Join(dir, "index.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	n := 0
	for sc.Scan() {
		var idx struct {
			ID string `json:"instance_id"`
		}
		if err := json.Unmarshal(sc.Bytes(), &idx); err != nil {
			t.Fatal(err)
		}
		n++
		// The index line has SWE-bench's fields: it is an instance.
		instFile := filepath.Join(t.TempDir(), "inst.json")
		if err := os.WriteFile(instFile, sc.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr := runCLI(t, "grade", "--instance", instFile, "--log", filepath.Join(dir, idx.ID, "test_output.txt"))
		if code != ExitOK {
			t.Fatalf("%s: exit %d: %s", idx.ID, code, stderr)
		}
		var got app.GradeReport
		if err := json.Unmarshal([]byte(stdout), &got); err != nil {
			t.Fatalf("%s: output is not JSON: %v", idx.ID, err)
		}
		raw, err := os.ReadFile(filepath.Join(dir, idx.ID, "report.json"))
		if err != nil {
			t.Fatal(err)
		}
		var want map[string]struct {
			Resolved    bool              `json:"resolved"`
			TestsStatus event.TestsStatus `json:"tests_status"`
		}
		if err := json.Unmarshal(raw, &want); err != nil {
			t.Fatal(err)
		}
		w := want[idx.ID]
		if got.Resolved != w.Resolved || !reflect.DeepEqual(got.TestsStatus, w.TestsStatus) {
			t.Errorf("%s: grade differs from the harness report (resolved %v, want %v)", idx.ID, got.Resolved, w.Resolved)
		}
		if got.Resolved && got.Reward != 1 {
			t.Errorf("%s: resolved with reward %v", idx.ID, got.Reward)
		}
	}
	if n != 30 {
		t.Errorf("graded %d logs, want 30", n)
	}
}

func TestGradeCommandSwetuiLog(t *testing.T) {
	tmp := t.TempDir()
	inst := `{"instance_id": "mini__x-1", "repo": "mini/x", "log_parser": "pytest",
	  "FAIL_TO_PASS": "[\"t.py::test_fix\"]", "PASS_TO_PASS": ["t.py::test_old"]}`
	instFile := filepath.Join(tmp, "i.json")
	if err := os.WriteFile(instFile, []byte(inst), 0o644); err != nil {
		t.Fatal(err)
	}
	n := "0123456789abcdef0123456789abcdef"
	summary := "===== short test summary info =====\nPASSED t.py::test_fix\nFAILED t.py::test_old - x\n===== 1 failed, 1 passed in 0.1s =====\n"
	tests := []struct {
		name     string
		log      string
		resolved bool
		reward   float64
	}{
		{"complete", sandbox.ApplyLine(n, "git-apply") + "\n" + sandbox.StartLine(n) + "\n" + summary + sandbox.EndLine(n) + "\n" + sandbox.ExitLine(n, 1) + "\n", false, 0.3 + 0.7 - 0.5},
		{"forged PASSED after the end marker", sandbox.ApplyLine(n, "git-apply") + "\n" + sandbox.StartLine(n) + "\n" + summary + sandbox.EndLine(n) + "\n" + sandbox.ExitLine(n, 1) + "\nPASSED t.py::test_old\n", false, 0.5},
		{"forged marker pair with another nonce after the real one", sandbox.ApplyLine(n, "git-apply") + "\n" + sandbox.StartLine(n) + "\n" + summary +
			sandbox.StartLine("f00d") + "\n" + strings.ReplaceAll(summary, "FAILED", "PASSED") + sandbox.EndLine("f00d") + "\n" + sandbox.ExitLine("f00d", 0) + "\n" +
			sandbox.EndLine(n) + "\n" + sandbox.ExitLine(n, 1) + "\n", false, 0.5},
		{"no end marker", sandbox.ApplyLine(n, "git-apply") + "\n" + sandbox.StartLine(n) + "\n" + summary, false, 0},
		{"unknown parser", "x", false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logFile := filepath.Join(tmp, "log.txt")
			if err := os.WriteFile(logFile, []byte(tt.log), 0o644); err != nil {
				t.Fatal(err)
			}
			args := []string{"grade", "--instance", instFile, "--log", logFile}
			if tt.name == "unknown parser" {
				args = append(args, "--parser", "nose")
				if code, _, stderr := runCLI(t, args...); code != ExitUsage || !strings.Contains(stderr, "nose") {
					t.Errorf("exit %d, stderr %q", code, stderr)
				}
				return
			}
			code, stdout, stderr := runCLI(t, args...)
			if code != ExitOK {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			var got app.GradeReport
			if err := json.Unmarshal([]byte(stdout), &got); err != nil {
				t.Fatal(err)
			}
			if got.Resolved != tt.resolved || got.Reward < tt.reward-1e-9 || got.Reward > tt.reward+1e-9 || got.Frame != "swetui" {
				t.Errorf("got resolved %v reward %v frame %s, want %v %v", got.Resolved, got.Reward, got.Frame, tt.resolved, tt.reward)
			}
			if got.Forged != strings.HasPrefix(tt.name, "forged marker") {
				t.Errorf("forged_markers = %v", got.Forged)
			}
		})
	}
	if code, _, _ := runCLI(t, "grade", "--log", "x"); code != ExitUsage {
		t.Errorf("missing --instance: exit %d, want %d", code, ExitUsage)
	}
}
