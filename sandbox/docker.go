package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Docker is the part of the Docker Engine API the sandbox uses. *client.Client
// implements it; tests use a fake for the pool's logic and the real engine
// for every behaviour.
type Docker interface {
	Ping(ctx context.Context) (types.Ping, error)
	DaemonHost() string
	Close() error

	ContainerCreate(ctx context.Context, config *container.Config, hostConfig *container.HostConfig, networkingConfig *network.NetworkingConfig, platform *ocispec.Platform, containerName string) (container.CreateResponse, error)
	CopyToContainer(ctx context.Context, containerID, dstPath string, content io.Reader, options container.CopyToContainerOptions) error
	CopyFromContainer(ctx context.Context, containerID, srcPath string) (io.ReadCloser, container.PathStat, error)
	ContainerStart(ctx context.Context, containerID string, options container.StartOptions) error
	ContainerKill(ctx context.Context, containerID, signal string) error
	ContainerRemove(ctx context.Context, containerID string, options container.RemoveOptions) error
	ContainerList(ctx context.Context, options container.ListOptions) ([]container.Summary, error)
	ContainerExecCreate(ctx context.Context, containerID string, options container.ExecOptions) (container.ExecCreateResponse, error)
	ContainerExecAttach(ctx context.Context, execID string, config container.ExecAttachOptions) (types.HijackedResponse, error)
	ContainerExecInspect(ctx context.Context, execID string) (container.ExecInspect, error)

	ImageList(ctx context.Context, options image.ListOptions) ([]image.Summary, error)
	ImageInspect(ctx context.Context, imageID string, inspectOpts ...client.ImageInspectOption) (image.InspectResponse, error)
	ImageBuild(ctx context.Context, buildContext io.Reader, options build.ImageBuildOptions) (build.ImageBuildResponse, error)
	ImagePull(ctx context.Context, ref string, options image.PullOptions) (io.ReadCloser, error)
	ImageTag(ctx context.Context, source, target string) error
	ImagePush(ctx context.Context, ref string, options image.PushOptions) (io.ReadCloser, error)
	ImageSave(ctx context.Context, imageIDs []string, saveOpts ...client.ImageSaveOption) (io.ReadCloser, error)
	ImageLoad(ctx context.Context, input io.Reader, loadOpts ...client.ImageLoadOption) (image.LoadResponse, error)
	DiskUsage(ctx context.Context, options types.DiskUsageOptions) (types.DiskUsage, error)
}

var _ Docker = (*client.Client)(nil)

// ErrUnreachable marks a Docker endpoint that did not answer.
var ErrUnreachable = errors.New("docker daemon unreachable")

// pingTimeout bounds the reachability check of an endpoint.
const pingTimeout = 5 * time.Second

// Connect opens a client for endpoint and checks that the daemon answers.
// endpoint is unix:///path, tcp://host:port (TLS from DOCKER_CERT_PATH and
// DOCKER_TLS_VERIFY, as the docker CLI reads them), ssh://[user@]host[:port]
// (through the ssh command and `docker system dial-stdio` on the remote), or
// "" for DOCKER_HOST or the local socket.
func Connect(ctx context.Context, endpoint string) (*client.Client, error) {
	opts := []client.Opt{client.WithAPIVersionNegotiation()}
	switch {
	case endpoint == "":
		opts = append(opts, client.FromEnv)
	case strings.HasPrefix(endpoint, "ssh://"):
		dial, err := sshDialer(endpoint)
		if err != nil {
			return nil, err
		}
		// The host is a placeholder: every connection goes through dial.
		opts = append(opts, client.WithHost("http://docker.example.com"), client.WithDialContext(dial))
	case strings.HasPrefix(endpoint, "unix://"), strings.HasPrefix(endpoint, "tcp://"), strings.HasPrefix(endpoint, "npipe://"):
		// TLS first: it replaces the HTTP client that WithHost configures.
		if strings.HasPrefix(endpoint, "tcp://") {
			opts = append(opts, client.WithTLSClientConfigFromEnv())
		}
		opts = append(opts, client.WithHost(endpoint))
	default:
		return nil, fmt.Errorf("docker endpoint %q: want unix://, tcp:// or ssh://", endpoint)
	}
	cli, err := client.NewClientWithOpts(opts...)
	if err != nil {
		return nil, fmt.Errorf("docker endpoint %s: %w", describeEndpoint(endpoint), err)
	}
	if err := ping(ctx, cli, endpoint); err != nil {
		cli.Close()
		return nil, err
	}
	return cli, nil
}

// ping checks that the daemon behind d answers, with an error that says
// which endpoint was tried and what to do about it.
func ping(ctx context.Context, d Docker, endpoint string) error {
	ctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	if _, err := d.Ping(ctx); err != nil {
		return unreachable(endpoint, d.DaemonHost(), err)
	}
	return nil
}

func unreachable(endpoint, daemonHost string, err error) error {
	where := describeEndpoint(endpoint)
	if endpoint == "" && daemonHost != "" {
		where = daemonHost + " (the local socket; set DOCKER_HOST or sandbox.hosts for another)"
		if h := os.Getenv("DOCKER_HOST"); h != "" {
			where = h + " (from DOCKER_HOST)"
		}
	}
	return fmt.Errorf("%w at %s: %v\n  start the Docker Engine there (for example `sudo systemctl start docker` or `dockerd &`), "+
		"check that this user may use it (`docker info`), or point sandbox.hosts / DOCKER_HOST at a running engine",
		ErrUnreachable, where, err)
}

// describeEndpoint names an endpoint for messages, without any password.
func describeEndpoint(endpoint string) string {
	if endpoint == "" {
		if h := os.Getenv("DOCKER_HOST"); h != "" {
			return h + " (from DOCKER_HOST)"
		}
		return client.DefaultDockerHost + " (the local socket)"
	}
	if u, err := url.Parse(endpoint); err == nil && u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.User(u.User.Username())
			return u.String()
		}
	}
	return endpoint
}
