package durable

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteAndReplace(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := WriteFile(p, []byte("one")); err != nil {
		t.Fatal(err)
	}
	if err := ReplaceFile(p, []byte("two")); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(p)
	if err != nil || string(got) != "two" {
		t.Fatalf("got %q, %v", got, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("temporary files left: %v", entries)
	}
	if err := SyncDir(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("want an error for a missing folder")
	}
	if err := ReplaceFile(filepath.Join(dir, "missing", "f"), nil); err == nil {
		t.Fatal("want an error for a missing parent")
	}
}

func TestOpenLogRepairsTornLinesAndCuts(t *testing.T) {
	tests := []struct {
		name, before, after string
		keep                func([]byte) bool
		dropped             int
	}{
		{"missing file", "", "", nil, 0},
		{"whole lines untouched", "a\nb\n", "a\nb\n", nil, 0},
		{"torn last line dropped", "a\nb\n{\"step\": 3, \"re", "a\nb\n", nil, 1},
		{"cut after a step", "1\n2\n3\n4\n", "1\n2\n", func(l []byte) bool { return string(l) <= "2" }, 2},
		{"cut and torn", "1\n2\n3", "1\n", func(l []byte) bool { return string(l) <= "1" }, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "h.jsonl")
			if tt.before != "" {
				if err := os.WriteFile(path, []byte(tt.before), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			l, dropped, err := OpenLog(path, tt.keep)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Append([]byte("new")); err != nil {
				t.Fatal(err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			got, _ := os.ReadFile(path)
			if want := tt.after + "new\n"; string(got) != want || dropped != tt.dropped {
				t.Errorf("file %q dropped %d, want %q and %d", got, dropped, want, tt.dropped)
			}
		})
	}
}
