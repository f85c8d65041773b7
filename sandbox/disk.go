package sandbox

import (
	"bytes"
	"context"
	"path"
	"strconv"
	"strings"
	"time"
)

// WritableDirs are the folders of spec that stay writable on a read-only
// root, and that the disk bound measures.
func WritableDirs(spec Spec) []string {
	dirs := []string{path.Dir(ScriptPath)}
	if w := path.Clean(spec.Workdir); spec.Workdir != "" && w != "/" && w != path.Dir(ScriptPath) {
		dirs = append(dirs, w)
	}
	return dirs
}

// TmpMB is the size of the sandbox's /tmp in MiB.
func TmpMB(l Limits) int {
	if l.TmpMB > 0 {
		return l.TmpMB
	}
	return 256
}

// diskBaseOf returns what the writable folders of spec's image hold
// before any step writes, measured in this container (not yet written to)
// the first time an image is seen and remembered: measured concurrently
// with the steps, a busy host let fast writes into the base and the bound
// was never passed. known is false when the measure failed.
func (dr *Driver) diskBaseOf(p Procs, spec Spec) (kb int64, known bool) {
	key := spec.Image + "\x00" + strings.Join(WritableDirs(spec), "\x00")
	if v, ok := dr.diskBase.Load(key); ok {
		return v.(int64), true
	}
	if kb, known = diskUsage(p, spec); known {
		dr.diskBase.Store(key, kb)
	}
	return kb, known
}

// diskUsage is du of the sandbox's writable folders, run by its engine in
// the sandbox, in KiB.
func diskUsage(p Procs, spec Spec) (int64, bool) {
	var buf bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), DiskEvery+5*time.Second)
	defer cancel()
	cmd := append([]string{"du", "-skxc", "--"}, WritableDirs(spec)...)
	if _, err := p.Exec(ctx, cmd, spec.User, &limitedBuffer{b: &buf, max: 1 << 16}); err != nil {
		return 0, false
	}
	return duTotal(buf.String()), true
}

// watchDisk measures the container's writable folders every DiskEvery
// until done and closes over when they have grown by more than
// Limits.DiskMB over base (the repository the image holds is no write of
// the evaluation's; without a known base the first measure is taken as
// it). Errors (a container that is going) only skip a round.
func (dr *Driver) watchDisk(p Procs, spec Spec, base int64, haveBase bool, done <-chan struct{}, over chan<- struct{}) {
	t := time.NewTicker(DiskEvery)
	defer t.Stop()
	limit := int64(dr.Limits.DiskMB) << 10 // KiB
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		kb, ok := diskUsage(p, spec)
		switch {
		case !ok:
		case !haveBase:
			base, haveBase = kb, true
		case kb-base > limit:
			close(over)
			return
		}
	}
}

// duTotal reads the "total" line of du -c.
func duTotal(out string) int64 {
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[1] == "total" {
			n, _ := strconv.ParseInt(f[0], 10, 64)
			return n
		}
	}
	return 0
}
