package app

import (
	"context"
	"fmt"
	"strings"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/sandbox"
	"github.com/swetui/swetui/task"
)

// MineImage is the image `swetui mine` verifies a repository's candidates
// in: every candidate's base commit, built as `swetui prepare` builds a
// repository's image, under its own name so that it leaves the dataset's
// image alone.
func MineImage(repo string) string {
	return strings.Replace(task.RepoImageName(repo), "swetui-repo/", "swetui-mine/", 1)
}

// OpenMinePool builds repo's mining image (name's, from the clone at src)
// holding commits on the first Docker host of sandbox.hosts (hooks are
// told, as PrepareHosts tells them) and opens a pool on that host alone,
// whose messages go to events. The caller closes the pool with ClosePool.
func OpenMinePool(ctx context.Context, cfg config.Config, name, src string, commits []string, hooks PrepareHooks, events event.Publisher) (*sandbox.Pool, string, error) {
	host := sandbox.ParseHosts(cfg.Sandbox.Hosts).FirstDocker()
	d, err := sandbox.Connect(ctx, host)
	if err != nil {
		return nil, "", fmt.Errorf("mine: %w", err)
	}
	defer d.Close()
	base := cfg.Prepare.BaseImage
	if base == "" {
		base = sandbox.BaseImage
	}
	img := sandbox.RepoImage{Name: MineImage(name), Base: base, Source: src, Network: cfg.Prepare.Network, Commits: commits}
	if err := PrepareHost(ctx, d, []sandbox.ImageSource{img.ImageSource(ctx)}, nil, hooks); err != nil {
		return nil, "", fmt.Errorf("mine: %w", err)
	}
	opts := sandbox.FromConfig(cfg, "")
	opts.Hosts, opts.Events = []string{host}, events
	pool, err := sandbox.NewPool(ctx, opts)
	if err != nil {
		return nil, "", fmt.Errorf("mine: %w", err)
	}
	return pool, img.Name, nil
}
