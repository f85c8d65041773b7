package sandbox

import (
	"os"
	"strings"
)

// Hosts is sandbox.hosts read once, the way every command reads it: the
// pool runs evaluations on all of them; building images, copying out of
// them and mining need a Docker daemon, which a host of another backend
// (k8s://namespace) does not have.
type Hosts struct {
	All    []string // as configured, in order
	Docker []string // the Docker endpoints among them
	Other  []string // the hosts of another backend (RegisterScheme's)
}

// ParseHosts sorts sandbox.hosts into Docker endpoints and the others.
func ParseHosts(hosts []string) Hosts {
	h := Hosts{All: append([]string(nil), hosts...)}
	for _, e := range hosts {
		if IsDockerEndpoint(e) {
			h.Docker = append(h.Docker, e)
		} else {
			h.Other = append(h.Other, e)
		}
	}
	return h
}

// IsDockerEndpoint reports whether a sandbox.hosts entry names a Docker
// daemon: no scheme (the local one), unix, tcp, ssh or npipe.
func IsDockerEndpoint(endpoint string) bool {
	scheme, _, ok := strings.Cut(endpoint, "://")
	if !ok {
		return true
	}
	switch scheme {
	case "unix", "tcp", "ssh", "npipe":
		return true
	}
	return false
}

// FirstDocker is the Docker endpoint of work that needs one daemon (mining,
// copying a repository out of an image): the first Docker host, else ""
// (the local one, as DOCKER_HOST says).
func (h Hosts) FirstDocker() string {
	if len(h.Docker) > 0 {
		return h.Docker[0]
	}
	return ""
}

// DockerOrLocal are the daemons images are built on: the Docker hosts, or
// the local one ("") when there are none.
func (h Hosts) DockerOrLocal() []string {
	if len(h.Docker) > 0 {
		return h.Docker
	}
	return []string{""}
}

// Shown are the hosts' names for the console and the logs: as configured,
// else DOCKER_HOST, else the local socket.
func (h Hosts) Shown() []string {
	if len(h.All) > 0 {
		return h.All
	}
	if e := os.Getenv("DOCKER_HOST"); e != "" {
		return []string{e}
	}
	return []string{"unix:///var/run/docker.sock"}
}
