package sandbox

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/pkg/stdcopy"
)

// Runner runs evaluations on one Docker host: the Backend of a Docker
// endpoint.
type Runner struct {
	Docker   Docker
	Endpoint string // for messages and Result.Host
	RunID    string
	Limits   Limits
	// noStorageOpt remembers that the host's storage driver has no size
	// option.
	noStorageOpt atomic.Bool
	drvOnce      sync.Once
	drv          Driver
}

// apiTimeout bounds the calls that should be quick (create, copy, attach,
// start), so a wedged daemon becomes an infrastructure failure, not a hang.
var apiTimeout = 2 * time.Minute

// removeTimeout bounds cleanup calls, which run on their own context so that
// a cancelled caller still gets its container removed.
const removeTimeout = 30 * time.Second

// Run runs spec to completion, timeout or cancellation and removes the
// container on every path. onLog, if not nil, receives the kept output as it
// arrives (from one goroutine at a time).
func (r *Runner) Run(ctx context.Context, spec Spec, onLog func([]byte)) Result {
	return r.run(ctx, spec, onLog, runHooks{})
}

func (r *Runner) run(ctx context.Context, spec Spec, onLog func([]byte), hooks runHooks) Result {
	start := time.Now()
	res := Result{ID: spec.ID, InstanceID: spec.InstanceID, Host: r.Name(), ExitCode: -1, Attempts: 1}
	id, err := r.Create(ctx, spec, &res.Durations)
	res = finish(ctx, r, func(id string) time.Duration { return removeNow(r, id) }, spec, id, err, res, onLog, hooks)
	res.Durations.Total = time.Since(start)
	return res
}

// runHooks let the pool follow an evaluation.
type runHooks struct {
	created func(containerID string)
}

// Name is the endpoint.
func (r *Runner) Name() string { return r.endpoint() }

// Ping checks that the daemon answers.
func (r *Runner) Ping(ctx context.Context) error {
	if _, err := r.Docker.Ping(ctx); err != nil {
		return unreachable(r.Endpoint, r.Docker.DaemonHost(), err)
	}
	return nil
}

// Remove force-removes container id with its volumes; one already gone is
// removed.
func (r *Runner) Remove(ctx context.Context, id string) error {
	err := r.Docker.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return err
	}
	return nil
}

// Reap removes the managed containers sel selects.
func (r *Runner) Reap(ctx context.Context, sel Reaping) (int, error) {
	if sel.RunID == "" {
		return Reap(ctx, r.Docker)
	}
	return reap(ctx, r.Docker, runFilter(sel.RunID), func(c container.Summary) bool {
		return sel.Keep == nil || !sel.Keep(c.ID)
	})
}

// Close closes the client.
func (r *Runner) Close() error { return r.Docker.Close() }

func (r *Runner) driver() *Driver {
	r.drvOnce.Do(func() { r.drv.Limits = r.Limits })
	return &r.drv
}

