package sandbox

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The test image's /testbed comes out as a working git repository, and the
// container used for the copy is gone afterwards.
func TestCopyOutRepository(t *testing.T) {
	d := realDocker(t)
	img := pyImage(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dst := filepath.Join(t.TempDir(), "testbed")
	if err := CopyOut(ctx, d, "copyout-test", img, "/testbed", dst); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("git", "-C", dst, "-c", "safe.directory=*", "log", "--format=%s").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "base" {
		t.Fatalf("copied repository: %v %s", err, out)
	}
	for name, body := range pyRepo {
		got, err := os.ReadFile(filepath.Join(dst, name))
		if err != nil || string(got) != body {
			t.Fatalf("%s differs after the copy: %v", name, err)
		}
	}
	if err := CopyOut(ctx, d, "copyout-test", "swetui/no-such-image:1", "/testbed", dst); !errors.Is(err, ErrImageMissing) {
		t.Fatalf("missing image: %v", err)
	}
}

func TestUntarStrippedRefusesEscapes(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "testbed/../../evil", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1})
	tw.Write([]byte("x"))
	tw.Close()
	if err := untarStripped(&buf, t.TempDir()); err == nil || !strings.Contains(err.Error(), "leaves the destination") {
		t.Fatalf("want a refusal, got %v", err)
	}
}
