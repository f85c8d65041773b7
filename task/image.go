package task

import (
	"slices"
	"strings"

	"github.com/swetui/swetui/config"
)

// RepoDirName is the folder name of repo ("owner/name") in reward.repos_dir
// and in the names of built images: owner__name.
func RepoDirName(repo string) string {
	return strings.NewReplacer("/", "__", "@", "_").Replace(repo)
}

// dockerName makes s usable in an image name: lower case, and only the
// characters a repository path component may hold.
func dockerName(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case 'a' <= r && r <= 'z', '0' <= r && r <= '9', r == '.', r == '_', r == '-':
			return r
		case 'A' <= r && r <= 'Z':
			return r + ('a' - 'A')
		}
		return '-'
	}, s)
}

// RepoImageName is the image swetui builds for the instances of a
// repository that share one: swetui-repo/<owner>__<name>.
func RepoImageName(repo string) string {
	return "swetui-repo/" + dockerName(RepoDirName(repo)) + ":latest"
}

// InstanceImageName is the image swetui builds for one instance, under the
// official SWE-bench name.
func InstanceImageName(instanceID string) string {
	return "sweb.eval.x86_64." + dockerName(instanceID) + ":latest"
}

// InstallCommands are the commands run in /testbed when building an image
// of repo: prepare.install's entries for it ("owner/name: command") and for
// every repository ("*: command"), in the config's order.
func InstallCommands(p config.Prepare, repo string) []string {
	var out []string
	for _, e := range p.Install {
		r, cmd, ok := strings.Cut(e, ":")
		if r = strings.TrimSpace(r); ok && (r == "*" || r == repo) {
			out = append(out, strings.TrimSpace(cmd))
		}
	}
	return out
}

// ImagePerInstance says whether the instances of repo get an image each:
// prepare.image_per = "instance", or "auto" with install commands (what
// they install at one base commit may not suit another).
func ImagePerInstance(p config.Prepare, repo string) bool {
	switch p.ImagePer {
	case config.ImagePerInstance:
		return true
	case config.ImagePerRepo:
		return false
	}
	return len(InstallCommands(p, repo)) > 0
}

// applyImageDefault names the image of an instance whose dataset names
// none and whose repository the spec table does not know (no official
// image to pull): one swetui builds.
func (in *Instance) applyImageDefault(p config.Prepare) {
	if in.Image != "" || in.EvalScript != "" {
		return
	}
	if _, known := SpecFor(in.Repo, in.Version); known {
		return
	}
	if ImagePerInstance(p, in.Repo) {
		in.Image = InstanceImageName(in.InstanceID)
	} else {
		in.Image = RepoImageName(in.Repo)
	}
	in.derive("image")
}

// BuiltImage says whether swetui builds the instance's image (its name was
// derived, not given).
func (in *Instance) BuiltImage() bool { return slices.Contains(in.Derived, "image") }
