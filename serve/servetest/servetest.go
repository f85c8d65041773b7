// Package servetest holds what the tests of `swetui serve` share (package
// serve's against a fake scorer, cli's against the real pool): the tools
// they need, skipped without them except under CI=true, whose setup
// installs them; the Python client, run as a trainer runs it; and
// promtool's check of /metrics.
package servetest

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/swetui/swetui/event"
)

// NeedTool returns the path of a command, or skips the test without it
// (fails under CI=true, where Debian's package pkg is installed).
func NeedTool(t testing.TB, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s missing under CI (.ci/setup installs Debian's %s)", name, pkg)
		}
		t.Skipf("%s not installed (apt-get install %s): skipped", name, pkg)
	}
	return p
}

// ClientPath is clients/python/swetui_client.py in this checkout.
func ClientPath(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("servetest: no source path")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "clients", "python", "swetui_client.py")
}

// PythonClient runs the Python client's command line (standard library
// only) with args against the server at url and returns its summary (what
// it printed on stderr).
func PythonClient(t testing.TB, url string, args ...string) string {
	t.Helper()
	python := NeedTool(t, "python3", "python3")
	cmd := exec.Command(python, append([]string{ClientPath(t), "--url", url}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("python client %v: %v\n%s", args, err, stderr.String())
	}
	t.Logf("python client: %s", strings.TrimSpace(stderr.String()))
	return stderr.String()
}

// Result is one line of the Python client's `predictions` output.
type Result struct {
	InstanceID string        `json:"instance_id"`
	Verdict    event.Verdict `json:"verdict"`
	Error      string        `json:"error"`
}

// ReadResults reads the Python client's `predictions --out` file.
func ReadResults(t testing.TB, path string) []Result {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []Result
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var r Result
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

// Promtool has `promtool check metrics` (Debian's prometheus package)
// read an exposition: its format and the naming rules.
func Promtool(t testing.TB, metrics []byte) {
	t.Helper()
	cmd := exec.Command(NeedTool(t, "promtool", "prometheus"), "check", "metrics")
	cmd.Stdin = bytes.NewReader(metrics)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}
