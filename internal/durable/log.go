package durable

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Log is an append-only JSON-lines history file (metrics.jsonl,
// rollouts.jsonl, events.jsonl). Each Append writes one whole line and
// flushes it, so a reader or a crash sees whole lines only, except for a
// line torn by a kill or a full disk, which OpenLog repairs.
type Log struct {
	f *os.File
	w *bufio.Writer
}

// OpenLog opens path for appending after repairing it: a torn last line
// (no final newline) is dropped, and so is every line keep rejects (the
// lines a resumed run is about to write again). keep may be nil. It reports
// how many lines were dropped.
func OpenLog(path string, keep func(line []byte) bool) (*Log, int, error) {
	dropped, err := repairLog(path, keep)
	if err != nil {
		return nil, 0, fmt.Errorf("open %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, 0, fmt.Errorf("open %s: %w", path, err)
	}
	return &Log{f: f, w: bufio.NewWriter(f)}, dropped, nil
}

// repairLog rewrites path (atomically) without its torn last line and the
// lines keep rejects; it leaves the file alone when there is nothing to drop.
func repairLog(path string, keep func([]byte) bool) (int, error) {
	in, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".repair-*")
	if err != nil {
		return 0, err
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	w := bufio.NewWriter(tmp)
	r := bufio.NewReader(in)
	dropped := 0
	for {
		line, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			if len(line) > 0 {
				dropped++ // torn: the process died mid-line
			}
			break
		}
		if err != nil {
			tmp.Close()
			return 0, err
		}
		if keep != nil && !keep(bytes.TrimSuffix(line, []byte("\n"))) {
			dropped++
			continue
		}
		if _, err := w.Write(line); err != nil {
			tmp.Close()
			return 0, err
		}
	}
	if dropped == 0 {
		tmp.Close()
		return 0, nil
	}
	if err := w.Flush(); err != nil {
		tmp.Close()
		return 0, err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return 0, err
	}
	if err := tmp.Close(); err != nil {
		return 0, err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return 0, err
	}
	return dropped, SyncDir(filepath.Dir(path))
}

// Append writes line (without its newline) and flushes it.
func (l *Log) Append(line []byte) error {
	if _, err := l.w.Write(append(line, '\n')); err != nil {
		return err
	}
	return l.w.Flush()
}

// Close flushes and closes the file.
func (l *Log) Close() error {
	ferr := l.w.Flush()
	cerr := l.f.Close()
	return errors.Join(ferr, cerr)
}