// Create makes the container and copies the script and files in. On error
// it returns the container's id if one was made, for removal.
//
// The container's own process is an init (PID 1) and a sleep that outlasts
// the evaluation; the script and the tests run as processes that the
// daemon starts in it (see execute). It has no network, no capabilities but
// Limits.CapAdd, no new privileges, and unless the root filesystem must stay
// writable, a read-only root with the workdir (a volume the daemon fills
// from the image), /swetui and a size-limited /tmp writable.
func (r *Runner) Create(ctx context.Context, spec Spec, d *Durations) (string, error) {
	if err := CheckSpec(spec); err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("create container for %s: %w", spec.ID, err)
	}
	t0 := time.Now()
	deadline := DeadlineOf(spec, time.Now())
	caller := ctx
	ctx, cancel := UntilLost(ctx, apiTimeout)
	defer cancel()
	cfg := &container.Config{
		Image: spec.Image,
		// Idle until the evaluation's processes are done; it ends by itself
		// by the deadline should the removal never come.
		Entrypoint:      []string{"sleep"},
		Cmd:             []string{strconv.Itoa(int(time.Until(deadline).Seconds()) + 1)},
		WorkingDir:      spec.Workdir,
		Env:             spec.Env,
		User:            spec.User,
		NetworkDisabled: true,
		Labels: map[string]string{
			LabelManaged:  "true",
			LabelRun:      r.RunID,
			LabelOwner:    OwnerID(),
			LabelEval:     spec.ID,
			LabelDeadline: strconv.FormatInt(deadline.Unix(), 10),
		},
	}
	host := r.hostConfig(spec)
	created, err := r.Docker.ContainerCreate(ctx, cfg, host, nil, nil, "")
	if err != nil && host.StorageOpt != nil && strings.Contains(err.Error(), "storage-opt") {
		// The storage driver has no size option (overlay2 off xfs with
		// pquota, fuse-overlayfs, ...): measuring the writable folders is
		// what is left.
		r.noStorageOpt.Store(true)
		host.StorageOpt = nil
		created, err = r.Docker.ContainerCreate(ctx, cfg, host, nil, nil, "")
	}
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return "", fmt.Errorf("create container: %w: %s is not on %s; build or pull it with `swetui prepare` (%v)",
				ErrImageMissing, spec.Image, r.endpoint(), err)
		}
		return "", fmt.Errorf("create container from %s on %s: %w", spec.Image, r.endpoint(), err)
	}
	if err := caller.Err(); err != nil {
		return created.ID, fmt.Errorf("create container from %s on %s: %w", spec.Image, r.endpoint(), err)
	}
	files := SandboxFiles(spec)
	// The daemon copies into a read-only root only through its volumes.
	roots := []string{"/"}
	if host.ReadonlyRootfs {
		roots = WritableDirs(spec)
	}
	for _, root := range roots {
		archive, err := TarFiles(files, root)
		if err != nil {
			return created.ID, fmt.Errorf("evaluation %s: %w: %v", spec.ID, ErrBadSpec, err)
		}
		if archive == nil {
			continue
		}
		if err := r.Docker.CopyToContainer(ctx, created.ID, root, bytes.NewReader(archive), container.CopyToContainerOptions{}); err != nil {
			return created.ID, fmt.Errorf("copy files into container %s: %w", short(created.ID), err)
		}
	}
	if len(files) > 0 {
		var left []string
		for p := range files {
			left = append(left, p)
		}
		sort.Strings(left)
		return created.ID, fmt.Errorf("evaluation %s: %w: %s outside the writable folders %v of a read-only root",
			spec.ID, ErrBadSpec, strings.Join(left, ", "), roots)
	}
	d.Create = time.Since(t0)
	return created.ID, nil
}

// hostConfig is the confinement of spec's container.
func (r *Runner) hostConfig(spec Spec) *container.HostConfig {
	l := r.Limits
	init := true
	host := &container.HostConfig{
		NetworkMode: "none",
		// Output goes to the exec streams only: a flood must not fill the
		// host's disk through the json-file log.
		LogConfig:      container.LogConfig{Type: "none"},
		SecurityOpt:    []string{"no-new-privileges"},
		CapDrop:        []string{"ALL"},
		CapAdd:         append([]string(nil), l.CapAdd...),
		Init:           &init,
		ReadonlyRootfs: !l.WritableRoot && !spec.WritableRoot,
		Tmpfs:          map[string]string{"/tmp": fmt.Sprintf("rw,nosuid,nodev,size=%dm,mode=1777", TmpMB(l))},
		Resources: container.Resources{
			Memory:     int64(l.MemoryMB) << 20,
			MemorySwap: int64(l.MemoryMB) << 20, // no swap on top
			NanoCPUs:   int64(l.CPUs * 1e9),
		},
	}
	if l.PidsLimit > 0 {
		pids := int64(l.PidsLimit)
		host.Resources.PidsLimit = &pids
	}
	if l.MemoryMB <= 0 {
		host.Resources.Memory, host.Resources.MemorySwap = 0, 0
	}
	if l.DiskMB > 0 {
		n := int64(l.DiskMB) << 20
		host.Resources.Ulimits = []*container.Ulimit{{Name: "fsize", Soft: n, Hard: n}}
		if !host.ReadonlyRootfs && !r.noStorageOpt.Load() {
			host.StorageOpt = map[string]string{"size": strconv.Itoa(l.DiskMB) + "M"}
		}
	}
	if host.ReadonlyRootfs {
		// Anonymous volumes: the daemon copies the image's content at the
		// path into them, and they go with the container (RemoveVolumes).
		for _, p := range WritableDirs(spec) {
			host.Mounts = append(host.Mounts, mount.Mount{Type: mount.TypeVolume, Target: p})
		}
	}
	return host
}

