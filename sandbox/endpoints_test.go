package sandbox

import (
	"reflect"
	"testing"
)

func TestParseHosts(t *testing.T) {
	tests := []struct {
		name          string
		hosts         []string
		docker, other []string
		first         string
		build         []string
	}{
		{"none", nil, nil, nil, "", []string{""}},
		{"docker only", []string{"unix:///var/run/docker.sock", "ssh://b"}, []string{"unix:///var/run/docker.sock", "ssh://b"}, nil, "unix:///var/run/docker.sock", []string{"unix:///var/run/docker.sock", "ssh://b"}},
		{"kube first", []string{"k8s://swetui", "tcp://10.0.0.2:2376"}, []string{"tcp://10.0.0.2:2376"}, []string{"k8s://swetui"}, "tcp://10.0.0.2:2376", []string{"tcp://10.0.0.2:2376"}},
		{"kube only", []string{"k8s://swetui"}, nil, []string{"k8s://swetui"}, "", []string{""}},
		{"no scheme", []string{"/var/run/docker.sock"}, []string{"/var/run/docker.sock"}, nil, "/var/run/docker.sock", []string{"/var/run/docker.sock"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := ParseHosts(tt.hosts)
			if !reflect.DeepEqual(h.Docker, tt.docker) || !reflect.DeepEqual(h.Other, tt.other) {
				t.Errorf("docker %q other %q, want %q %q", h.Docker, h.Other, tt.docker, tt.other)
			}
			if got := h.FirstDocker(); got != tt.first {
				t.Errorf("FirstDocker = %q, want %q", got, tt.first)
			}
			if got := h.DockerOrLocal(); !reflect.DeepEqual(got, tt.build) {
				t.Errorf("DockerOrLocal = %q, want %q", got, tt.build)
			}
		})
	}
}

func TestHostsShown(t *testing.T) {
	t.Setenv("DOCKER_HOST", "")
	if got := ParseHosts(nil).Shown(); !reflect.DeepEqual(got, []string{"unix:///var/run/docker.sock"}) {
		t.Errorf("Shown() = %q", got)
	}
	t.Setenv("DOCKER_HOST", "tcp://127.0.0.1:2375")
	if got := ParseHosts(nil).Shown(); !reflect.DeepEqual(got, []string{"tcp://127.0.0.1:2375"}) {
		t.Errorf("Shown() = %q", got)
	}
	if got := ParseHosts([]string{"k8s://a"}).Shown(); !reflect.DeepEqual(got, []string{"k8s://a"}) {
		t.Errorf("Shown() = %q", got)
	}
}
