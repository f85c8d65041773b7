package reward

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/internal/realdata"
)

func realdataDir(t testing.TB) string { return realdata.Dir(t) }

type harnessIndexLine struct {
	InstanceID string   `json:"instance_id"`
	Repo       string   `json:"repo"`
	TestCmd    string   `json:"test_cmd"`
	F2P        []string `json:"FAIL_TO_PASS"`
	P2P        []string `json:"PASS_TO_PASS"`
}

type harnessReport struct {
	PatchIsNone              bool              `json:"patch_is_None"`
	PatchExists              bool              `json:"patch_exists"`
	PatchSuccessfullyApplied bool              `json:"patch_successfully_applied"`
	Resolved                 bool              `json:"resolved"`
	TestsStatus              event.TestsStatus `json:"tests_status"`
}

func readHarnessIndex(t testing.TB) (string, []harnessIndexLine) {
	dir := filepath.Join(realdataDir(t), "harness_logs")
	f, err := os.Open(filepath.Join(dir, "index.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []harnessIndexLine
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for line := 1; sc.Scan(); line++ {
		var l harnessIndexLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("index.jsonl:%d: %v", line, err)
		}
		out = append(out, l)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) != 30 {
		t.Fatalf("index.jsonl has %d lines, want 30", len(out))
	}
	return dir, out
}

// TestGradeReproducesHarnessReports grades every real harness log and
// compares with the harness's own report.json, field by field.
func TestGradeReproducesHarnessReports(t *testing.T) {
	dir, index := readHarnessIndex(t)
	for _, in := range index {
		t.Run(in.InstanceID, func(t *testing.T) {
			log, err := os.ReadFile(filepath.Join(dir, in.InstanceID, "test_output.txt"))
			if err != nil {
				t.Fatal(err)
			}
			raw, err := os.ReadFile(filepath.Join(dir, in.InstanceID, "report.json"))
			if err != nil {
				t.Fatal(err)
			}
			var reports map[string]harnessReport
			if err := json.Unmarshal(raw, &reports); err != nil {
				t.Fatal(err)
			}
			want, ok := reports[in.InstanceID]
			if !ok {
				t.Fatalf("report.json has no entry for %s", in.InstanceID)
			}
			name, ok := ParserNameForRepo(in.Repo)
			if !ok {
				t.Fatalf("no parser for repo %s", in.Repo)
			}
			p, err := ParserFor(name)
			if err != nil {
				t.Fatal(err)
			}
			g, _, err := GradeLog(string(log), Frame{}, p, in.F2P, in.P2P)
			if err != nil {
				t.Fatal(err)
			}
			if g.Resolved != want.Resolved {
				t.Errorf("resolved = %v, harness says %v", g.Resolved, want.Resolved)
			}
			if !reflect.DeepEqual(g.TestsStatus, want.TestsStatus) {
				diffList(t, "FAIL_TO_PASS.success", g.TestsStatus.FailToPass.Success, want.TestsStatus.FailToPass.Success)
				diffList(t, "FAIL_TO_PASS.failure", g.TestsStatus.FailToPass.Failure, want.TestsStatus.FailToPass.Failure)
				diffList(t, "PASS_TO_PASS.success", g.TestsStatus.PassToPass.Success, want.TestsStatus.PassToPass.Success)
				diffList(t, "PASS_TO_PASS.failure", g.TestsStatus.PassToPass.Failure, want.TestsStatus.PassToPass.Failure)
				t.Errorf("tests_status differs from the harness's report")
			}
		})
	}
}

func diffList(t *testing.T, what string, got, want []string) {
	t.Helper()
	if reflect.DeepEqual(got, want) {
		return
	}
	t.Errorf("%s: got %d, want %d", what, len(got), len(want))
	in := map[string]bool{}
	for _, s := range want {
		in[s] = true
	}
	for _, s := range got {
		if !in[s] {
			t.Errorf("  extra %q", s)
		}
	}
	have := map[string]bool{}
	for _, s := range got {
		have[s] = true
	}
	for _, s := range want {
		if !have[s] {
			t.Errorf("  missing %q", s)
		}
	}
}
