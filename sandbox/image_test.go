package sandbox

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"
)

// pullFake serves a canned pull stream.
type pullFake struct {
	*fakeDocker
	stream string
	tagged []string
}

func (f *pullFake) ImagePull(ctx context.Context, ref string, _ image.PullOptions) (io.ReadCloser, error) {
	return io.NopCloser(strings.NewReader(f.stream)), nil
}

func (f *pullFake) ImageTag(ctx context.Context, src, dst string) error {
	f.tagged = append(f.tagged, src+" -> "+dst)
	return nil
}

func pullStream(msgs ...map[string]any) string {
	var b strings.Builder
	for _, m := range msgs {
		j, _ := json.Marshal(m)
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.String()
}

func prog(cur, total int64) map[string]any {
	return map[string]any{"current": cur, "total": total}
}

func TestPullAggregatesLayers(t *testing.T) {
	tests := []struct {
		name    string
		stream  string
		wantErr string
		last    Progress
	}{
		{
			name: "two layers, one already there",
			stream: pullStream(
				map[string]any{"status": "Pulling from swebench/x", "id": "latest"},
				map[string]any{"status": "Already exists", "id": "l1"},
				map[string]any{"status": "Pulling fs layer", "id": "l2"},
				map[string]any{"status": "Downloading", "id": "l2", "progressDetail": prog(50, 200)},
				map[string]any{"status": "Download complete", "id": "l2"},
				map[string]any{"status": "Downloading", "id": "l3", "progressDetail": prog(10, 100)},
				map[string]any{"status": "Pull complete", "id": "l2"},
				map[string]any{"status": "Pull complete", "id": "l3"},
				map[string]any{"status": "Digest: sha256:abc"},
			),
			last: Progress{Image: "sweb.eval.x86_64.a__b-1", Phase: "pull", Line: "Digest: sha256:abc", Layers: 3, LayersDone: 3, Current: 300, Total: 300},
		},
		{
			name:    "registry error",
			stream:  pullStream(map[string]any{"error": "pull access denied", "errorDetail": map[string]any{"message": "pull access denied"}}),
			wantErr: "pull image swebench/sweb.eval.x86_64.a_1776_b-1:latest (for sweb.eval.x86_64.a__b-1): pull access denied",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &pullFake{fakeDocker: newFake("a"), stream: tc.stream}
			name := InstanceImage("a__b-1")
			var got []Progress
			err := Pull(context.Background(), f, RemoteImage(name), name, func(p Progress) { got = append(got, p) })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "without a registry") {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) == 0 || got[len(got)-1] != tc.last {
				t.Errorf("last progress %+v, want %+v", got[len(got)-1], tc.last)
			}
			// Progress never goes backwards.
			for i := 1; i < len(got); i++ {
				if got[i].LayersDone < got[i-1].LayersDone {
					t.Errorf("layers done went back: %+v after %+v", got[i], got[i-1])
				}
			}
			if len(f.tagged) != 1 || f.tagged[0] != RemoteImage(name)+" -> "+name {
				t.Errorf("tagged %v", f.tagged)
			}
		})
	}
}

// TestBuildAndPrepare builds small images FROM the base on the real engine:
// build output streams, a failing build says why, and Prepare rebuilds an
// image whose labels are not the wanted ones.
func TestBuildAndPrepare(t *testing.T) {
	d := realDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pyImage(t) // the base image must be there

	var lines []string
	err := Build(ctx, d, "swetui/sandbox-test-fail:1", TarContext(map[string][]byte{
		"Dockerfile": []byte("FROM " + BaseImage + "\nRUN echo about to fail && false\n")}), "", func(p Progress) { lines = append(lines, p.Line) })
	if err == nil || !strings.Contains(err.Error(), "swetui/sandbox-test-fail:1") || !strings.Contains(err.Error(), "about to fail") {
		t.Errorf("failing build: %v", err)
	}
	if !strings.Contains(strings.Join(lines, "\n"), "about to fail") {
		t.Errorf("build output not streamed: %q", lines)
	}

	const name = "swetui/sandbox-test-labels:1"
	src := func(v string) ImageSource {
		return ImageSource{Name: name, Labels: map[string]string{"swetui.test.version": v},
			Context: func() (io.ReadCloser, error) {
				return TarContext(map[string][]byte{"Dockerfile": []byte("FROM " + BaseImage + "\nLABEL swetui.test.version=" + v + "\n")}), nil
			}}
	}
	// Start from v1 whatever an earlier run left.
	if _, err := Prepare(ctx, d, []ImageSource{src("1")}, nil); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		version              string
		present, built, fail int
	}{
		{"1", 1, 0, 0}, // there, labels match
		{"2", 0, 1, 0}, // there, stale: rebuilt
		{"2", 1, 0, 0},
	}
	for _, tc := range tests {
		rep, err := Prepare(ctx, d, []ImageSource{src(tc.version), {Name: "swetui/no-such-image:x", Remote: "127.0.0.1:1/none:x"}}, nil)
		if len(rep.Present) != tc.present || len(rep.Built) != tc.built {
			t.Errorf("v%s: present %v built %v", tc.version, rep.Present, rep.Built)
		}
		// The unpullable image fails alone and is named.
		if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1/none:x") {
			t.Errorf("v%s: err %v", tc.version, err)
		}
		if rep.Sizes[name] <= 0 {
			t.Errorf("sizes %v", rep.Sizes)
		}
	}
	if n, err := DiskUse(ctx, d); err != nil || n <= 0 {
		t.Errorf("disk use %d: %v", n, err)
	}
}
