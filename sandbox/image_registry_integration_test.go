package sandbox

// Tests against a real registry server on loopback: Debian's docker-registry
// (the CNCF distribution registry), with htpasswd authentication, started
// by the test. Elsewhere than CI they skip when it is not installed.

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"
)

// needTools skips the test when a command is missing, except under CI,
// where the environment must have it (.ci/setup installs it).
func needTools(t *testing.T, why string, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s: %s is not installed (.ci/setup installs it)", why, tool)
			}
			t.Skipf("%s: %s is not installed (apt-get install docker-registry apache2-utils)", why, tool)
		}
	}
}

// testRegistry is a registry server on loopback with one user.
type testRegistry struct {
	addr       string // 127.0.0.1:port
	user, pass string
}

// startRegistry starts docker-registry on a free loopback port with
// htpasswd authentication, and stops it when the test ends. listen is the
// address to listen on ("" = 127.0.0.1).
func startRegistry(t *testing.T, listen string) testRegistry {
	t.Helper()
	needTools(t, "registry tests", "docker-registry", "htpasswd")
	if listen == "" {
		listen = "127.0.0.1"
	}
	dir := t.TempDir()
	r := testRegistry{user: "swetui", pass: NewNonce()[:12]}
	out, err := exec.Command("htpasswd", "-Bbn", r.user, r.pass).Output()
	if err != nil {
		t.Fatalf("htpasswd: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "htpasswd"), out, 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", listen+":0")
	if err != nil {
		t.Fatal(err)
	}
	r.addr = ln.Addr().String()
	ln.Close()
	cfg := fmt.Sprintf(`version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
auth:
  htpasswd:
    realm: swetui-test
    path: %s
`, filepath.Join(dir, "data"), r.addr, filepath.Join(dir, "htpasswd"))
	if err := os.WriteFile(filepath.Join(dir, "config.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "registry.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("docker-registry", "serve", filepath.Join(dir, "config.yml"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start docker-registry: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + r.addr + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusUnauthorized {
				return r
			}
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(dir, "registry.log"))
			t.Fatalf("registry on %s did not answer: %v\n%s", r.addr, err, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// dockerConfig writes a Docker config holding auths for the registry (or
// none) and points DOCKER_CONFIG at it for the rest of the test.
func (r testRegistry) dockerConfig(t *testing.T, user, pass string) {
	t.Helper()
	dir := t.TempDir()
	cfg := `{"auths": {}}`
	if user != "" {
		auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
		cfg = fmt.Sprintf(`{"auths": {"http://%s/v2/": {"auth": %q}}}`, r.addr, auth)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DOCKER_CONFIG", dir)
}

// tinyImage builds a small image (one file of 2 MiB that does not
// compress, FROM scratch): big enough for the pull to report bytes, small
// enough that pushes and pulls take a moment.
func tinyImage(t *testing.T, name, content string) ImageSource {
	t.Helper()
	noise := make([]byte, 2<<20)
	_, _ = rand.Read(noise)
	return ImageSource{Name: name, Labels: map[string]string{"swetui.test.content": content},
		Context: func() (io.ReadCloser, error) {
			return TarContext(map[string][]byte{
				"Dockerfile": []byte("FROM scratch\nCOPY noise /noise\nLABEL swetui.test.content=" + content + "\n"),
				"noise":      noise,
			}), nil
		}}
}

// TestRegistry pushes to and pulls from a real registry: credentials come
// from the Docker config (and a missing or wrong one is named), pulls
// report progress summed over the layers, a missing image is named with
// its local name, and PrepareWith pulls the registry's copy before
// building, pushing what it built.
func TestRegistry(t *testing.T) {
	d := realDocker(t)
	reg := startRegistry(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tag := NewNonce()[:8]
	local := "swetui/registry-test:" + tag
	remote := reg.addr + "/swetui/registry-test:" + tag
	t.Cleanup(func() {
		for _, n := range []string{local, remote, local + "-b", "swetui/wanted:" + tag, reg.addr + "/swetui/registry-test:" + tag + "-b"} {
			_, _ = d.ImageRemove(context.Background(), n, image.RemoveOptions{Force: true, PruneChildren: true})
		}
	})
	if _, err := Prepare(ctx, d, []ImageSource{tinyImage(t, local, tag)}, nil); err != nil {
		t.Fatal(err)
	}

	reg.dockerConfig(t, "", "")
	if err := Push(ctx, d, local, remote, nil); err == nil || !strings.Contains(err.Error(), "docker login "+reg.addr) {
		t.Errorf("push without credentials: %v, want an error that says to log in to %s", err, reg.addr)
	}
	reg.dockerConfig(t, reg.user, "wrong")
	if err := Push(ctx, d, local, remote, nil); err == nil {
		t.Error("push with a wrong password succeeded")
	}

	reg.dockerConfig(t, reg.user, reg.pass)
	var pushed []Progress
	if err := Push(ctx, d, local, remote, func(p Progress) { pushed = append(pushed, p) }); err != nil {
		t.Fatalf("push: %v", err)
	}
	if len(pushed) == 0 || pushed[len(pushed)-1].Phase != "push" {
		t.Errorf("push progress %+v", pushed)
	}
	for _, n := range []string{local, remote} {
		if _, err := d.ImageRemove(ctx, n, image.RemoveOptions{Force: true, PruneChildren: true}); err != nil {
			t.Fatal(err)
		}
	}

	var last Progress
	if err := Pull(ctx, d, remote, local, func(p Progress) { last = p }); err != nil {
		t.Fatalf("pull: %v", err)
	}
	if last.Phase != "pull" || last.Layers < 1 || last.LayersDone != last.Layers || last.Total <= 0 || last.Current != last.Total {
		t.Errorf("last pull progress %+v, want every layer done and its bytes counted", last)
	}
	if m, err := Missing(ctx, d, []string{local}); err != nil || len(m) > 0 {
		t.Errorf("pulled image not tagged %s: missing %v (%v)", local, m, err)
	}

	// A credential helper, as `docker login` with a credsStore leaves it.
	helperDir := t.TempDir()
	helper := fmt.Sprintf("#!/bin/sh\nread server\necho '{\"ServerURL\":\"'$server'\",\"Username\":\"%s\",\"Secret\":\"%s\"}'\n", reg.user, reg.pass)
	if err := os.WriteFile(filepath.Join(helperDir, "docker-credential-swetuitest"), []byte(helper), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", helperDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	tests := []struct {
		name   string
		config string // config.json; "" = auths with the right user
		ref    string
		want   []string // in the error; none = success
	}{
		{"missing image", "", reg.addr + "/swetui/no-such:" + tag,
			[]string{reg.addr + "/swetui/no-such:" + tag, "for swetui/wanted", "the registry does not have it"}},
		{"no credentials", `{"auths": {}}`, remote, []string{remote, "docker login " + reg.addr, "Docker config"}},
		{"credential helper", fmt.Sprintf(`{"credHelpers": {%q: "swetuitest"}}`, reg.addr), remote, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg.dockerConfig(t, reg.user, reg.pass)
			if tt.config != "" {
				if err := os.WriteFile(filepath.Join(os.Getenv("DOCKER_CONFIG"), "config.json"), []byte(tt.config), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			err := Pull(ctx, d, tt.ref, "swetui/wanted:"+tag, nil)
			if len(tt.want) == 0 && err != nil {
				t.Errorf("pull: %v", err)
			}
			for _, w := range tt.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("error %v, want it to contain %q", err, w)
				}
			}
		})
	}

	// Prepare: not in the registry, so built and pushed; then, gone locally,
	// pulled rather than built.
	reg.dockerConfig(t, reg.user, reg.pass)
	src := tinyImage(t, local+"-b", tag+"b")
	src.Remote, src.PullFirst, src.Push = remote+"-b", true, remote+"-b"
	rep, err := PrepareWith(ctx, d, []ImageSource{src}, PrepareOptions{})
	if err != nil || len(rep.Built) != 1 || len(rep.Pushed) != 1 {
		t.Fatalf("first prepare: %+v, %v; want built and pushed", rep, err)
	}
	for _, n := range []string{src.Name, src.Push} {
		if _, err := d.ImageRemove(ctx, n, image.RemoveOptions{Force: true, PruneChildren: true}); err != nil {
			t.Fatal(err)
		}
	}
	rep, err = PrepareWith(ctx, d, []ImageSource{src}, PrepareOptions{})
	if err != nil || len(rep.Pulled) != 1 || len(rep.Built) != 0 {
		t.Fatalf("second prepare: %+v, %v; want the registry's copy pulled", rep, err)
	}
}
