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
	// Network is the build's network mode ("" = none: builds are local).
	Network string
	// PullFirst tries Remote (a registry's copy) before building from
	// Context; Push, when set, is the reference a built image is pushed to.
	PullFirst bool
	Push      string
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
	return buildImage(ctx, d, name, buildContext, dockerfile, "none", progress)
}

func buildImage(ctx context.Context, d Docker, name string, buildContext io.Reader, dockerfile, network string, progress func(Progress)) error {
	if progress == nil {
		progress = func(Progress) {}
	}
	resp, err := d.ImageBuild(ctx, buildContext, build.ImageBuildOptions{
		Tags:        []string{name},
		Dockerfile:  dockerfile,
		Remove:      true,
		ForceRemove: true,
		NetworkMode: network, // "none" unless install commands must download
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
// aggregated over the layers. Credentials for remote's registry come from
// the Docker config (DOCKER_CONFIG or ~/.docker/config.json), as the docker
// CLI reads them.
func Pull(ctx context.Context, d Docker, remote, name string, progress func(Progress)) error {
	if progress == nil {
		progress = func(Progress) {}
	}
	auth, err := RegistryAuth(remote)
	if err != nil {
		return pullError(remote, name, err)
	}
	rc, err := d.ImagePull(ctx, remote, image.PullOptions{RegistryAuth: auth})
	if err != nil {
		return pullError(remote, name, err)
	}
	defer rc.Close()
	if err := followLayers(rc, name, "pull", progress); err != nil {
		return pullError(remote, name, err)
	}
	if remote != name {
		if err := d.ImageTag(ctx, remote, name); err != nil {
			return fmt.Errorf("tag %s as %s: %w", remote, name, err)
		}
	}
	return nil
}

// followLayers reads a pull or push stream to its end, reporting progress
// summed over its layers, and returns the error the stream ends with.
func followLayers(r io.Reader, name, phase string, progress func(Progress)) error {
	type layer struct {
		current, total int64
		done           bool
	}
	layers := map[string]*layer{}
	var order []string
	dec := json.NewDecoder(r)
	last := time.Time{}
	for {
		var m streamMessage
		if err := dec.Decode(&m); err == io.EOF {
			return nil
		} else if err != nil {
			return fmt.Errorf("read %s output: %w", phase, err)
		}
		if m.Error != "" {
			return errors.New(m.Error)
		}
		p := Progress{Image: name, Phase: phase, Line: strings.TrimSpace(m.ID + " " + m.Status)}
		if m.ID != "" && m.Status != "" && !strings.HasPrefix(m.Status, "Pulling from") && !strings.HasPrefix(m.Status, "The push refers to") {
			l := layers[m.ID]
			if l == nil {
				l = &layer{}
				layers[m.ID] = l
				order = append(order, m.ID)
			}
			switch {
			case m.Status == "Downloading" || m.Status == "Pushing":
				l.current, l.total = m.ProgressDetail.Current, m.ProgressDetail.Total
			case m.Status == "Download complete" || m.Status == "Verifying Checksum":
				l.current = l.total
			case m.Status == "Pull complete" || m.Status == "Already exists" || m.Status == "Pushed" ||
				m.Status == "Layer already exists" || strings.HasPrefix(m.Status, "Mounted from"):
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
		// Byte counts come many a second; status changes always pass.
		if (m.Status != "Downloading" && m.Status != "Pushing") || time.Since(last) > 100*time.Millisecond {
			last = time.Now()
			progress(p)
		}
	}
}

func pullError(remote, name string, err error) error {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "manifest unknown") || strings.Contains(msg, "not found") || strings.Contains(msg, "does not exist"):
		return fmt.Errorf("pull image %s (for %s): %w; the registry does not have it: build it (swetui prepare builds "+
			"images for instances that name none) or push it there", remote, name, err)
	case strings.Contains(msg, "unauthorized") || strings.Contains(msg, "no basic auth credentials") || strings.Contains(msg, "authentication required"):
		return fmt.Errorf("pull image %s (for %s): %w; log in to %s (`docker login %s`): swetui reads the credentials "+
			"from the Docker config ($DOCKER_CONFIG or ~/.docker/config.json)", remote, name, err, registryHost(remote), registryHost(remote))
	}
	return fmt.Errorf("pull image %s (for %s): %w; without a registry, build it locally from a Dockerfile "+
		"(swetui prepare does for the embedded suite and for instances that name no image) or load it with `docker load`", remote, name, err)
}

// PrepareReport says what Prepare did.
type PrepareReport struct {
	Present  []string         // already there
	Built    []string         // built from a context
	Pulled   []string         // pulled from a registry
	Streamed []string         // copied from a peer host
	Pushed   []string         // pushed to a registry after the build
	Sizes    map[string]int64 // bytes of each source image afterwards (shared layers in each)
}

// PrepareOptions tune Prepare.
type PrepareOptions struct {
	Progress func(Progress)
	// Peers are hosts prepared before this one: a missing image that one of
	// them has (with the labels wanted) is streamed from it rather than
	// built or pulled again.
	Peers []Docker
}

// Prepare makes every image of sources present on d, building those with a
// context and pulling the others. It goes on after a failure and returns
// every failure at the end.
func Prepare(ctx context.Context, d Docker, sources []ImageSource, progress func(Progress)) (PrepareReport, error) {
	return PrepareWith(ctx, d, sources, PrepareOptions{Progress: progress})
}

// PrepareWith is Prepare with options. A missing image is, in order: pulled
// from its registry copy (PullFirst), streamed from the first peer that
// has it, built from its context (then pushed when Push is set), or pulled.
func PrepareWith(ctx context.Context, d Docker, sources []ImageSource, opts PrepareOptions) (PrepareReport, error) {
	progress := opts.Progress
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
	peerImages := make([]map[string]image.Summary, len(opts.Peers))
	for i, p := range opts.Peers {
		if peerImages[i], err = Images(ctx, p); err != nil {
			return rep, err
		}
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
		err := prepareOne(ctx, d, s, opts.Peers, peerImages, &rep, progress)
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

// prepareOne gets one missing image onto d.
func prepareOne(ctx context.Context, d Docker, s ImageSource, peers []Docker, peerImages []map[string]image.Summary,
	rep *PrepareReport, progress func(Progress)) error {
	remote := s.Remote
	if remote == "" {
		remote = RemoteImage(s.Name)
	}
	var pullErr error
	if s.PullFirst && s.Context != nil {
		if pullErr = Pull(ctx, d, remote, s.Name, progress); pullErr == nil && s.currentOn(ctx, d) {
			rep.Pulled = append(rep.Pulled, s.Name)
			return nil
		}
		if pullErr == nil {
			pullErr = fmt.Errorf("the registry's %s is of other contents: building it again", remote)
		}
		progress(Progress{Image: s.Name, Phase: "pull", Line: "not in the registry: " + pullErr.Error()})
	}
	for i, p := range peers {
		if !s.current(peerImages[i]) {
			continue
		}
		if err := Stream(ctx, p, d, s.Name, progress); err != nil {
			return err
		}
		rep.Streamed = append(rep.Streamed, s.Name)
		return nil
	}
	if s.Context == nil {
		if err := Pull(ctx, d, remote, s.Name, progress); err != nil {
			return err
		}
		rep.Pulled = append(rep.Pulled, s.Name)
		return nil
	}
	if err := buildSource(ctx, d, s, progress); err != nil {
		return err
	}
	rep.Built = append(rep.Built, s.Name)
	if s.Push == "" {
		return nil
	}
	if err := Push(ctx, d, s.Name, s.Push, progress); err != nil {
		return err
	}
	rep.Pushed = append(rep.Pushed, s.Push)
	return nil
}

// currentOn says whether d has the image with the labels s wants.
func (s ImageSource) currentOn(ctx context.Context, d Docker) bool {
	have, err := Images(ctx, d)
	return err == nil && s.current(have)
}

// DiskUse is the bytes all image layers on d take, shared layers once. It
// asks the daemon for its disk use, which takes seconds on some storage
// drivers (fuse-overlayfs).
func DiskUse(ctx context.Context, d Docker) (int64, error) {
	// The daemon runs one disk-use operation at a time and refuses a second
	// (other processes ask too): wait for the one under way.
	for wait := 100 * time.Millisecond; ; wait *= 2 {
		du, err := d.DiskUsage(ctx, types.DiskUsageOptions{Types: []types.DiskUsageObject{types.ImageObject}})
		if err == nil {
			return du.LayersSize, nil
		}
		if !strings.Contains(err.Error(), "already running") || wait > 10*time.Second {
			return 0, fmt.Errorf("disk use on %s: %w", d.DaemonHost(), err)
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return 0, fmt.Errorf("disk use on %s: %w", d.DaemonHost(), ctx.Err())
		}
	}
}

func buildSource(ctx context.Context, d Docker, s ImageSource, progress func(Progress)) error {
	rc, err := s.Context()
	if err != nil {
		return fmt.Errorf("build context of %s: %w", s.Name, err)
	}
	defer rc.Close()
	network := s.Network
	if network == "" {
		network = "none"
	}
	return buildImage(ctx, d, s.Name, rc, s.Dockerfile, network, progress)
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
