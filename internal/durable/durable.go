// Package durable owns the few file operations that must survive a crash:
// writing a file through to the disk, replacing one atomically, and making a
// rename in a folder durable. Checkpoints (model and train) are built on them.
package durable

import (
	"fmt"
	"os"
	"path/filepath"
)

// WriteFile creates path with data and syncs it to the disk before closing.
func WriteFile(path string, data []byte) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// ReplaceFile writes data to a temporary file beside path, syncs it and
// renames it over path, so a crash leaves either the old file or the new.
func ReplaceFile(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, werr)
	}
	return SyncDir(filepath.Dir(path))
}

// SyncDir makes the renames and creations in dir durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	return nil
}

// The file operations ReplaceDir runs, replaced in tests to fail at each step.
var (
	rename    = os.Rename
	removeAll = os.RemoveAll
	syncDir   = SyncDir
)

// ReplaceDir puts the folder tmp (complete and synced by the caller) in
// place of dir, in dir's parent folder: the old dir is moved aside, tmp
// renamed to dir, the parent synced, then the old copy removed. One rule
// for every failure: the old dir comes back, tmp is left for the caller to
// remove, and the error names the step. A copy left aside by a crash
// between the first two steps (dir missing) is put back first.
func ReplaceDir(tmp, dir string) error {
	dir = filepath.Clean(dir)
	parent := filepath.Dir(dir)
	aside := dir + ".old"
	if _, err := os.Lstat(dir); os.IsNotExist(err) {
		if _, err := os.Lstat(aside); err == nil {
			if err := rename(aside, dir); err != nil {
				return fmt.Errorf("replace %s: put back the copy a crash left aside: %w", dir, err)
			}
		}
	}
	_ = removeAll(aside) // a copy left by a crash after the replace
	hadOld := false
	if _, err := os.Lstat(dir); err == nil {
		if err := rename(dir, aside); err != nil {
			return fmt.Errorf("replace %s: move the old copy aside: %w", dir, err)
		}
		hadOld = true
	}
	restore := func(step string, err error) error {
		if hadOld {
			if rerr := rename(aside, dir); rerr != nil {
				return fmt.Errorf("replace %s: %s: %w (and the old copy stays at %s: %v)", dir, step, err, aside, rerr)
			}
		}
		return fmt.Errorf("replace %s: %s: %w", dir, step, err)
	}
	if err := rename(tmp, dir); err != nil {
		return restore("rename the new copy", err)
	}
	if err := syncDir(parent); err != nil {
		if rerr := rename(dir, tmp); rerr != nil {
			return fmt.Errorf("replace %s: sync %s: %w (the new copy stays in place: %v)", dir, parent, err, rerr)
		}
		return restore("sync "+parent, err)
	}
	if hadOld {
		_ = removeAll(aside) // the new copy is durable; a leftover is removed next time
	}
	return nil
}
