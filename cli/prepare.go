package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/swetui/swetui/app"
	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/sandbox"
)

// prepareOptions are `swetui prepare`'s inputs: the config, whose
// data.source is the dataset (--dataset) and whose [prepare] section says
// how images are built, and --dry-run.
type prepareOptions struct {
	Config config.Config
	DryRun bool
}

func newPrepareOptions(env Env, args []string) (prepareOptions, error) {
	fs := newFlags(env, "prepare")
	load := configFlag(fs, env)
	dataset := fs.String("dataset", "", "dataset file (.jsonl, .json, .parquet) or mini (default: data.source)")
	dry := fs.Bool("dry-run", false, "show what would be built or pulled and what each instance's fields were derived to, touching no Docker host")
	cfg, _, err := parseAndLoad(fs, load, args)
	if err != nil {
		return prepareOptions{}, err
	}
	if *dataset != "" {
		cfg.Data.Source = *dataset
	}
	return prepareOptions{Config: cfg, DryRun: *dry}, nil
}

// prepareRun implements `swetui prepare`: make the images a dataset needs
// present on every Docker host of sandbox.hosts. The embedded suite's image
// (sandbox.image) is built from its build context FROM the local base image,
// and so is an image for instances of repositories that name none (from a
// mirror in reward.repos_dir or prepare.repo_url); other images (official
// SWE-bench instance images, SWE-smith's and SWE-Gym's image_name) are
// pulled. Hosts after the first get what an earlier host has streamed from
// it, unless a registry has it.
func prepareRun(ctx context.Context, env Env, o prepareOptions) error {
	cfg := o.Config
	plan, err := app.PlanImages(ctx, cfg)
	if err != nil {
		return err
	}
	if o.DryRun {
		printPlan(env.Stdout, cfg, plan)
		for _, h := range sandbox.ParseHosts(cfg.Sandbox.Hosts).Other {
			reg := sandbox.FromConfig(cfg, "").Kubernetes.Registry
			if reg == "" {
				reg = "no registry set: the cluster pulls them by their own names"
			}
			fmt.Fprintf(env.Stdout, "\nkubernetes host %s: its Pods pull the images from %s\n", h, reg)
		}
		return nil
	}
	var sources []sandbox.ImageSource
	var errs []error
	for _, im := range plan.Images {
		if im.Err != nil {
			errs = append(errs, fmt.Errorf("prepare %s: %w", im.Src.Name, im.Err))
			continue
		}
		sources = append(sources, im.Src)
	}
	return errors.Join(append(errs, app.PrepareHosts(ctx, cfg, sources, prepareHooks(env)))...)
}

// prepareHooks print what app.PrepareHosts does: what starts and the
// progress on stderr, each host's images and the pushes on stdout.
func prepareHooks(env Env) app.PrepareHooks {
	pr := &progressPrinter{w: env.Stderr, tty: env.IsTerminal}
	return app.PrepareHooks{Log: env.Stderr, Progress: pr.update, Finish: pr.clear,
		Host: func(h app.HostPrepared) {
			disk := "unknown"
			if h.Disk >= 0 {
				disk = humanBytes(h.Disk)
			}
			rep := h.Report
			fmt.Fprintf(env.Stdout, "%s: %d present, %d built, %d pulled, %d streamed, %d pushed in %s; image layers on the host: %s\n", h.Host,
				len(rep.Present), len(rep.Built), len(rep.Pulled), len(rep.Streamed), len(rep.Pushed), h.Took.Round(time.Millisecond), disk)
			names := slices.Sorted(maps.Keys(rep.Sizes))
			for i, n := range names {
				if i == 20 {
					fmt.Fprintf(env.Stdout, "  ... and %d more\n", len(names)-20)
					break
				}
				fmt.Fprintf(env.Stdout, "  %-60s %9s\n", n, humanBytes(rep.Sizes[n]))
			}
		},
		Pushed: func(registry string, n int, kubeHosts []string, took time.Duration) {
			fmt.Fprintf(env.Stdout, "%s: %d image(s) pushed for %s in %s\n", registry, n, strings.Join(kubeHosts, ", "), took.Round(time.Millisecond))
		},
	}
}

