package sandbox

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/distribution/reference"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/registry"
	"github.com/docker/docker/client"
)

// dockerHubKey is the key of Docker Hub's credentials in the Docker config.
const dockerHubKey = "https://index.docker.io/v1/"

// registryHost is the registry part of an image reference ("docker.io"
// for Docker Hub).
func registryHost(ref string) string {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		if i := strings.IndexByte(ref, '/'); i > 0 {
			return ref[:i]
		}
		return "docker.io"
	}
	return reference.Domain(named)
}

// dockerConfigFile is the config the docker CLI reads: $DOCKER_CONFIG or
// ~/.docker, config.json.
func dockerConfigFile() string {
	dir := os.Getenv("DOCKER_CONFIG")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		dir = filepath.Join(home, ".docker")
	}
	return filepath.Join(dir, "config.json")
}

type dockerConfig struct {
	Auths map[string]struct {
		Auth          string `json:"auth"`
		Username      string `json:"username"`
		Password      string `json:"password"`
		IdentityToken string `json:"identitytoken"`
	} `json:"auths"`
	CredsStore  string            `json:"credsStore"`
	CredHelpers map[string]string `json:"credHelpers"`
}

// RegistryAuth returns the encoded credentials the Engine API wants for a
// pull or push of ref, read from the Docker config as `docker login` left
// them: an auths entry, or a credential helper (credHelpers, credsStore). No
// config, or no entry for the registry, is no credentials: "".
func RegistryAuth(ref string) (string, error) {
	path := dockerConfigFile()
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) || path == "" {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("registry credentials: %w", err)
	}
	var cfg dockerConfig
	if err := json.Unmarshal(data, &cfg); err != nil {
		return "", fmt.Errorf("registry credentials: %s: %w", path, err)
	}
	host := registryHost(ref)
	keys := []string{host}
	if host == "docker.io" {
		keys = []string{dockerHubKey, "docker.io", "index.docker.io"}
	}
	var ac registry.AuthConfig
	found := false
	if helper := cfg.CredHelpers[host]; helper != "" {
		ac, err = helperCredentials(helper, keys[0])
		found = err == nil
	} else if cfg.CredsStore != "" {
		ac, err = helperCredentials(cfg.CredsStore, keys[0])
		found = err == nil && (ac.Username != "" || ac.IdentityToken != "")
	}
	if err != nil {
		return "", fmt.Errorf("registry credentials for %s: %w", host, err)
	}
	if !found {
		for key, a := range cfg.Auths {
			if !slicesContains(keys, normalizeAuthKey(key)) {
				continue
			}
			ac = registry.AuthConfig{Username: a.Username, Password: a.Password, IdentityToken: a.IdentityToken}
			if a.Auth != "" {
				dec, err := base64.StdEncoding.DecodeString(a.Auth)
				if err != nil {
					return "", fmt.Errorf("registry credentials: %s: auths[%q].auth: %w", path, key, err)
				}
				ac.Username, ac.Password, _ = strings.Cut(string(dec), ":")
			}
			found = true
			break
		}
	}
	if !found {
		return "", nil
	}
	ac.ServerAddress = keys[0]
	return registry.EncodeAuthConfig(ac)
}

// normalizeAuthKey turns a config key (https://host/v2/, host) into a host,
// Docker Hub's URL kept whole as the docker CLI keys it.
func normalizeAuthKey(key string) string {
	if key == dockerHubKey {
		return key
	}
	key = strings.TrimPrefix(strings.TrimPrefix(key, "https://"), "http://")
	host, _, _ := strings.Cut(key, "/")
	return host
}

func slicesContains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// helperCredentials asks docker-credential-<helper> for a registry's
// credentials; a helper that knows none answers with an error we read as
// none.
func helperCredentials(helper, server string) (registry.AuthConfig, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker-credential-"+helper, "get")
	cmd.Stdin = strings.NewReader(server)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		if strings.Contains(string(out)+stderr.String(), "credentials not found") {
			return registry.AuthConfig{}, nil
		}
		return registry.AuthConfig{}, fmt.Errorf("docker-credential-%s get: %w: %s", helper, err, strings.TrimSpace(stderr.String()))
	}
	var c struct{ Username, Secret string }
	if err := json.Unmarshal(out, &c); err != nil {
		return registry.AuthConfig{}, fmt.Errorf("docker-credential-%s get: %w", helper, err)
	}
	if c.Username == "<token>" {
		return registry.AuthConfig{IdentityToken: c.Secret}, nil
	}
	return registry.AuthConfig{Username: c.Username, Password: c.Secret}, nil
}

// Push tags name as remote and pushes it, with credentials from the Docker
// config and progress summed over the layers.
func Push(ctx context.Context, d Docker, name, remote string, progress func(Progress)) error {
	if progress == nil {
		progress = func(Progress) {}
	}
	if remote != name {
		if err := d.ImageTag(ctx, name, remote); err != nil {
			return fmt.Errorf("push %s: tag it as %s: %w", name, remote, err)
		}
	}
	auth, err := RegistryAuth(remote)
	if err != nil {
		return fmt.Errorf("push %s: %w", remote, err)
	}
	rc, err := d.ImagePush(ctx, remote, image.PushOptions{RegistryAuth: auth})
	if err != nil {
		return fmt.Errorf("push %s: %w", remote, err)
	}
	defer rc.Close()
	if err := followLayers(rc, name, "push", progress); err != nil {
		if msg := err.Error(); strings.Contains(msg, "authentication required") || strings.Contains(msg, "unauthorized") ||
			strings.Contains(msg, "no basic auth credentials") {
			return fmt.Errorf("push %s: %w; log in with `docker login %s` (swetui reads the Docker config)", remote, err, registryHost(remote))
		}
		return fmt.Errorf("push %s: %w", remote, err)
	}
	return nil
}

// RegistryRef is the reference of image name in a registry given as
// host[:port][/prefix]; "" leaves the name as it is.
func RegistryRef(registry, name string) string {
	if registry == "" {
		return name
	}
	return strings.TrimSuffix(registry, "/") + "/" + name
}

// Stream copies image name from one host to another without a registry
// (docker save | docker load through this process), reporting the bytes.
func Stream(ctx context.Context, from, to Docker, name string, progress func(Progress)) error {
	if progress == nil {
		progress = func(Progress) {}
	}
	rc, err := from.ImageSave(ctx, []string{name})
	if err != nil {
		return fmt.Errorf("stream %s from %s: %w", name, from.DaemonHost(), err)
	}
	defer rc.Close()
	cr := &countingReader{r: rc, report: func(n int64) {
		progress(Progress{Image: name, Phase: "stream", Current: n, Line: fmt.Sprintf("from %s", from.DaemonHost())})
	}}
	resp, err := to.ImageLoad(ctx, cr, client.ImageLoadWithQuiet(true))
	if err != nil {
		return fmt.Errorf("stream %s to %s: %w", name, to.DaemonHost(), err)
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var m streamMessage
		if err := dec.Decode(&m); err == io.EOF {
			return nil
		} else if err != nil {
			return fmt.Errorf("stream %s to %s: read load output: %w", name, to.DaemonHost(), err)
		}
		if m.Error != "" {
			return fmt.Errorf("stream %s to %s: %s", name, to.DaemonHost(), m.Error)
		}
	}
}

// countingReader reports the bytes read, at most every 200ms.
type countingReader struct {
	r      io.Reader
	n      int64
	last   time.Time
	report func(int64)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if time.Since(c.last) > 200*time.Millisecond || err == io.EOF {
		c.last = time.Now()
		c.report(c.n)
	}
	return n, err
}
