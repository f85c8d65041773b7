package sandbox

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/image"
)

// BaseImage is the local base every sandbox image builds FROM on machines
// without a registry; .ci/base-image.sh makes it.
const BaseImage = "swetui/base:bookworm"

// InstanceImage is the official SWE-bench evaluation image of an instance.
func InstanceImage(instanceID string) string { return "sweb.eval.x86_64." + instanceID }

// RemoteImage is the registry reference of an image: for an official
// SWE-bench instance image, its Docker Hub name
// (swebench/sweb.eval.x86_64.<id with "__" as "_1776_">:latest); any other
// name is its own reference.
func RemoteImage(name string) string {
	const prefix = "sweb.eval.x86_64."
	if !strings.HasPrefix(name, prefix) {
		return name
	}
	repo, tag := splitTag(name)
	return "swebench/" + prefix + strings.ReplaceAll(strings.TrimPrefix(repo, prefix), "__", "_1776_") + ":" + tag
}

// splitTag splits name:tag, the tag defaulting to latest.
func splitTag(name string) (repo, tag string) {
	if i := strings.LastIndexByte(name, ':'); i > strings.LastIndexByte(name, '/') {
		return name[:i], name[i+1:]
	}
	return name, "latest"
}

// normalize adds the default tag.
func normalize(name string) string {
	repo, tag := splitTag(name)
	return repo + ":" + tag
}

// ImageSource says how to get one image when it is missing.
type ImageSource struct {
	Name string // local name[:tag]
	// Context returns a tar stream holding a Dockerfile build context; nil
	// means pull Remote instead.
	Context    func() (io.ReadCloser, error)
	Dockerfile string // path of the Dockerfile in the context ("" = Dockerfile)
	Remote     string // reference to pull ("" = RemoteImage(Name))
	// Labels the image must carry to count as present: an image built from
	// an older context (a different digest label) is built again.
	Labels map[string]string
}

// Progress is one update from Build, Pull or Prepare.
type Progress struct {
	Image      string
	Phase      string // present, build, pull, done, failed
	Line       string // one line of build output or pull status
	Layers     int    // pull: layers seen
	LayersDone int    // pull: layers downloaded and extracted (or present)
	Current    int64  // pull: bytes downloaded over all layers
	Total      int64  // pull: bytes to download over the layers whose size is known
}

// Images lists the images on d by name:tag.
func Images(ctx context.Context, d Docker) (map[string]image.Summary, error) {
	list, err := d.ImageList(ctx, image.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list images on %s: %w", d.DaemonHost(), err)
	}
	have := map[string]image.Summary{}
	for _, im := range list {
		for _, t := range im.RepoTags {
			have[t] = im
		}
	}
	return have, nil
}

// Missing returns the names (deduplicated, in order) that are not on d.
func Missing(ctx context.Context, d Docker, names []string) ([]string, error) {
	have, err := Images(ctx, d)
	if err != nil {
		return nil, err
	}
	var missing []string
	seen := map[string]bool{}
	for _, n := range names {
		if _, ok := have[normalize(n)]; !ok && !seen[n] {
			missing = append(missing, n)
		}
		seen[n] = true
	}
	return missing, nil
}

// current says whether the image is there with the labels s wants.
func (s ImageSource) current(have map[string]image.Summary) bool {
	im, ok := have[normalize(s.Name)]
	if !ok {
		return false
	}
	for k, v := range s.Labels {
		if im.Labels[k] != v {
			return false
		}
	}
	return true
}

// streamMessage is one JSON message of a build or pull stream.
type streamMessage struct {
	Stream         string `json:"stream"`
	Status         string `json:"status"`
	ID             string `json:"id"`
	Error          string `json:"error"`
	ProgressDetail struct {
		Current int64 `json:"current"`
		Total   int64 `json:"total"`
	} `json:"progressDetail"`
	ErrorDetail struct {
		Message string `json:"message"`
	} `json:"errorDetail"`
}