const killedStatus = 137 // a process killed by SIGKILL, as the shell reports it

// Execute starts the container and drives the evaluation's processes in it
// (Driver): the script, then, for an eval, the tests, the host writing the
// protocol lines around them. The container is killed at the deadline, on
// cancellation, when the output passes the cap or the disk bound is passed.
func (r *Runner) Execute(ctx context.Context, id string, spec Spec, onLog func([]byte), res *Result) {
	t0 := time.Now()
	apiCtx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	if err := r.Docker.ContainerStart(apiCtx, id, container.StartOptions{}); err != nil {
		RecordFailure(ctx, res, fmt.Errorf("start container %s: %w", short(id), err))
		return
	}
	res.Durations.Start = time.Since(t0)
	r.driver().Drive(ctx, spec, dockerProcs{r: r, id: id}, onLog, res)
}

// dockerProcs are one container's processes, as the Driver runs them.
type dockerProcs struct {
	r  *Runner
	id string
}

func (p dockerProcs) Exec(ctx context.Context, cmd []string, user string, out io.Writer) (int, error) {
	return p.r.step(ctx, p.id, Spec{User: user}, cmd, out)
}

// ExecCommand implements CommandProcs: a session's command, its stderr
// (the wrapper's trailer) apart.
func (p dockerProcs) ExecCommand(ctx context.Context, cmd []string, user string, out io.Writer, t *Trailer) (int, error) {
	return p.r.stepStreams(ctx, p.id, Spec{User: user}, cmd, out, t)
}

// Kill kills the container; one that has gone meanwhile is no error.
func (p dockerProcs) Kill(ctx context.Context) error {
	if err := p.r.Docker.ContainerKill(ctx, p.id, "KILL"); err != nil && !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) {
		return fmt.Errorf("kill container %s: %w", short(p.id), err)
	}
	return nil
}

// UntilLost bounds a call that outlives the caller's cancellation but not
// the loss of its host, over which it would wait for the whole bound: a
// kill and the status read after it, and a create, which returns the id of
// what it made for removal (a daemon finishes a create whose client left,
// leaving a sandbox no one knows of; a lost host's are the reaper's).
func UntilLost(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), d)
	stop := context.AfterFunc(ctx, func() {
		if hostLost(ctx) != nil {
			cancel()
		}
	})
	return c, func() { stop(); cancel() }
}

// step runs cmd in the container as a process the daemon starts, copies its
// output to out and returns its exit status, as the daemon saw it. It ends
// when the process does (or the container is killed); output that processes
// it left behind still write gets a moment, then the stream is closed.
func (r *Runner) step(ctx context.Context, id string, spec Spec, cmd []string, out io.Writer) (int, error) {
	return r.stepStreams(ctx, id, spec, cmd, out, out)
}

