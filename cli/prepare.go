package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/sandbox"
	"github.com/swetui/swetui/task"
)

// prepareOptions are `swetui prepare`'s inputs: the config, whose
// data.source is the dataset (--dataset).
type prepareOptions struct{ Config config.Config }

func newPrepareOptions(env Env, args []string) (prepareOptions, error) {
	fs := newFlags(env, "prepare")
	load := configFlag(fs, env)
	dataset := fs.String("dataset", "", "dataset file (.jsonl, .json, .parquet) or mini (default: data.source)")
	cfg, _, err := parseAndLoad(fs, load, args)
	if err != nil {
		return prepareOptions{}, err
	}
	if *dataset != "" {
		cfg.Data.Source = *dataset
	}
	return prepareOptions{cfg}, nil
}

// prepareRun implements `swetui prepare`: make the images a dataset needs
// present on every Docker host of sandbox.hosts. The embedded suite's image
// (sandbox.image) is built from its build context FROM the local base image;
// other images (official SWE-bench instance images) are pulled.
func prepareRun(ctx context.Context, env Env, o prepareOptions) error {
	cfg := o.Config
	sources, err := prepareSources(ctx, cfg)
	if err != nil {
		return err
	}
	hosts := cfg.Sandbox.Hosts
	if len(hosts) == 0 {
		hosts = []string{""}
	}
	var errs []error
	for _, ep := range hosts {
		if err := prepareHost(ctx, env, ep, sources); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// prepareSources lists the images of cfg's dataset (every split, the
// include/exclude lists honoured) and how to get each.
func prepareSources(ctx context.Context, cfg config.Config) ([]sandbox.ImageSource, error) {
	sel := cfg
	sel.Data.Split, sel.Data.TrainLimit = task.SplitAll, 0
	insts, err := task.Load(ctx, sel)
	if err != nil {
		return nil, fmt.Errorf("prepare: dataset %s: %w", cfg.Data.Source, err)
	}
	var digest string
	if cfg.Data.Source == task.MiniSource {
		suite, err := task.GenerateMiniFor(cfg)
		if err != nil {
			return nil, fmt.Errorf("prepare: %w", err)
		}
		digest = suite.Digest()
	}
	seen := map[string]bool{}
	var sources []sandbox.ImageSource
	for i := range insts {
		name := insts[i].ImageName()
		if seen[name] {
			continue
		}
		seen[name] = true
		src := sandbox.ImageSource{Name: name}
		if name == cfg.Sandbox.Image {
			// The embedded suite's image: built here, no registry needed.
			src.Context = func() (io.ReadCloser, error) { return task.OpenMiniBuildContext(ctx, cfg) }
			if digest != "" {
				// An image of another suite (seed, size, generator) is rebuilt.
				src.Labels = map[string]string{task.MiniDigestLabel: digest}
			}
		}
		sources = append(sources, src)
	}
	return sources, nil
}

// prepareHost makes sources present on one endpoint and reports.
func prepareHost(ctx context.Context, env Env, endpoint string, sources []sandbox.ImageSource) error {
	d, err := sandbox.Connect(ctx, endpoint)
	if err != nil {
		return err
	}
	defer d.Close()
	where := d.DaemonHost()
	for _, s := range sources {
		if s.Context == nil {
			continue
		}
		// A build FROM the local base image cannot pull it: say how to make it.
		missing, err := sandbox.Missing(ctx, d, []string{sandbox.BaseImage})
		if err != nil {
			return err
		}
		if len(missing) > 0 {
			return fmt.Errorf("prepare on %s: base image %s is missing: build it with `bash .ci/base-image.sh` (make setup does) "+
				"on that host", where, sandbox.BaseImage)
		}
		break
	}
	fmt.Fprintf(env.Stderr, "preparing %d image(s) on %s\n", len(sources), where)
	pr := &progressPrinter{w: env.Stderr, tty: env.IsTerminal}
	start := time.Now()
	rep, err := sandbox.Prepare(ctx, d, sources, pr.update)
	pr.finish()
	took := time.Since(start).Round(time.Millisecond)
	disk := "unknown"
	if n, derr := sandbox.DiskUse(ctx, d); derr == nil {
		disk = humanBytes(n)
	}
	fmt.Fprintf(env.Stdout, "%s: %d present, %d built, %d pulled in %s; image layers on the host: %s\n", where,
		len(rep.Present), len(rep.Built), len(rep.Pulled), took, disk)
	names := make([]string, 0, len(rep.Sizes))
	for n := range rep.Sizes {
		names = append(names, n)
	}
	sort.Strings(names)
	for i, n := range names {
		if i == 20 {
			fmt.Fprintf(env.Stdout, "  ... and %d more\n", len(names)-20)
			break
		}
		fmt.Fprintf(env.Stdout, "  %-60s %9s\n", n, humanBytes(rep.Sizes[n]))
	}
	if err != nil {
		return fmt.Errorf("prepare on %s: %w", where, err)
	}
	return nil
}

// progressPrinter shows build output and pull progress: on a terminal the
// pull is one line redrawn as a bar; elsewhere a line per status change at
// most every two seconds.
type progressPrinter struct {
	w       io.Writer
	tty     bool
	last    time.Time
	lastMsg string
	drawn   bool
}

func (p *progressPrinter) update(pg sandbox.Progress) {
	switch pg.Phase {
	case "build":
		p.clear()
		fmt.Fprintf(p.w, "  build %s | %s\n", pg.Image, pg.Line)
	case "pull":
		msg := fmt.Sprintf("  pull %s %s %d/%d layers %s/%s", pg.Image, bar(pg.Current, pg.Total, 20),
			pg.LayersDone, pg.Layers, humanBytes(pg.Current), humanBytes(pg.Total))
		if p.tty {
			fmt.Fprintf(p.w, "\r\x1b[K%s", msg)
			p.drawn = true
			return
		}
		if time.Since(p.last) < 2*time.Second && pg.Line == p.lastMsg {
			return
		}
		p.last, p.lastMsg = time.Now(), pg.Line
		fmt.Fprintln(p.w, msg)
	case "present":
		p.clear()
		fmt.Fprintf(p.w, "  %s present\n", pg.Image)
	case "done":
		p.clear()
		fmt.Fprintf(p.w, "  %s ready\n", pg.Image)
	case "failed":
		p.clear()
		fmt.Fprintf(p.w, "  %s failed: %s\n", pg.Image, pg.Line)
	}
}

func (p *progressPrinter) clear() {
	if p.drawn {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.drawn = false
	}
}

func (p *progressPrinter) finish() { p.clear() }

func bar(cur, total int64, width int) string {
	if total <= 0 {
		return "[" + strings.Repeat(" ", width) + "]"
	}
	n := int(int64(width) * min(cur, total) / total)
	return "[" + strings.Repeat("#", n) + strings.Repeat(" ", width-n) + "]"
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
