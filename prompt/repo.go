package prompt

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/swetui/swetui/reward"
)

// MaxRetrievedBytes bounds the files BM25 retrieval reads: larger ones are
// data, vendored bundles or generated code, and would fill any budget.
const MaxRetrievedBytes = 256 << 10

// repoTextFiles returns the files BM25 ranks: every blob at commit no
// larger than MaxRetrievedBytes that is text (valid UTF-8 without NUL
// bytes) and not a test file (the gold patch leaves tests to the test
// patch, as SWE-bench's retrieval left them out).
func repoTextFiles(ctx context.Context, dir, commit string) ([]CodeFile, error) {
	out, err := exec.CommandContext(ctx, "git", "-C", dir, "ls-tree", "-r", "-l", "-z", commit).Output()
	if err != nil {
		return nil, fmt.Errorf("list %s at %s: %w", dir, commit, gitErr(err))
	}
	var paths, objects []string
	for _, entry := range bytes.Split(out, []byte{0}) {
		meta, p, ok := strings.Cut(string(entry), "\t")
		f := strings.Fields(meta) // mode, type, object, size
		if !ok || len(f) != 4 || f[1] != "blob" || f[0] == "120000" {
			continue // a symlink, a submodule or the trailing empty entry
		}
		size, err := strconv.Atoi(f[3])
		if err != nil || size > MaxRetrievedBytes || reward.IsTestPath(p) {
			continue
		}
		paths, objects = append(paths, p), append(objects, f[2])
	}
	texts, err := catBlobs(ctx, dir, objects)
	if err != nil {
		return nil, err
	}
	var files []CodeFile
	for i, t := range texts {
		if t == nil || bytes.IndexByte(t, 0) >= 0 || !utf8.Valid(t) {
			continue
		}
		files = append(files, CodeFile{Path: paths[i], Text: string(t)})
	}
	return files, nil
}

// blobsAt reads paths at commit; a path not there reads as nil.
func blobsAt(ctx context.Context, dir, commit string, paths []string) ([][]byte, error) {
	specs := make([]string, len(paths))
	for i, p := range paths {
		specs[i] = commit + ":" + p
	}
	return catBlobs(ctx, dir, specs)
}

// catBlobs reads objects (ids or commit:path specs) through one git
// cat-file --batch: one process for a whole repository, not one a file.
// An object git does not have reads as nil.
func catBlobs(ctx context.Context, dir string, objects []string) ([][]byte, error) {
	if len(objects) == 0 {
		return nil, nil
	}
	cmd := exec.CommandContext(ctx, "git", "-C", dir, "cat-file", "--batch")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("read blobs: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("read blobs: %w", err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("read blobs: %w", err)
	}
	go func() { // written apart from the reads, so neither pipe fills
		w := bufio.NewWriter(stdin)
		for _, o := range objects {
			fmt.Fprintln(w, o)
		}
		w.Flush()
		stdin.Close()
	}()
	r := bufio.NewReaderSize(stdout, 1<<16)
	out := make([][]byte, len(objects))
	var readErr error
	for i := range objects {
		header, err := r.ReadString('\n')
		if err != nil {
			readErr = fmt.Errorf("read blobs: %w", err)
			break
		}
		if h := strings.TrimSuffix(header, "\n"); strings.HasSuffix(h, " missing") || strings.HasSuffix(h, " ambiguous") {
			continue
		}
		f := strings.Fields(header) // <object> <type> <size>
		if len(f) != 3 {
			readErr = fmt.Errorf("read blobs: header %q", strings.TrimSpace(header))
			break
		}
		size, err := strconv.Atoi(f[2])
		if err != nil {
			readErr = fmt.Errorf("read blobs: header %q", strings.TrimSpace(header))
			break
		}
		data := make([]byte, size+1) // the content and its newline
		if _, err := io.ReadFull(r, data); err != nil {
			readErr = fmt.Errorf("read blobs: %w", err)
			break
		}
		if f[1] == "blob" {
			out[i] = data[:size]
		}
	}
	if readErr != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, readErr
	}
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("read blobs: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// gitErr adds git's stderr to an exec error.
func gitErr(err error) error {
	if ee, ok := err.(*exec.ExitError); ok && len(ee.Stderr) > 0 {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
	}
	return err
}
