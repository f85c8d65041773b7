package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/sandbox"
)

// PrepareHooks are told what PrepareHosts does, for printing.
type PrepareHooks struct {
	Log      io.Writer              // what starts, a line each
	Progress func(sandbox.Progress) // a stage's build output, pull, push and stream progress
	Finish   func()                 // the stage's progress is over
	Host     func(HostPrepared)     // a host's images are present
	// Pushed says n images of sources went to registry for the
	// Kubernetes hosts.
	Pushed func(registry string, n int, kubeHosts []string, took time.Duration)
}

// HostPrepared is one host's outcome.
type HostPrepared struct {
	Host   string
	Report sandbox.PrepareReport
	Took   time.Duration
	Disk   int64 // the host's image layers; -1 when unknown
}

// PrepareHosts makes sources present on every Docker host of
// sandbox.hosts (the local one when there are none): each gets what an
// earlier host has streamed from it, unless a registry has it. Kubernetes
// hosts have no daemon to build on: the images are made on the Docker
// hosts and pushed from the first to the registry the Pods pull from.
func PrepareHosts(ctx context.Context, cfg config.Config, sources []sandbox.ImageSource, h PrepareHooks) error {
	parsed := sandbox.ParseHosts(cfg.Sandbox.Hosts)
	var errs []error
	var peers []sandbox.Docker
	defer func() {
		for _, p := range peers {
			p.Close()
		}
	}()
	for _, ep := range parsed.DockerOrLocal() {
		d, err := sandbox.Connect(ctx, ep)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := PrepareHost(ctx, d, sources, peers, h); err != nil {
			errs = append(errs, err)
		}
		peers = append(peers, d)
	}
	if kube := parsed.Other; len(kube) > 0 && len(peers) > 0 {
		if err := pushForKube(ctx, cfg, peers[0], sources, kube, h); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// PrepareHost makes sources present on d; peers are the hosts prepared
// before it.
func PrepareHost(ctx context.Context, d sandbox.Docker, sources []sandbox.ImageSource, peers []sandbox.Docker, h PrepareHooks) error {
	where := d.DaemonHost()
	if err := EnsureBase(ctx, h.Log, d, sources, peers); err != nil {
		return fmt.Errorf("prepare on %s: %w", where, err)
	}
	fmt.Fprintf(h.Log, "preparing %d image(s) on %s\n", len(sources), where)
	start := time.Now()
	rep, err := sandbox.PrepareWith(ctx, d, sources, sandbox.PrepareOptions{Progress: h.Progress, Peers: peers})
	h.Finish()
	out := HostPrepared{Host: where, Report: rep, Took: time.Since(start), Disk: -1}
	if n, derr := sandbox.DiskUse(ctx, d); derr == nil {
		out.Disk = n
	}
	h.Host(out)
	if err != nil {
		return fmt.Errorf("prepare on %s: %w", where, err)
	}
	return nil
}

// pushForKube pushes every image of sources from d to the registry the
// Kubernetes hosts' Pods pull from (sandbox.kubernetes.registry, else
// prepare.registry), under the name the Pods ask for. Without a registry
// only images the cluster can pull itself (not built here) are fine.
func pushForKube(ctx context.Context, cfg config.Config, d sandbox.Docker, sources []sandbox.ImageSource, kubeHosts []string, h PrepareHooks) error {
	hosts := strings.Join(kubeHosts, ", ")
	registry := sandbox.FromConfig(cfg, "").Kubernetes.Registry
	if registry == "" {
		for _, s := range sources {
			if s.Context != nil {
				return fmt.Errorf("prepare: %s builds %s here, and the Pods of %s can pull it only from a registry: set prepare.registry (or sandbox.kubernetes.registry)",
					d.DaemonHost(), s.Name, hosts)
			}
		}
		fmt.Fprintf(h.Log, "no registry set: the Pods of %s pull the images by their own names\n", hosts)
		return nil
	}
	fmt.Fprintf(h.Log, "pushing %d image(s) to %s for %s\n", len(sources), registry, hosts)
	start := time.Now()
	var errs []error
	n := 0
	for _, s := range sources {
		ref := sandbox.RegistryRef(registry, sandbox.RemoteImage(s.Name))
		if err := sandbox.Push(ctx, d, s.Name, ref, h.Progress); err != nil {
			errs = append(errs, fmt.Errorf("prepare: push %s to %s for %s: %w", s.Name, ref, hosts, err))
			continue
		}
		n++
	}
	h.Finish()
	h.Pushed(registry, n, kubeHosts, time.Since(start))
	return errors.Join(errs...)
}
