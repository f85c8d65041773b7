package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
)

var (
	ownerOnce sync.Once
	owner     string
)

// OwnerID names this process for the owner label: hostname/pid/start, the
// start time telling a live process from a later one that reused its pid.
func OwnerID() string {
	ownerOnce.Do(func() {
		host, _ := os.Hostname()
		pid := os.Getpid()
		owner = fmt.Sprintf("%s/%d/%s", host, pid, procStart(pid))
	})
	return owner
}

// procStart is a process's start time in clock ticks since boot (field 22 of
// /proc/PID/stat), or "" when it cannot be read.
func procStart(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // the command name may hold spaces
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

// ownerAlive says whether the process named by an owner label may still be
// running. Owners on other machines cannot be checked: they count as alive
// (the deadline label retires their containers).
func ownerAlive(label string) bool {
	parts := strings.Split(label, "/")
	if len(parts) != 3 {
		return false
	}
	host, _ := os.Hostname()
	if parts[0] != host {
		return true
	}
	pid, err := strconv.Atoi(parts[1])
	if err != nil {
		return false
	}
	start := procStart(pid)
	return start != "" && start == parts[2]
}

// stale says whether a managed container belongs to no live evaluation: its
// owner process is gone or its deadline has passed.
func stale(c container.Summary, now time.Time) bool {
	return Stale(c.Labels, c.State == "running", now)
}

// Reap removes the managed containers on d that no live run owns (left by a
// run that crashed or was killed) and returns how many it removed. Live
// runs of other processes sharing the daemon are left alone.
func Reap(ctx context.Context, d Docker) (int, error) {
	return reap(ctx, d, filters.NewArgs(filters.Arg("label", LabelManaged+"=true")),
		func(c container.Summary) bool { return stale(c, time.Now()) })
}

func runFilter(runID string) filters.Args {
	return filters.NewArgs(filters.Arg("label", LabelManaged+"=true"), filters.Arg("label", LabelRun+"="+runID))
}

func reap(ctx context.Context, d Docker, f filters.Args, pick func(container.Summary) bool) (int, error) {
	list, err := d.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return 0, fmt.Errorf("list swetui containers on %s: %w", d.DaemonHost(), err)
	}
	n := 0
	var errs []error
	for _, c := range list {
		if !pick(c) {
			continue
		}
		err := d.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
		switch {
		case err == nil:
			n++
		case cerrdefs.IsNotFound(err), cerrdefs.IsConflict(err):
			// Gone already, or its removal is under way elsewhere.
		default:
			errs = append(errs, fmt.Errorf("remove container %s: %w", short(c.ID), err))
		}
	}
	return n, errors.Join(errs...)
}
