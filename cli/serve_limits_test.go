package cli

// `swetui serve` under attack (the grader's limits): memory bounded by
// bytes while distinct large patches arrive, client strings quoted in the
// log, patches past reward.max_patch_* scored as their own failure in
// serve and score, and the request deadline kept while CPU-bound checks
// run. Against the real server and reward engine.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/swetui/swetui/app"
	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/serve"
	"github.com/swetui/swetui/task"
)

// post sends a score request and decodes the answer: the verdicts, or the
// error.
func post(t *testing.T, url string, body any) (code int, resp serve.ScoreResponse, errText string) {
	t.Helper()
	data, ok := body.([]byte)
	if !ok {
		var err error
		if data, err = json.Marshal(body); err != nil {
			t.Fatal(err)
		}
	}
	r, err := http.Post(url+"/v1/score", "application/json", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	if r.StatusCode == 200 {
		if err := json.Unmarshal(b, &resp); err != nil {
			t.Fatalf("answer %q: %v", b, err)
		}
		return r.StatusCode, resp, ""
	}
	var e struct{ Error string }
	json.Unmarshal(b, &e)
	return r.StatusCode, resp, e.Error
}

// rssBytes is a process's resident set (Linux).
func rssBytes(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// bigPatch is a distinct well-formed diff of about size bytes, in hunks
// of about 1 KiB.
func bigPatch(salt, size int) string {
	var b strings.Builder
	b.WriteString("--- a/pkg/big.py\n+++ b/pkg/big.py\n")
	line := strings.Repeat("y", 60)
	for h := 0; b.Len() < size; h++ {
		fmt.Fprintf(&b, "@@ -%d,1 +%d,16 @@\n-x%d\n", 20*h+1, 20*h+1, h)
		for i := range 16 {
			fmt.Fprintf(&b, "+%s %d %d\n", line, salt, i)
		}
	}
	return b.String()
}

// TestServeMemoryBoundedByBytes: 200 distinct 700 KB patches (140 MB in
// all) sent one after another to a server whose cache may hold 16 MiB: the
// server's resident memory grows by far less than what it was sent, and
// the cache holds no more than its bound.
func TestServeMemoryBoundedByBytes(t *testing.T) {
	if testing.Short() {
		t.Skip("sends 140 MB of patches")
	}
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	p := startServeProcess(t, "serve.cache_mb=16", "serve.inflight_mb=32", "data.mini_tasks=20")
	pid := p.cmd.Process.Pid
	id := "mini__" // the first task of the suite, whatever its name
	var tasks struct {
		Tasks []struct {
			InstanceID string `json:"instance_id"`
		} `json:"tasks"`
	}
	resp, err := http.Get(p.url + "/v1/tasks")
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&tasks)
	resp.Body.Close()
	if len(tasks.Tasks) == 0 {
		t.Fatal("no tasks")
	}
	id = tasks.Tasks[0].InstanceID
	send := func(salt int) {
		code, r, e := post(t, p.url, serve.ScoreRequest{InstanceID: id, Patches: []string{bigPatch(salt, 700<<10)}, Phase: config.PhaseSyntax})
		if code != 200 || !r.Verdicts[0].SyntaxOK || r.Verdicts[0].Patch != "" {
			t.Fatalf("patch %d: %d %s (syntax %v, patch echoed %v)", salt, code, e, code == 200 && r.Verdicts[0].SyntaxOK, code == 200 && r.Verdicts[0].Patch != "")
		}
	}
	for i := range 10 {
		send(i)
	}
	base := rssBytes(t, pid)
	peak := base
	start := time.Now()
	for i := 10; i < 210; i++ {
		send(i)
		peak = max(peak, rssBytes(t, pid))
	}
	sent := int64(200 * 700 << 10)
	t.Logf("200 patches of 700 KB in %.1fs: resident %d MiB after the first 10, peak %d MiB (+%d MiB for %d MiB sent)",
		time.Since(start).Seconds(), base>>20, peak>>20, (peak-base)>>20, sent>>20)
	if grew := peak - base; grew > 80<<20 {
		t.Errorf("resident memory grew %d MiB while 140 MB of distinct patches arrived: the 16 MiB cache is not bounded by bytes", grew>>20)
	}
	metrics := string(getBody(t, p.url+"/metrics"))
	for _, line := range strings.Split(metrics, "\n") {
		if rest, ok := strings.CutPrefix(line, "swetui_serve_cache_bytes "); ok {
			held, _ := strconv.ParseFloat(rest, 64)
			if held > 16<<20 || held < 8<<20 {
				t.Errorf("the cache holds %.0f bytes, want a full 16 MiB at most", held)
			}
		}
	}
}

// TestServeQuotesClientStrings: an instance id that would forge a log line
// or move the console's cursor, and one of a megabyte, reach the log and the
// answers quoted and cut; the log has no line the client wrote.
func TestServeQuotesClientStrings(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	srv := startServe(t, "data.mini_tasks=20")
	forged := "x\n[00:00:01] step 1 syntax reward 1.000 (forged)"
	escape := "\x1b[2J\x1b[31mred"
	huge := strings.Repeat("h", 1<<20)
	for _, tt := range []struct {
		name string
		body any
		code int
		says string
	}{
		{"forged line", serve.ScoreRequest{InstanceID: forged, Patches: []string{"x"}, Phase: "syntax"}, 404, `instance "x\n[00:00:01] step 1`},
		{"escape", serve.ScoreRequest{InstanceID: escape, Patches: []string{"x"}, Phase: "syntax"}, 404, `instance "\x1b[2J\x1b[31mred"`},
		{"a megabyte", serve.ScoreRequest{InstanceID: huge, Patches: []string{"x"}, Phase: "syntax"}, 404, `... (1048576 bytes)`},
		{"inline escape", serve.ScoreRequest{Instance: json.RawMessage(fmt.Sprintf(`{"instance_id": %s, "repo": "a/b", "base_commit": "c", "test_patch": "t", "FAIL_TO_PASS": ["t"]}`, jsonString(escape))),
			Patches: []string{"x"}, Phase: "syntax"}, 400, `instance_id "\x1b[2J\x1b[31mred" holds white space or control characters`},
		{"phase", map[string]any{"instance_id": "mini__x", "patches": []string{"x"}, "phase": forged}, 400, `phase "x\n[00:00:01]`},
	} {
		code, _, e := post(t, srv.url, tt.body)
		if code != tt.code || !strings.Contains(e, tt.says) || len(e) > 1024 {
			t.Errorf("%s: %d %.200q, want %d saying %q in under 1 KiB", tt.name, code, e, tt.code, tt.says)
		}
	}
	if err := srv.stop(); err != nil {
		t.Fatal(err)
	}
	log := srv.stdout.String()
	for _, bad := range []string{"\n[00:00:01] step 1", "\x1b", huge[:1024]} {
		if strings.Contains(log, bad) {
			t.Errorf("the log holds the client's %.30q unquoted:\n%.2000s", bad, log)
		}
	}
	if !strings.Contains(log, `\x1b[2J`) || !strings.Contains(log, `"x\n[00:00:01]`) {
		t.Errorf("the log does not show the refused ids quoted:\n%.2000s", log)
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// oversizePatches are the attack's two patches for in: its gold patch plus
// 10,000 new files, and a 10 MB diff.
func oversizePatches(in *task.Instance) []string {
	var files strings.Builder
	files.WriteString(in.Patch)
	for i := range 10_000 {
		fmt.Fprintf(&files, "diff --git a/gen/f%d.py b/gen/f%d.py\nnew file mode 100644\n--- /dev/null\n+++ b/gen/f%d.py\n@@ -0,0 +1 @@\n+x = %d\n", i, i, i, i)
	}
	path := task.PatchFiles(in.Patch)[0].Path()
	big := fmt.Sprintf("--- a/%s\n+++ b/%s\n@@ -1 +1 @@\n-x\n+%s\n", path, path, strings.Repeat("z", 10<<20))
	return []string{files.String(), big}
}

// TestOversizePatchesAreScored: the gold patch plus 10,000 files and a
// 10 MB diff, in the docker phase: scored as the patch's failure (reward 0,
// the limit named, not an infrastructure failure, cached), within the
// configured time and without a container, by serve and by score alike.
func TestOversizePatchesAreScored(t *testing.T) {
	serveDocker(t)
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	cfg := config.Default()
	cfg.Data.MiniTasks, cfg.Data.Split = 20, task.SplitAll
	insts, err := task.Load(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	in := &insts[0]
	patches := oversizePatches(in)
	check := func(who string, vs []event.Verdict) {
		t.Helper()
		for i, v := range vs {
			if v.Infra || !v.Oversize || v.Reward != 0 || v.Applied || v.TestsRun || !strings.Contains(v.SyntaxError, "over reward.max_patch_kb") {
				t.Errorf("%s, patch %d: infra %v (%s) oversize %v reward %v tests %v error %q; want the patch's failure",
					who, i, v.Infra, v.InfraCause, v.Oversize, v.Reward, v.TestsRun, v.SyntaxError)
			}
		}
	}
	srv := startServe(t, "data.mini_tasks=20", "serve.max_body_kb=32768", "serve.request_timeout_s=60")
	start := time.Now()
	code, resp, e := post(t, srv.url, serve.ScoreRequest{InstanceID: in.InstanceID, Patches: patches, Phase: config.PhaseDocker})
	took := time.Since(start)
	if code != 200 {
		t.Fatalf("serve: %d %s", code, e)
	}
	t.Logf("serve scored both in %.2fs", took.Seconds())
	if took > 30*time.Second {
		t.Errorf("serve took %s, past half of serve.request_timeout_s", took)
	}
	check("serve", resp.Verdicts)
	if _, again, _ := post(t, srv.url, serve.ScoreRequest{InstanceID: in.InstanceID, Patches: patches, Phase: config.PhaseDocker}); len(again.Cached) != 2 || !again.Cached[0] || !again.Cached[1] {
		t.Errorf("the patches' failures are not cached: %v", again.Cached)
	}

	// A prediction a task: the files for the first, the 10 MB for the second.
	dir := t.TempDir()
	var preds bytes.Buffer
	for i, p := range []string{patches[0], oversizePatches(&insts[1])[1]} {
		line, _ := json.Marshal(app.Prediction{InstanceID: insts[i].InstanceID, Model: "attack", Patch: &p})
		preds.Write(append(line, '\n'))
	}
	predPath, report := filepath.Join(dir, "preds.jsonl"), filepath.Join(dir, "report.json")
	if err := os.WriteFile(predPath, preds.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if code, stdout, stderr := runCLI(t, "score", "--predictions", predPath, "--phase", "docker", "--out", report, "data.mini_tasks=20"); code != ExitOK {
		t.Fatalf("score: exit %d\n%s%s", code, stdout, stderr)
	}
	t.Logf("score scored both in %.2fs", time.Since(start).Seconds())
	var vs []event.Verdict
	for _, e := range readScoreReport(t, report).Instances {
		vs = append(vs, *e.Verdict)
	}
	if len(vs) != 2 {
		t.Fatalf("%d entries in the report", len(vs))
	}
	check("score", vs)
}

// TestServeDeadlineOnCPUHeavyPatches: a request of 40 large patches whose
// host-side checks take far longer than its 5 s deadline is answered 504
// within 5.5 s.
func TestServeDeadlineOnCPUHeavyPatches(t *testing.T) {
	if testing.Short() {
		t.Skip("keeps a core busy for seconds")
	}
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	srv := startServe(t, "data.mini_tasks=20", "serve.request_timeout_s=5", "serve.max_body_kb=131072", "serve.max_patches=64",
		"reward.max_patch_kb=2048")
	cfg := config.Default()
	cfg.Data.MiniTasks, cfg.Data.Split = 20, task.SplitAll
	insts, err := task.Load(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	// One long hunk each: the hack checks read every added line.
	var patches []string
	for salt := range 40 {
		var b strings.Builder
		b.WriteString("--- a/pkg/calc.py\n+++ b/pkg/calc.py\n@@ -1,1 +1,30000 @@\n-x\n")
		for i := range 29999 {
			fmt.Fprintf(&b, "+line %d of a long file, patch %d\n", i, salt)
		}
		b.WriteString("+end\n")
		patches = append(patches, b.String())
	}
	body, err := json.Marshal(serve.ScoreRequest{InstanceID: insts[0].InstanceID, Patches: patches, Phase: config.PhaseApplyOnly})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	code, _, e := post(t, srv.url, body)
	took := time.Since(start)
	t.Logf("answered %d after %.2fs: %s", code, took.Seconds(), e)
	if code != http.StatusGatewayTimeout || !strings.Contains(e, "serve.request_timeout_s") {
		t.Errorf("%d %q, want 504 naming serve.request_timeout_s", code, e)
	}
	if took > 5500*time.Millisecond {
		t.Errorf("a 5 s deadline answered after %s", took)
	}
}
