package sandbox

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
)

// CopyOut copies the folder src of image to dst on the host, through a
// container that is created (never started) and removed again. Package reward
// uses it to fill its apply-check cache once from a task's image when no
// local clone of the repository exists.
func CopyOut(ctx context.Context, d Docker, runID, image, src, dst string) (err error) {
	cfg := &container.Config{Image: image, Cmd: []string{"true"}, NetworkDisabled: true,
		Labels: map[string]string{LabelManaged: "true", LabelRun: runID, LabelOwner: OwnerID(),
			LabelDeadline: strconv.FormatInt(time.Now().Add(10*time.Minute).Unix(), 10)}}
	created, err := d.ContainerCreate(ctx, cfg, &container.HostConfig{NetworkMode: "none"}, nil, nil, "")
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return fmt.Errorf("copy %s out of %s: %w: build or pull it with `swetui prepare`", src, image, ErrImageMissing)
		}
		return fmt.Errorf("copy %s out of %s: %w", src, image, err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if rerr := d.ContainerRemove(rctx, created.ID, container.RemoveOptions{Force: true}); rerr != nil && err == nil {
			err = fmt.Errorf("copy %s out of %s: remove container: %w", src, image, rerr)
		}
	}()
	rc, _, err := d.CopyFromContainer(ctx, created.ID, src)
	if err != nil {
		return fmt.Errorf("copy %s out of %s: %w", src, image, err)
	}
	defer rc.Close()
	if err := untarStripped(rc, dst); err != nil {
		return fmt.Errorf("copy %s out of %s: %w", src, image, err)
	}
	return nil
}

// untarStripped extracts a tar whose entries sit under one top folder (as
// the copy API sends a folder) into dst, without that folder, refusing
// entries that would land outside dst.
func untarStripped(r io.Reader, dst string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		_, rel, _ := strings.Cut(h.Name, "/")
		rel = filepath.Clean(rel)
		if rel == "." || rel == "" {
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return err
			}
			continue
		}
		if filepath.IsAbs(rel) || rel == ".." || strings.HasPrefix(rel, "../") {
			return fmt.Errorf("tar entry %q leaves the destination", h.Name)
		}
		target := filepath.Join(dst, rel)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o777|0o600)
			if err != nil {
				return err
			}
			if _, err := io.Copy(f, tr); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			if err := os.Symlink(h.Linkname, target); err != nil {
				return err
			}
		}
	}
}