// printPlan is the dry run: each image and how it would be had, then what
// each instance runs, with the fields swetui derived marked.
func printPlan(w io.Writer, cfg config.Config, plan app.PreparePlan) {
	fmt.Fprintf(w, "dataset %s: %d instance(s), %d image(s)\n", cfg.Data.Source, len(plan.Insts), len(plan.Images))
	for _, im := range plan.Images {
		fmt.Fprintf(w, "\nimage %s\n", im.Src.Name)
		if im.Err != nil {
			fmt.Fprintf(w, "  cannot be had: %v\n", im.Err)
		} else {
			fmt.Fprintf(w, "  %s\n", im.How)
		}
		if im.Repo != nil {
			install := "none"
			if len(im.Repo.Install) > 0 {
				install = strings.Join(im.Repo.Install, "; ")
			}
			fmt.Fprintf(w, "  install: %s (network %s)\n", install, im.Src.Network)
		}
		fmt.Fprintf(w, "  instances: %s\n", strings.Join(im.Instances, ", "))
	}
	for i := range plan.Insts {
		in := &plan.Insts[i]
		mark := func(field string) string {
			if slices.Contains(in.Derived, field) {
				return "  (derived)"
			}
			return ""
		}
		cmd, err := in.TestCommand()
		if err != nil {
			cmd = "none: " + err.Error()
		}
		fmt.Fprintf(w, "\ninstance %s (%s @ %s)\n", in.InstanceID, in.Repo, in.BaseCommit)
		fmt.Fprintf(w, "  image       %s%s\n", in.ImageName(), mark("image"))
		fmt.Fprintf(w, "  test_cmd    %s%s\n", in.TestCmd, mark("test_cmd"))
		fmt.Fprintf(w, "  directives  %s%s\n", strings.Join(in.TestDirectives, " "), mark("test_directives"))
		fmt.Fprintf(w, "  log_parser  %s%s\n", in.LogParser, mark("log_parser"))
		// The evaluation's steps in the order they run (sandbox/script.go).
		fmt.Fprintf(w, "  steps:\n")
		if in.CheckoutBase {
			fmt.Fprintf(w, "    checkout    %s before the patch%s\n", in.BaseCommit, mark("checkout"))
		}
		for _, line := range nonEmptyLines(in.RepoSetup) {
			fmt.Fprintf(w, "    repo_setup  %s\n", line)
		}
		fmt.Fprintf(w, "    model patch git apply, else git apply --reject, else patch --fuzz=5; runner configuration reset\n")
		if in.TestPatch != "" {
			fmt.Fprintf(w, "    test patch  the files it touches reset to the base commit, then applied\n")
		}
		for _, line := range nonEmptyLines(in.Setup) {
			fmt.Fprintf(w, "    setup       %s%s\n", line, mark("setup"))
		}
		if in.Setup != "" {
			fmt.Fprintf(w, "    check       the patched files are as the patches left them (else no tests: an infrastructure failure)\n")
		}
		fmt.Fprintf(w, "    runs        %s\n", cmd)
		fmt.Fprintf(w, "  tests       %d FAIL_TO_PASS, %d PASS_TO_PASS\n", len(in.FailToPass), len(in.PassToPass))
	}
}

func nonEmptyLines(s string) []string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if strings.TrimSpace(line) != "" {
			out = append(out, line)
		}
	}
	return out
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
	case "pull", "push":
		msg := fmt.Sprintf("  %s %s %s %d/%d layers %s/%s", pg.Phase, pg.Image, bar(pg.Current, pg.Total, 20),
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
	case "stream":
		if time.Since(p.last) < 2*time.Second {
			return
		}
		p.last = time.Now()
		fmt.Fprintf(p.w, "  stream %s %s: %s\n", pg.Image, pg.Line, humanBytes(pg.Current))
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
