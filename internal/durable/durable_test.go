package durable

import (
	"errors"
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

// TestReplaceDir fails each step of the replace in turn: whatever fails,
// the old copy is back in place and the new one left where it was.
func TestReplaceDir(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name    string
		failAt  string // "aside", "new", "sync", "remove" or "" (none)
		wantErr bool
		want    string // dir's content afterwards
	}{
		{"success", "", false, "new"},
		{"moving the old copy aside fails", "aside", true, "old"},
		{"renaming the new copy fails", "new", true, "old"},
		{"syncing the parent fails", "sync", true, "old"},
		{"removing the old copy fails: the new one stands", "remove", false, "new"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			dir, tmp := filepath.Join(root, "ckpt"), filepath.Join(root, ".ckpt.tmp")
			for p, s := range map[string]string{dir: "old", tmp: "new"} {
				os.Mkdir(p, 0o755)
				os.WriteFile(filepath.Join(p, "f"), []byte(s), 0o644)
			}
			renames := 0
			rename = func(a, b string) error {
				renames++
				if (tt.failAt == "aside" && renames == 1) || (tt.failAt == "new" && renames == 2) {
					return boom
				}
				return os.Rename(a, b)
			}
			syncDir = func(d string) error {
				if tt.failAt == "sync" {
					return boom
				}
				return SyncDir(d)
			}
			removeAll = func(p string) error {
				if tt.failAt == "remove" && renames >= 2 {
					return boom
				}
				return os.RemoveAll(p)
			}
			t.Cleanup(func() { rename, syncDir, removeAll = os.Rename, SyncDir, os.RemoveAll })
			err := ReplaceDir(tmp, dir)
			if (err != nil) != tt.wantErr || (err != nil && !errors.Is(err, boom)) {
				t.Fatalf("ReplaceDir: %v, want error %v", err, tt.wantErr)
			}
			if got, _ := os.ReadFile(filepath.Join(dir, "f")); string(got) != tt.want {
				t.Errorf("dir holds %q, want %q", got, tt.want)
			}
			if _, serr := os.Stat(tmp); (serr == nil) != tt.wantErr {
				t.Errorf("tmp exists %v after error %v: the new copy belongs where it was on failure, in place on success", serr == nil, err)
			}
			if tt.failAt != "remove" {
				if _, serr := os.Stat(dir + ".old"); serr == nil {
					t.Error("the old copy was left aside")
				}
			}
		})
	}
}

// TestReplaceDirAfterCrash: a crash between moving the old copy aside and
// renaming the new one left no dir; the next replace puts the old back first
// and a failure then leaves it in place.
func TestReplaceDirAfterCrash(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "ckpt")
	os.Mkdir(dir+".old", 0o755)
	os.WriteFile(filepath.Join(dir+".old", "f"), []byte("old"), 0o644)
	if err := ReplaceDir(filepath.Join(root, "missing"), dir); err == nil {
		t.Fatal("replacing with a missing folder: no error")
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "f")); string(got) != "old" {
		t.Errorf("dir holds %q, want the old copy back", got)
	}
}
