package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runCLI(t testing.TB, args ...string) (int, string, string) {
	t.Helper()
	defaults, err := os.ReadFile("../config.toml")
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	env := Env{Stdout: &out, Stderr: &errOut, Stdin: strings.NewReader(""), DefaultConfig: defaults}
	code := Main(context.Background(), env, args)
	return code, out.String(), errOut.String()
}

func TestConfigCommand(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.toml")
	if err := os.WriteFile(bad, []byte("[sandbox]\nworkers = 2\nworker = 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{"defaults", []string{"config"}, ExitOK, "group_size = 4", ""},
		{"override", []string{"config", "grpo.group_size=8"}, ExitOK, "group_size = 8", ""},
		{"flag after override", []string{"config", "grpo.group_size=8", "--config", "../config.toml"}, ExitOK, "group_size = 8", ""},
		{"bad value", []string{"config", "grpo.group_size=abc"}, ExitUsage, "", "grpo.group_size=abc: want an integer"},
		{"unknown key", []string{"config", "nosuch.key=1"}, ExitUsage, "", `unknown key "nosuch.key"`},
		{"misspelt file key", []string{"config", "--config", bad}, ExitUsage, "", `bad.toml:3: unknown key "sandbox.worker"`},
		{"missing file", []string{"config", "--config", bad + ".none"}, ExitUsage, "", "bad.toml.none"},
		{"invalid values", []string{"config", "grpo.group_size=1", "curriculum.phase=tests"}, ExitUsage, "",
			"grpo.group_size = 1: must be at least 2"},
		{"stray argument", []string{"config", "oops"}, ExitUsage, "", `unexpected argument "oops"`},
		{"unknown flag", []string{"config", "--nosuch"}, ExitUsage, "", "flag provided but not defined: -nosuch"},
		{"help", []string{"config", "--help"}, ExitOK, "", "Usage: swetui config"},
		{"top help", []string{"--help"}, ExitOK, "swetui score", ""},
		{"unknown command", []string{"frobnicate"}, ExitUsage, "", `unknown command "frobnicate"`},
		{"version", []string{"version"}, ExitOK, "swetui ", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, tt.args...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, out, errOut)
			}
			if !strings.Contains(out, tt.stdout) {
				t.Errorf("stdout lacks %q:\n%s", tt.stdout, out)
			}
			if !strings.Contains(errOut, tt.stderr) {
				t.Errorf("stderr lacks %q:\n%s", tt.stderr, errOut)
			}
		})
	}
}

func TestEveryCommandHasHelp(t *testing.T) {
	for _, c := range commands() {
		t.Run(c.name, func(t *testing.T) {
			code, _, errOut := runCLI(t, c.name, "--help")
			if code != ExitOK || !strings.Contains(errOut, "Usage: swetui "+c.name) {
				t.Fatalf("exit %d, stderr %q", code, errOut)
			}
		})
	}
}

// On a machine without the NVIDIA driver, model.device=cuda fails with an
// error that says what is missing and where swetui looked.
func TestCUDADeviceWithoutADriver(t *testing.T) {
	if _, err := os.Stat("/dev/nvidia0"); err == nil {
		t.Skip("this machine has a GPU")
	}
	code, _, stderr := runCLI(t, "version", "model.device=cuda", "model.cuda_libs=[\""+t.TempDir()+"\"]")
	if code != ExitFailure {
		t.Fatalf("exit %d, want %d\n%s", code, ExitFailure, stderr)
	}
	for _, want := range []string{"libcuda", "model.cuda_libs", "LD_LIBRARY_PATH", "model.device=cpu"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("error lacks %q:\n%s", want, stderr)
		}
	}
}