// stepStreams is step with stdout and stderr apart.
func (r *Runner) stepStreams(ctx context.Context, id string, spec Spec, cmd []string, out, errOut io.Writer) (int, error) {
	apiCtx, cancel := UntilLost(ctx, apiTimeout)
	defer cancel()
	// Each status call gets its own bound: the process may run far longer.
	inspect := func(id string) (container.ExecInspect, error) {
		ictx, cancel := UntilLost(ctx, apiTimeout)
		defer cancel()
		return r.Docker.ContainerExecInspect(ictx, id)
	}
	ex, err := r.Docker.ContainerExecCreate(apiCtx, id, container.ExecOptions{
		Cmd: cmd, User: spec.User, WorkingDir: spec.Workdir, AttachStdout: true, AttachStderr: true,
	})
	if err != nil {
		return -1, fmt.Errorf("start %s in container %s on %s: %w", cmd[0], short(id), r.endpoint(), err)
	}
	att, err := r.Docker.ContainerExecAttach(apiCtx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		return -1, fmt.Errorf("attach to %s in container %s on %s: %w", cmd[0], short(id), r.endpoint(), err)
	}
	defer att.Close()
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		defer func() {
			if v := recover(); v != nil {
				if w, ok := out.(*capWriter); ok {
					w.setPanic(v)
				}
			}
		}()
		_, _ = stdcopy.StdCopy(out, errOut, att.Reader)
	}()
	poll := time.NewTicker(200 * time.Millisecond)
	defer poll.Stop()
	var exitedAt time.Time
	doneC := ctx.Done()
	for {
		select {
		case <-doneC:
			// A lost host sends nothing more: stop reading it. Otherwise the
			// watcher's kill ends the process, and with it the stream.
			if lost := hostLost(ctx); lost != nil {
				att.Close()
				<-copied
				return -1, lost
			}
			doneC = nil
		case <-copied:
			// The stream ends as the process does; the daemon may take a
			// moment more to record its status.
			for i := 0; ; i++ {
				st, err := inspect(ex.ID)
				if err != nil {
					return -1, fmt.Errorf("status of %s in container %s on %s: %w", cmd[0], short(id), r.endpoint(), err)
				}
				if !st.Running || i == 200 {
					return st.ExitCode, nil
				}
				time.Sleep(10 * time.Millisecond)
			}
		case <-poll.C:
			st, err := inspect(ex.ID)
			if err != nil {
				att.Close()
				<-copied
				return -1, fmt.Errorf("status of %s in container %s on %s: %w", cmd[0], short(id), r.endpoint(), err)
			}
			if st.Running {
				continue
			}
			if exitedAt.IsZero() {
				exitedAt = time.Now()
			} else if time.Since(exitedAt) > time.Second {
				// A child it left holds the stream open: what it writes now
				// is not the process's output.
				att.Close()
				<-copied
				return st.ExitCode, nil
			}
		}
	}
}

func (r *Runner) endpoint() string {
	if r.Endpoint != "" {
		return r.Endpoint
	}
	return r.Docker.DaemonHost()
}

// TarFiles packs the files (absolute paths) that lie under root into a tar
// archive rooted there, and takes them out of files; nil when none does.
// Parent folders are created by the unpacker; scripts get mode 0755.
func TarFiles(files map[string][]byte, root string) ([]byte, error) {
	var names []string
	for p := range files {
		if !path.IsAbs(p) || path.Clean(p) != p || p == "/" {
			return nil, fmt.Errorf("file path %q must be absolute and clean", p)
		}
		if root == "/" || strings.HasPrefix(p, root+"/") {
			names = append(names, p)
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Now()
	for _, p := range names {
		mode := int64(0o644)
		if strings.HasSuffix(p, ".sh") {
			mode = 0o755
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(p, root), "/")
		hdr := &tar.Header{Name: rel, Mode: mode, Size: int64(len(files[p])), ModTime: now, Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("tar %s: %w", p, err)
		}
		if _, err := tw.Write(files[p]); err != nil {
			return nil, fmt.Errorf("tar %s: %w", p, err)
		}
		delete(files, p)
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("tar: %w", err)
	}
	return buf.Bytes(), nil
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
