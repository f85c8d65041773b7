package task

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/internal/realdata"
)

// record is a fixture instance as JSON; f2p is written as a JSON-encoded
// string, as on the Hugging Face hub.
func record(id string) string {
	return fmt.Sprintf(`{"instance_id": %q, "repo": "psf/requests", "base_commit": "abc123", "problem_statement": "it breaks",`+
		` "patch": "p", "test_patch": "diff --git a/tests/test_x.py b/tests/test_x.py\n", "FAIL_TO_PASS": "[\"tests/test_x.py::test_a\"]",`+
		` "PASS_TO_PASS": [], "version": "2.3", "extra_column": 7}`, id)
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func dataCfg(source string) config.Config {
	cfg := config.Default()
	cfg.Data.Source = source
	cfg.Data.Split = SplitAll
	return cfg
}

func ids(ins []Instance) []string {
	out := make([]string, len(ins))
	for i, in := range ins {
		out[i] = in.InstanceID
	}
	return out
}

func TestLoadFormats(t *testing.T) {
	three := []string{record("a__b-1"), record("a__b-2"), record("a__b-3")}
	tests := []struct {
		name, file, content string
	}{
		{"jsonl", "d.jsonl", strings.Join(three, "\n") + "\n"},
		{"jsonl no final newline, blank lines", "d.jsonl", "\n" + strings.Join(three, "\n\n")},
		{"json array", "d.json", "[\n  " + strings.Join(three, ",\n  ") + "\n]\n"},
		{"json array on one line", "d.json", "[" + strings.Join(three, ",") + "]"},
		{"json lines under .json", "d.json", strings.Join(three, "\n")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Load(context.Background(), dataCfg(writeFile(t, tt.file, tt.content)))
			if err != nil {
				t.Fatal(err)
			}
			if want := []string{"a__b-1", "a__b-2", "a__b-3"}; !reflect.DeepEqual(ids(got), want) {
				t.Fatalf("ids %v, want %v", ids(got), want)
			}
			in := got[0]
			if !reflect.DeepEqual(in.FailToPass, TestList{"tests/test_x.py::test_a"}) || in.Version != "2.3" {
				t.Fatalf("decoded %+v", in)
			}
			// The spec table filled the execution fields.
			if in.TestCmd != "pytest -rA" || in.LogParser != ParserPytestOptions ||
				!reflect.DeepEqual(in.TestDirectives, []string{"tests/test_x.py"}) {
				t.Fatalf("spec not applied: cmd %q parser %q directives %q", in.TestCmd, in.LogParser, in.TestDirectives)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	good := record("a__b-1")
	noRepo := strings.Replace(record("a__b-2"), `"repo": "psf/requests", `, "", 1)
	badF2P := strings.Replace(record("a__b-2"), `"FAIL_TO_PASS": "[\"tests/test_x.py::test_a\"]"`, `"FAIL_TO_PASS": "oops"`, 1)
	badType := strings.Replace(record("a__b-2"), `"base_commit": "abc123"`, `"base_commit": 12`, 1)
	tests := []struct {
		name, file, content string
		want                []string // substrings of the error
	}{
		{"jsonl syntax", "d.jsonl", good + "\n{\"instance_id\": \n", []string{"d.jsonl:2:", "not a JSON object"}},
		{"jsonl bad test list", "d.jsonl", good + "\n" + badF2P + "\n", []string{"d.jsonl:2:", `field "FAIL_TO_PASS"`, "not a JSON-encoded list"}},
		{"jsonl wrong type", "d.jsonl", good + "\n\n" + badType + "\n", []string{"d.jsonl:3:", `field "base_commit"`, "want a string"}},
		{"jsonl missing field", "d.jsonl", good + "\n" + noRepo + "\n", []string{"d.jsonl:2:", "instance a__b-2", `missing field "repo"`}},
		{"jsonl duplicate", "d.jsonl", good + "\n" + good + "\n", []string{"d.jsonl:2:", `duplicate instance_id "a__b-1"`, "first at", "d.jsonl:1"}},
		{"jsonl not an object", "d.jsonl", "[1, 2]\n", []string{"d.jsonl:1:", "not a JSON object"}},
		{"json array bad record", "d.json", "[\n" + good + ",\n" + badF2P + "\n]", []string{"d.json:3 (record 2)", `field "FAIL_TO_PASS"`}},
		{"json array syntax", "d.json", "[\n" + good + ",\n{\"instance_id\" 1}\n]", []string{"d.json:3 (record 2): invalid character"}},
		{"json array truncated", "d.json", "[\n" + good + ",\n", []string{"d.json:3 (record 2): unexpected end of file"}},
		{"json array duplicate", "d.json", "[" + good + ",\n\n" + good + "]", []string{"d.json:3 (record 2)", "duplicate", "first at", "d.json:1 (record 1)"}},
		{"json empty", "d.json", "  \n", []string{"d.json", "empty file"}},
		{"unknown extension", "d.csv", "x", []string{"d.csv", "unknown dataset format"}},
		{"not parquet", "d.parquet", "PAR1 this is not parquet", []string{"d.parquet", "not a parquet file"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(context.Background(), dataCfg(writeFile(t, tt.file, tt.content)))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not contain %q", err, w)
				}
			}
		})
	}
	if _, err := Load(context.Background(), dataCfg("/nonexistent/d.jsonl")); err == nil || !strings.Contains(err.Error(), "/nonexistent/d.jsonl") {
		t.Fatalf("missing file: error %v", err)
	}
}

// hfRow is a row as the Hugging Face hub stores SWE-bench: strings, with
// the test lists JSON-encoded.
type hfRow struct {
	InstanceID       string  `parquet:"instance_id"`
	Repo             string  `parquet:"repo"`
	BaseCommit       string  `parquet:"base_commit"`
	ProblemStatement string  `parquet:"problem_statement"`
	HintsText        *string `parquet:"hints_text,optional"`
	Patch            string  `parquet:"patch"`
	TestPatch        string  `parquet:"test_patch"`
	FailToPass       string  `parquet:"FAIL_TO_PASS"`
	PassToPass       string  `parquet:"PASS_TO_PASS"`
	Version          string  `parquet:"version"`
	Difficulty       int64   `parquet:"difficulty"`
}

// listRow stores the test lists as parquet lists, as SWE-Gym-style exports do.
type listRow struct {
	InstanceID       string   `parquet:"instance_id"`
	Repo             string   `parquet:"repo"`
	BaseCommit       string   `parquet:"base_commit"`
	ProblemStatement string   `parquet:"problem_statement"`
	TestPatch        string   `parquet:"test_patch"`
	FailToPass       []string `parquet:"FAIL_TO_PASS,list"`
	PassToPass       []string `parquet:"PASS_TO_PASS,list"`
	ImageName        string   `parquet:"image_name"`
}

func writeParquet[T any](t *testing.T, rows []T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "d.parquet")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	// Small row groups so that the reader crosses group boundaries.
	if err := parquet.Write(f, rows, parquet.PageBufferSize(256), parquet.MaxRowsPerRowGroup(2)); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadParquet(t *testing.T) {
	hint := "look at utils"
	hf := func(id, f2p string) hfRow {
		return hfRow{InstanceID: id, Repo: "pallets/flask", BaseCommit: "abc", ProblemStatement: "x", HintsText: &hint,
			Patch: "p", TestPatch: "diff --git a/tests/test_a.py b/tests/test_a.py\n", FailToPass: f2p, PassToPass: "[]", Version: "2.0", Difficulty: 3}
	}
	t.Run("hub strings", func(t *testing.T) {
		rows := []hfRow{hf("f-1", `["t::a"]`), hf("f-2", `["t::b", "t::c"]`), hf("f-3", `["t::d"]`)}
		rows[1].HintsText = nil
		got, err := Load(context.Background(), dataCfg(writeParquet(t, rows)))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(ids(got), []string{"f-1", "f-2", "f-3"}) {
			t.Fatalf("ids %v", ids(got))
		}
		if !reflect.DeepEqual(got[1].FailToPass, TestList{"t::b", "t::c"}) || got[0].HintsText != hint || got[1].HintsText != "" {
			t.Fatalf("decoded %+v", got[1])
		}
		if got[0].TestCmd != "pytest -rA" || got[0].LogParser != ParserPytest {
			t.Fatalf("spec not applied: %+v", got[0])
		}
	})
	t.Run("lists", func(t *testing.T) {
		rows := []listRow{
			{"g-1", "acme/w", "abc", "x", "tp", []string{"a", "b"}, []string{}, "acme/w:1"},
			{"g-2", "acme/w", "abc", "x", "tp", []string{"c"}, []string{"d"}, "acme/w:2"},
		}
		got, err := Load(context.Background(), dataCfg(writeParquet(t, rows)))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got[0].FailToPass, TestList{"a", "b"}) || len(got[0].PassToPass) != 0 ||
			!reflect.DeepEqual(got[1].PassToPass, TestList{"d"}) || got[1].Image != "acme/w:2" {
			t.Fatalf("decoded %+v", got)
		}
	})
	errs := []struct {
		name string
		rows []hfRow
		want []string
	}{
		{"bad test list", []hfRow{hf("f-1", `["a"]`), hf("f-2", `["a"]`), hf("f-3", "nope")}, []string{"d.parquet: row 3", `field "FAIL_TO_PASS"`}},
		{"duplicate", []hfRow{hf("f-1", `["a"]`), hf("f-2", `["a"]`), hf("f-1", `["a"]`)}, []string{"d.parquet: row 3", `duplicate instance_id "f-1"`, "row 1"}},
		{"empty FAIL_TO_PASS", []hfRow{hf("f-1", `[]`)}, []string{"d.parquet: row 1", "instance f-1", `"FAIL_TO_PASS" is empty`}},
	}
	for _, tt := range errs {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(context.Background(), dataCfg(writeParquet(t, tt.rows)))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestLoadSelection(t *testing.T) {
	var lines []string
	for i := 0; i < 40; i++ {
		lines = append(lines, record(fmt.Sprintf("s__r-%d", i)))
	}
	// One record pins its split explicitly.
	lines[5] = strings.Replace(lines[5], `"version"`, `"split": "test", "version"`, 1)
	path := writeFile(t, "d.jsonl", strings.Join(lines, "\n"))
	load := func(split string, limit int, include, exclude []string) ([]Instance, error) {
		cfg := dataCfg(path)
		cfg.Data.Split, cfg.Data.TrainLimit, cfg.Data.Include, cfg.Data.Exclude = split, limit, include, exclude
		cfg.Data.TestFrac = 0.25
		return Load(context.Background(), cfg)
	}
	all, err := load(SplitAll, 0, nil, nil)
	if err != nil || len(all) != 40 {
		t.Fatalf("all: %d, %v", len(all), err)
	}
	train, _ := load(SplitTrain, 0, nil, nil)
	test, _ := load(SplitTest, 0, nil, nil)
	if len(train)+len(test) != 40 || len(test) == 0 || len(train) == 0 {
		t.Fatalf("train %d + test %d != 40", len(train), len(test))
	}
	for _, in := range train {
		if in.Split != SplitTrain || IsTest(in.InstanceID, 0.25) || in.InstanceID == "s__r-5" {
			t.Fatalf("%s in train", in.InstanceID)
		}
	}
	found := false
	for _, in := range test {
		found = found || in.InstanceID == "s__r-5"
	}
	if !found {
		t.Fatal("record with split \"test\" not in the test split")
	}
	limited, _ := load(SplitTrain, 3, nil, nil)
	if !reflect.DeepEqual(ids(limited), ids(train[:3])) {
		t.Fatalf("train_limit 3: %v, want %v", ids(limited), ids(train[:3]))
	}
	if tl, _ := load(SplitTest, 1, nil, nil); len(tl) != len(test) {
		t.Fatalf("train_limit cut the test split to %d", len(tl))
	}
	inc, _ := load(SplitAll, 0, []string{"s__r-7", "s__r-2", "s__r-9"}, []string{"s__r-9"})
	if !reflect.DeepEqual(ids(inc), []string{"s__r-2", "s__r-7"}) {
		t.Fatalf("include/exclude: %v", ids(inc))
	}
	if _, err := load(SplitAll, 0, []string{"s__r-1", "nope-1"}, nil); err == nil || !strings.Contains(err.Error(), "nope-1") {
		t.Fatalf("unknown include: %v", err)
	}
	if _, err := load("dev", 0, nil, nil); err == nil || !strings.Contains(err.Error(), "data.split") {
		t.Fatalf("bad split: %v", err)
	}
}

// TestLoadRealInstances decodes the 30 SWE-bench Lite instances as
// published (test lists as JSON-encoded strings).
func TestLoadRealInstances(t *testing.T) {
	path := filepath.Join(realdata.Dir(t), "swebench_lite_sample30.jsonl")
	got, err := Load(context.Background(), dataCfg(path))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 30 {
		t.Fatalf("%d instances, want 30", len(got))
	}
	for _, in := range got {
		if len(in.FailToPass) == 0 || in.TestCmd == "" || in.LogParser == "" || len(in.TestDirectives) == 0 {
			t.Errorf("%s: f2p %d cmd %q parser %q directives %q", in.InstanceID, len(in.FailToPass), in.TestCmd, in.LogParser, in.TestDirectives)
		}
		if _, err := in.TestCommand(); err != nil {
			t.Error(err)
		}
	}
	byID := map[string]Instance{}
	for _, in := range got {
		byID[in.InstanceID] = in
	}
	s := byID["sympy__sympy-11400"]
	if !reflect.DeepEqual([]string(s.FailToPass), []string{"test_ccode_Relational", "test_ccode_sinc"}) || s.LogParser != ParserSympy {
		t.Fatalf("sympy__sympy-11400: %q %q", s.FailToPass, s.LogParser)
	}
	flask := byID["pallets__flask-4992"]
	if cmd, _ := flask.TestCommand(); cmd != "pytest -rA tests/test_config.py" {
		t.Fatalf("flask-4992 command %q", cmd)
	}
}

// TestLoadStreamsLargeFile loads 20,000 instances and keeps 10, from JSON
// lines and from a JSON array: the loader holds only what it selects, so the
// heap stays far below the file's size.
func TestLoadStreamsLargeFile(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	for _, format := range []string{"jsonl", "json"} {
		t.Run(format, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "big."+format)
			f, err := os.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			pad := strings.Repeat("x", 2000)
			sep := "\n"
			if format == "json" {
				f.WriteString("[\n")
			}
			for i := 0; i < 20000; i++ {
				rec := map[string]any{"instance_id": fmt.Sprintf("big__r-%d", i), "repo": "acme/r", "base_commit": "c",
					"problem_statement": pad, "patch": pad, "test_patch": "diff --git a/t.py b/t.py\n", "FAIL_TO_PASS": []string{"t"}}
				b, _ := json.Marshal(rec)
				if format == "json" && i < 19999 {
					sep = ",\n"
				} else if format == "json" {
					sep = "\n]\n"
				}
				f.Write(append(b, sep...))
			}
			f.Close()
			st, _ := os.Stat(path)
			cfg := dataCfg(path)
			cfg.Data.Split, cfg.Data.TrainLimit = SplitTrain, 10
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			got, err := Load(context.Background(), cfg)
			if err != nil || len(got) != 10 {
				t.Fatalf("%d instances, %v", len(got), err)
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > st.Size()/4 {
				t.Fatalf("heap grew by %d bytes after loading 10 of a %d-byte file", grew, st.Size())
			}
			runtime.KeepAlive(got)
		})
	}
}

func TestLoadCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Load(ctx, dataCfg(writeFile(t, "d.jsonl", record("a__b-1"))))
	if err != context.Canceled {
		t.Fatalf("error %v, want context.Canceled", err)
	}
}

func TestValidate(t *testing.T) {
	ok := Instance{InstanceID: "a__b-1", Repo: "a/b", BaseCommit: "c", ProblemStatement: "p", TestPatch: "t", FailToPass: TestList{"x"}}
	tests := []struct {
		name string
		edit func(*Instance)
		want string
	}{
		{"valid", func(*Instance) {}, ""},
		{"no id", func(in *Instance) { in.InstanceID = "" }, `missing field "instance_id"`},
		{"no base commit", func(in *Instance) { in.BaseCommit = "" }, `instance a__b-1: missing field "base_commit"`},
		{"no issue: a minimal instance", func(in *Instance) { in.ProblemStatement = "" }, ""},
		{"no test patch", func(in *Instance) { in.TestPatch = "" }, `instance a__b-1: missing field "test_patch"`},
		{"eval script instead", func(in *Instance) { in.TestPatch, in.EvalScript = "", "run.sh" }, ""},
		{"no FAIL_TO_PASS", func(in *Instance) { in.FailToPass = nil }, `instance a__b-1: field "FAIL_TO_PASS" is empty`},
		{"bad split", func(in *Instance) { in.Split = "dev" }, `instance a__b-1: field "split" is "dev"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := ok
			tt.edit(&in)
			err := in.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want %q", err, tt.want)
			}
		})
	}
}

// TestJSONArrayLinesFarIn checks line numbers deep in a pretty-printed
// array, past many refills of the decoder's buffer.
func TestJSONArrayLinesFarIn(t *testing.T) {
	var b strings.Builder
	b.WriteString("[\n")
	line := 2
	for i := 0; i < 400; i++ {
		rec := strings.ReplaceAll(record(fmt.Sprintf("far__r-%d", i)), ", ", ",\n    ")
		b.WriteString("  " + rec + ",\n")
		line += strings.Count(rec, "\n") + 1
	}
	badLine := line
	b.WriteString("  " + strings.Replace(record("far__r-bad"), `"base_commit": "abc123"`, `"base_commit": []`, 1) + ",\n")
	line++
	b.WriteString("  {\"instance_id\": \"x\",\n  \"repo\" 7}\n]\n")
	for _, tt := range []struct {
		name, content, want string
	}{
		{"bad field", b.String(), fmt.Sprintf("d.json:%d (record 401): field \"base_commit\"", badLine)},
		{"syntax", strings.Replace(b.String(), `"base_commit": []`, `"base_commit": "c"`, 1), fmt.Sprintf("d.json:%d (record 402): invalid character", line+1)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(context.Background(), dataCfg(writeFile(t, "d.json", tt.content)))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want %q", err, tt.want)
			}
		})
	}
}
