package model

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/swetui/swetui/internal/durable"
)

// createFile opens a checkpoint file for writing; tests replace it to fail
// part-way.
var createFile = func(path string) (checkpointFile, error) { return os.Create(path) }

type checkpointFile interface {
	io.Writer
	Sync() error
	Close() error
}

func bytesOf(data []byte) func(io.Writer) error {
	return func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	}
}

// writeFile creates dir/name (and its folder), streams it with write and
// syncs it to the disk.
func writeFile(dir, name string, write func(io.Writer) error) error {
	path := filepath.Join(dir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	f, err := createFile(path)
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	err = write(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

// writeDirAtomic has write fill a temporary sibling of dir, syncs its
// folders and puts it in dir's place; on any failure dir is left as it was.
func writeDirAtomic(dir string, write func(tmp string) error) error {
	dir = filepath.Clean(dir)
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".tmp-*")
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(tmp)
		}
	}()
	if err := write(tmp); err != nil {
		return err
	}
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := durable.SyncDir(filepath.Join(tmp, e.Name())); err != nil {
				return err
			}
		}
	}
	if err := durable.SyncDir(tmp); err != nil {
		return err
	}
	if err := durable.ReplaceDir(tmp, dir); err != nil {
		return err
	}
	ok = true
	return nil
}
