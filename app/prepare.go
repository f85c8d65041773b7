package app

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/sandbox"
	"github.com/swetui/swetui/task"
)

// ImagePlan is how prepare gets one image, and the instances that use it.
type ImagePlan struct {
	Src       sandbox.ImageSource
	How       string             // what the dry run shows
	Repo      *sandbox.RepoImage // the image built from a repository, if so
	Instances []string
	Err       error // why it cannot be had (no mirror, ...)
}

// PreparePlan is the images of a dataset and how `swetui prepare` gets them.
type PreparePlan struct {
	Insts  []task.Instance
	Images []*ImagePlan
}

// PlanImages lists the images of cfg's dataset (every split, the
// include/exclude lists honoured) and how to get each.
func PlanImages(ctx context.Context, cfg config.Config) (PreparePlan, error) {
	sel := cfg
	sel.Data.Split, sel.Data.TrainLimit = task.SplitAll, 0
	insts, err := task.Load(ctx, sel)
	if err != nil {
		return PreparePlan{}, fmt.Errorf("prepare: dataset %s: %w", cfg.Data.Source, err)
	}
	plan := PreparePlan{Insts: insts}
	var digest string
	if cfg.Data.Source == task.MiniSource {
		suite, err := task.GenerateMiniFor(cfg)
		if err != nil {
			return PreparePlan{}, fmt.Errorf("prepare: %w", err)
		}
		digest = suite.Digest()
	}
	base := cfg.Prepare.BaseImage
	if base == "" {
		base = sandbox.BaseImage
	}
	byName := map[string]*ImagePlan{}
	for i := range insts {
		in := &insts[i]
		name := in.ImageName()
		im := byName[name]
		if im == nil {
			im = &ImagePlan{Src: sandbox.ImageSource{Name: name}}
			byName[name] = im
			plan.Images = append(plan.Images, im)
			switch {
			case name == cfg.Sandbox.Image && cfg.Data.Source == task.MiniSource:
				// The embedded suite's image: built here, no registry needed.
				im.Src.Context = func() (io.ReadCloser, error) { return task.OpenMiniBuildContext(ctx, cfg) }
				if digest != "" {
					// An image of another suite (seed, size, generator) is rebuilt.
					im.Src.Labels = map[string]string{task.MiniDigestLabel: digest}
				}
				im.How = "build the embedded suite FROM " + sandbox.BaseImage
			case in.BuiltImage():
				src, err := repoSource(cfg, in.Repo)
				im.Repo = &sandbox.RepoImage{Name: name, Base: base, Source: src, Full: cfg.Prepare.History == config.HistoryFull,
					Install: task.InstallCommands(cfg.Prepare, in.Repo), Workdir: in.WorkdirOrDefault(), Network: cfg.Prepare.Network}
				im.Err = err
			default:
				im.How = "pull " + sandbox.RemoteImage(name)
			}
			if r := cfg.Prepare.Registry; r != "" {
				im.Src.Remote = sandbox.RegistryRef(r, sandbox.RemoteImage(name))
				im.Src.PullFirst = im.Src.Context != nil || im.Repo != nil
				if cfg.Prepare.Push && im.Src.PullFirst {
					im.Src.Push = im.Src.Remote
				}
				if im.Repo == nil && im.Src.Context == nil {
					im.How = "pull " + im.Src.Remote
				}
			}
		}
		im.Instances = append(im.Instances, in.InstanceID)
		if im.Repo != nil && !slices.Contains(im.Repo.Commits, in.BaseCommit) {
			im.Repo.Commits = append(im.Repo.Commits, in.BaseCommit)
		}
	}
	for _, im := range plan.Images {
		if im.Repo == nil {
			continue
		}
		src := im.Repo.ImageSource(ctx)
		src.Remote, src.PullFirst, src.Push = im.Src.Remote, im.Src.PullFirst, im.Src.Push
		im.Src = src
		hist := fmt.Sprintf("%d base commit(s)", len(im.Repo.Commits))
		if im.Repo.Full {
			hist = "full history, " + hist + " checked"
		}
		im.How = fmt.Sprintf("build FROM %s: %s at %s (%s)", im.Repo.Base, im.Repo.Source, im.Repo.Workdir, hist)
		if im.Src.PullFirst {
			im.How = "pull " + im.Src.Remote + " if there, else " + im.How
		}
		if im.Src.Push != "" {
			im.How += ", then push " + im.Src.Push
		}
	}
	return plan, nil
}

// repoSource is where a repository's git history comes from: a mirror in
// reward.repos_dir (owner__name, bare or not, as the apply checks read it),
// else prepare.repo_url.
func repoSource(cfg config.Config, repo string) (string, error) {
	if dir := cfg.Reward.ReposDir; dir != "" {
		p := filepath.Join(dir, task.RepoDirName(repo))
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			return p, nil
		}
	}
	if u := cfg.Prepare.RepoURL; u != "" {
		return strings.ReplaceAll(u, "{repo}", repo), nil
	}
	where := "reward.repos_dir is not set"
	if cfg.Reward.ReposDir != "" {
		where = "not in reward.repos_dir (" + filepath.Join(cfg.Reward.ReposDir, task.RepoDirName(repo)) + ")"
	}
	return "", fmt.Errorf("no git source for %s: %s; put a clone (bare or not) there, or set prepare.repo_url "+
		"(for example https://github.com/{repo}.git)", repo, where)
}

// EnsureBase makes sure the local base image is there when something will
// be built FROM it on d: a build cannot pull it. A peer's copy is streamed
// (said on w); otherwise the error says how to make it.
func EnsureBase(ctx context.Context, w io.Writer, d sandbox.Docker, sources []sandbox.ImageSource, peers []sandbox.Docker) error {
	builds := false
	for _, s := range sources {
		builds = builds || s.Context != nil
	}
	if !builds {
		return nil
	}
	if missing, err := sandbox.Missing(ctx, d, []string{sandbox.BaseImage}); err != nil || len(missing) == 0 {
		return err
	}
	// Only what is missing here and on every peer gets built.
	var toBuild []string
	for _, s := range sources {
		if s.Context == nil {
			continue
		}
		if m, err := sandbox.Missing(ctx, d, []string{s.Name}); err != nil || len(m) == 0 {
			continue
		}
		onPeer := false
		for _, p := range peers {
			if m, err := sandbox.Missing(ctx, p, []string{s.Name}); err == nil && len(m) == 0 {
				onPeer = true
			}
		}
		if !onPeer {
			toBuild = append(toBuild, s.Name)
		}
	}
	if len(toBuild) == 0 {
		return nil
	}
	for _, p := range peers {
		if m, err := sandbox.Missing(ctx, p, []string{sandbox.BaseImage}); err == nil && len(m) == 0 {
			fmt.Fprintf(w, "  streaming base image %s from %s\n", sandbox.BaseImage, p.DaemonHost())
			return sandbox.Stream(ctx, p, d, sandbox.BaseImage, nil)
		}
	}
	return fmt.Errorf("base image %s is missing: build it with `bash .ci/base-image.sh` (make setup does) "+
		"on that host", sandbox.BaseImage)
}
