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