// Build builds image name from a tar build context, streaming its output
// lines to progress (which may be nil).
func Build(ctx context.Context, d Docker, name string, buildContext io.Reader, dockerfile string, progress func(Progress)) error {
	if progress == nil {
		progress = func(Progress) {}
	}
	resp, err := d.ImageBuild(ctx, buildContext, build.ImageBuildOptions{
		Tags:        []string{name},
		Dockerfile:  dockerfile,
		Remove:      true,
		ForceRemove: true,
		NetworkMode: "none", // no registry, no network: builds are local
		Version:     build.BuilderV1,
	})
	if err != nil {
		return fmt.Errorf("build image %s on %s: %w", name, d.DaemonHost(), err)
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	var tail []string // last lines, for the error
	for {
		var m streamMessage
		if err := dec.Decode(&m); err == io.EOF {
			return nil
		} else if err != nil {
			return fmt.Errorf("build image %s: read build output: %w", name, err)
		}
		if m.Error != "" {
			return fmt.Errorf("build image %s: %s\n%s", name, m.Error, strings.Join(tail, "\n"))
		}
		for _, line := range strings.Split(strings.TrimRight(m.Stream+m.Status, "\n"), "\n") {
			if line == "" {
				continue
			}
			tail = append(tail, line)
			if len(tail) > 10 {
				tail = tail[1:]
			}
			progress(Progress{Image: name, Phase: "build", Line: line})
		}
	}
}

// Pull pulls remote and tags it as name, reporting per-layer progress
// aggregated over the layers.
func Pull(ctx context.Context, d Docker, remote, name string, progress func(Progress)) error {
	if progress == nil {
		progress = func(Progress) {}
	}
	rc, err := d.ImagePull(ctx, remote, image.PullOptions{})
	if err != nil {
		return pullError(remote, name, err)
	}
	defer rc.Close()
	type layer struct {
		current, total int64
		done           bool
	}
	layers := map[string]*layer{}
	var order []string
	dec := json.NewDecoder(rc)
	last := time.Time{}
	for {
		var m streamMessage
		if err := dec.Decode(&m); err == io.EOF {
			break
		} else if err != nil {
			return pullError(remote, name, fmt.Errorf("read pull output: %w", err))
		}
		if m.Error != "" {
			return pullError(remote, name, errors.New(m.Error))
		}
		p := Progress{Image: name, Phase: "pull", Line: strings.TrimSpace(m.ID + " " + m.Status)}
		if m.ID != "" && m.Status != "" && !strings.HasPrefix(m.Status, "Pulling from") {
			l := layers[m.ID]
			if l == nil {
				l = &layer{}
				layers[m.ID] = l
				order = append(order, m.ID)
			}
			switch m.Status {
			case "Downloading":
				l.current, l.total = m.ProgressDetail.Current, m.ProgressDetail.Total
			case "Download complete", "Verifying Checksum":
				l.current = l.total
			case "Pull complete", "Already exists":
				l.current, l.done = l.total, true
			}
		}
		for _, id := range order {
			l := layers[id]
			p.Layers++
			p.Current += l.current
			p.Total += l.total
			if l.done {
				p.LayersDone++
			}
		}
		// Downloading messages come many a second; status changes always pass.
		if m.Status != "Downloading" || time.Since(last) > 100*time.Millisecond {
			last = time.Now()
			progress(p)
		}
	}
	if remote != name {
		if err := d.ImageTag(ctx, remote, name); err != nil {
			return fmt.Errorf("tag %s as %s: %w", remote, name, err)
		}
	}
	return nil
}

func pullError(remote, name string, err error) error {
	return fmt.Errorf("pull image %s (for %s): %w; without a registry, build it locally from a Dockerfile "+
		"(swetui prepare does for the embedded suite) or load it with `docker load`", remote, name, err)
}

// PrepareReport says what Prepare did.
type PrepareReport struct {
	Present []string         // already there
	Built   []string         // built from a context
	Pulled  []string         // pulled from a registry
	Sizes   map[string]int64 // bytes of each source image afterwards (shared layers in each)
}

// Prepare makes every image of sources present on d, building those with a
// context and pulling the others. It goes on after a failure and returns
// every failure at the end.
func Prepare(ctx context.Context, d Docker, sources []ImageSource, progress func(Progress)) (PrepareReport, error) {
	if progress == nil {
		progress = func(Progress) {}
	}
	var rep PrepareReport
	names := make([]string, len(sources))
	for i, s := range sources {
		names[i] = s.Name
	}
	have, err := Images(ctx, d)
	if err != nil {
		return rep, err
	}
	var errs []error
	done := map[string]bool{}
	for _, s := range sources {
		if done[s.Name] {
			continue
		}
		done[s.Name] = true
		if s.current(have) {
			rep.Present = append(rep.Present, s.Name)
			progress(Progress{Image: s.Name, Phase: "present"})
			continue
		}
		var err error
		if s.Context != nil {
			err = buildSource(ctx, d, s, progress)
			if err == nil {
				rep.Built = append(rep.Built, s.Name)
			}
		} else {
			remote := s.Remote
			if remote == "" {
				remote = RemoteImage(s.Name)
			}
			err = Pull(ctx, d, remote, s.Name, progress)
			if err == nil {
				rep.Pulled = append(rep.Pulled, s.Name)
			}
		}
		if err != nil {
			errs = append(errs, err)
			progress(Progress{Image: s.Name, Phase: "failed", Line: err.Error()})
			if ctx.Err() != nil {
				break
			}
			continue
		}
		progress(Progress{Image: s.Name, Phase: "done"})
	}
	if have, err := Images(ctx, d); err == nil {
		rep.Sizes = map[string]int64{}
		for _, n := range names {
			if im, ok := have[normalize(n)]; ok {
				rep.Sizes[n] = im.Size
			}
		}
	}
	return rep, errors.Join(errs...)
}

// DiskUse is the bytes all image layers on d take, shared layers once. It
// asks the daemon for its disk use, which takes seconds on some storage
// drivers (fuse-overlayfs).
func DiskUse(ctx context.Context, d Docker) (int64, error) {
	du, err := d.DiskUsage(ctx, types.DiskUsageOptions{Types: []types.DiskUsageObject{types.ImageObject}})
	if err != nil {
		return 0, fmt.Errorf("disk use on %s: %w", d.DaemonHost(), err)
	}
	return du.LayersSize, nil
}

func buildSource(ctx context.Context, d Docker, s ImageSource, progress func(Progress)) error {
	rc, err := s.Context()
	if err != nil {
		return fmt.Errorf("build context of %s: %w", s.Name, err)
	}
	defer rc.Close()
	return Build(ctx, d, s.Name, rc, s.Dockerfile, progress)
}

// TarContext packs files (paths relative to the context root) into a tar
// build context; names ending in .sh are executable.
func TarContext(files map[string][]byte) io.ReadCloser {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		mode := int64(0o644)
		if strings.HasSuffix(n, ".sh") {
			mode = 0o755
		}
		// Writes to a bytes.Buffer cannot fail.
		_ = tw.WriteHeader(&tar.Header{Name: n, Mode: mode, Size: int64(len(files[n])), Typeflag: tar.TypeReg})
		_, _ = tw.Write(files[n])
	}
	_ = tw.Close()
	return io.NopCloser(&buf)
}
