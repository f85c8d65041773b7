// Package kubetest finds the single-node test cluster that .ci/k8s/up.sh
// brings up (make cluster-up; CI's .ci/run does it) for the Kubernetes
// backend's integration tests, and pushes the images they need to its
// loopback registry. Without a cluster the tests skip with a message,
// except under CI=true, where a missing cluster fails them.
package kubetest

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/swetui/swetui/sandbox"
)

// Cluster is the test cluster as its env file describes it.
type Cluster struct {
	Dir        string // $SWETUI_K8S_DIR
	Kubeconfig string // the least-privilege runner identity's
	Registry   string // host:port of the registry the Pods pull from
	Namespace  string
}

// Host is the sandbox.hosts entry of the cluster's namespace.
func (c Cluster) Host() string { return "k8s:///" + c.Namespace }

// Dir is where the cluster keeps its state.
func Dir() string {
	if d := os.Getenv("SWETUI_K8S_DIR"); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "swetui-k8s")
}

// Up returns the running test cluster, with KUBECONFIG set to its runner
// identity for the test, or skips the test (fails it under CI=true).
func Up(t testing.TB) Cluster {
	t.Helper()
	c := Cluster{Dir: Dir()}
	f, err := os.Open(filepath.Join(c.Dir, "env"))
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no test cluster (%v): CI brings one up with .ci/k8s/up.sh", err)
		}
		t.Skipf("no Kubernetes test cluster at %s (make cluster-up starts one): %v", c.Dir, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if !ok {
			continue
		}
		v = strings.Trim(v, `"'`)
		switch k {
		case "KUBECONFIG":
			c.Kubeconfig = v
		case "SWETUI_K8S_REGISTRY":
			c.Registry = v
		case "SWETUI_K8S_NAMESPACE":
			c.Namespace = v
		}
	}
	if c.Kubeconfig == "" || c.Registry == "" || c.Namespace == "" {
		t.Fatalf("%s/env lacks KUBECONFIG, SWETUI_K8S_REGISTRY or SWETUI_K8S_NAMESPACE", c.Dir)
	}
	t.Setenv("KUBECONFIG", c.Kubeconfig)
	return c
}

// Push pushes the local Docker image name to the cluster's registry under
// the name the Pods ask for (sandbox.kubernetes.registry = c.Registry).
func (c Cluster) Push(t testing.TB, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	d, err := sandbox.Connect(ctx, "")
	if err != nil {
		t.Fatalf("push %s: %v", name, err)
	}
	defer d.Close()
	if err := sandbox.Push(ctx, d, name, sandbox.RegistryRef(c.Registry, sandbox.RemoteImage(name)), nil); err != nil {
		t.Fatalf("push %s to the test cluster's registry: %v", name, err)
	}
}

// Kubelet runs .ci/k8s/kubelet.sh stop|start: the node goes away or comes
// back (start waits until it is Ready).
func (c Cluster) Kubelet(t testing.TB, action string) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", ".ci", "k8s", "kubelet.sh")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", script, action)
	cmd.Env = append(os.Environ(), "SWETUI_K8S_DIR="+c.Dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubelet %s: %v\n%s", action, err, out)
	}
}
