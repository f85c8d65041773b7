package task

import (
	"reflect"
	"testing"

	"github.com/swetui/swetui/config"
)

// TestImageDefaults checks the image an instance gets when its dataset
// names none: one per repository, one per instance, the official image for
// the spec table's repositories, and the dataset's own name kept.
func TestImageDefaults(t *testing.T) {
	p := config.Default().Prepare
	withInstall := p
	withInstall.Install = []string{"Acme/Lib: pip install -e .", "*: true", "other/x: make"}
	perInstance := p
	perInstance.ImagePer = config.ImagePerInstance
	tests := []struct {
		name    string
		prep    config.Prepare
		in      Instance
		image   string
		derived bool
	}{
		{"one per repository", p, Instance{InstanceID: "Acme__Lib-1", Repo: "Acme/Lib"}, "swetui-repo/acme__lib:latest", true},
		{"install commands: one per instance", withInstall, Instance{InstanceID: "Acme__Lib-1", Repo: "Acme/Lib"}, "sweb.eval.x86_64.acme__lib-1:latest", true},
		{"per instance asked", perInstance, Instance{InstanceID: "a__b-2", Repo: "a/b"}, "sweb.eval.x86_64.a__b-2:latest", true},
		{"official repository", p, Instance{InstanceID: "psf__requests-863", Repo: "psf/requests"}, "sweb.eval.x86_64.psf__requests-863", false},
		{"SWE-smith image_name", p, Instance{InstanceID: "a__b.1", Repo: "a/b", Image: "jyangballin/swesmith.x86_64.a__b.1"}, "jyangballin/swesmith.x86_64.a__b.1", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.in
			in.applyImageDefault(tt.prep)
			if in.ImageName() != tt.image || in.BuiltImage() != tt.derived {
				t.Errorf("image %q built %v, want %q %v", in.ImageName(), in.BuiltImage(), tt.image, tt.derived)
			}
		})
	}
	if got, want := InstallCommands(withInstall, "Acme/Lib"), []string{"pip install -e .", "true"}; !reflect.DeepEqual(got, want) {
		t.Errorf("install commands %q, want %q", got, want)
	}
}
