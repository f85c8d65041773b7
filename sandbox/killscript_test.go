package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// procState reads a process's state letter from /proc/<pid>/stat.
func procState(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		t.Fatalf("read stat of %d: %v", pid, err)
	}
	s := string(b)
	s = s[strings.LastIndex(s, ") ")+2:]
	return s[:1]
}

// The kill script runs on a proc folder that lists only this test's own
// children (a copy of their stat files), so it can signal nothing else.
// A live process is killed; a zombie its parent has not reaped yet (the
// shim reaps a docker exec, late on a busy host) counts as gone, where it
// once kept the script busy until it gave up and lost the session.
func TestKillScript(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc here: the kill script reads it")
	}
	start := func(args ...string) *exec.Cmd {
		cmd := exec.Command(args[0], args[1:]...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd
	}
	// A zombie: exited, not waited for.
	zombie := start("true")
	deadline := time.Now().Add(10 * time.Second)
	for procState(t, zombie.Process.Pid) != "Z" {
		if time.Now().After(deadline) {
			t.Fatal("the child never became a zombie")
		}
		time.Sleep(10 * time.Millisecond)
	}
	live := start("sleep", "600")

	cases := []struct {
		name     string
		pids     []int
		wantExit int
		killed   []int
	}{
		{"nothing to kill", nil, 0, nil},
		{"a zombie is already gone", []int{zombie.Process.Pid}, 0, nil},
		{"a live process is killed", []int{live.Process.Pid}, 0, []int{live.Process.Pid}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			// stat is read live through a link, as /proc/<pid>/stat is.
			for _, pid := range c.pids {
				dir := filepath.Join(root, strconv.Itoa(pid))
				if err := os.Mkdir(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(filepath.Join("/proc", strconv.Itoa(pid), "stat"), filepath.Join(dir, "stat")); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command("/bin/sh", "-c", killScript, "kill", "0", root)
			out, err := cmd.CombinedOutput()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != c.wantExit {
				t.Fatalf("exit %d, want %d (%q)", code, c.wantExit, out)
			}
			for _, pid := range c.killed {
				if s := procState(t, pid); s != "Z" {
					t.Errorf("process %d is in state %s, want killed (Z)", pid, s)
				}
			}
		})
	}
}
