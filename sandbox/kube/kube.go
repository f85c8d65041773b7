// Package kube owns the reward pool's Kubernetes backend: a host
// k8s://[context]/namespace in sandbox.hosts runs each evaluation as a Pod
// of that namespace, with the guarantees of the Docker runner (package
// sandbox): the Pod's own process idles, swetui starts the prepare script
// and then the test runner in it through the API server (pods/exec), writes
// the protocol lines itself and takes each exit status from the API, so
// the nonce never enters the Pod and nothing the code under test prints
// can forge a result.
//
// A Pod has no network (no service links, no service-account token, a DNS
// that resolves nothing, and a deny-all NetworkPolicy where the cluster
// enforces them), CPU and memory limits equal to its requests, all
// capabilities dropped and no privilege escalation, a read-only root where
// the image allows (the writable folders are emptyDirs filled from the
// image by an init container, as Docker fills its volumes),
// activeDeadlineSeconds beside swetui's own timeout, and the labels
// swetui.managed, swetui.run and swetui.eval (the owner and deadline are
// annotations: a label cannot hold them). Concurrency is capped at what the
// namespace's ResourceQuota and the Ready nodes' allocatable CPU and memory
// allow; a Pod waiting to be scheduled counts as queued.
//
// Importing the package registers the k8s scheme with sandbox.RegisterScheme.
package kube

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/swetui/swetui/sandbox"
)

// Scheme is the endpoint scheme of a Kubernetes host.
const Scheme = "k8s"

func init() {
	sandbox.RegisterScheme(Scheme, Open)
	// client-go logs through klog to stderr (a broken exec stream, a failed
	// websocket ping): under the console that would write over the screen,
	// and each such error reaches the evaluation's Result anyway.
	klog.SetLogger(logr.Discard())
}

// Annotations beside the labels (a label value cannot hold an owner or a
// long run name).
const (
	AnnotationInstance = "swetui.instance"
	evalContainer      = "eval"
	fillContainer      = "fill"
	denyAllPolicy      = "swetui-deny-all"
)

// Timeouts of the API calls that should be quick, and of a Pod's wait to
// be scheduled and started (image pulls included) beyond its evaluation's
// timeout.
var (
	apiTimeout   = 30 * time.Second
	startTimeout = 5 * time.Minute
)

// Backend runs evaluations as Pods of one namespace.
type Backend struct {
	endpoint  string
	namespace string
	cs        kubernetes.Interface
	rest      *rest.Config
	cfg       sandbox.BackendConfig
	drv       sandbox.Driver
	capacity  atomic.Int64 // refreshed by every Ping: nodes come and go
	notes     []string     // what Open learned and a user should know (no NetworkPolicy, ...)

	mu    sync.Mutex
	nodes map[string]string // Pod -> node, while it runs
}

var _ sandbox.Backend = (*Backend)(nil)

// ParseEndpoint splits k8s://[context]/namespace; an empty context is the
// kubeconfig's current one (or the in-cluster config).
func ParseEndpoint(endpoint string) (kubeContext, namespace string, err error) {
	rest, ok := strings.CutPrefix(endpoint, Scheme+"://")
	if !ok {
		return "", "", fmt.Errorf("kubernetes host %q: want k8s://[context]/namespace", endpoint)
	}
	i := strings.LastIndexByte(rest, '/')
	if i < 0 || rest[i+1:] == "" {
		return "", "", fmt.Errorf("kubernetes host %q: no namespace (want k8s://[context]/namespace, e.g. k8s:///swetui)", endpoint)
	}
	return rest[:i], rest[i+1:], nil
}

// Open connects to the cluster of endpoint (kubeconfig from KUBECONFIG or
// ~/.kube/config, else the in-cluster config), checks the namespace
// answers, puts the deny-all NetworkPolicy in place where it may, and
// works out how many evaluations fit.
func Open(ctx context.Context, endpoint string, cfg sandbox.BackendConfig) (sandbox.Backend, error) {
	kubeContext, ns, err := ParseEndpoint(endpoint)
	if err != nil {
		return nil, err
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules,
		&clientcmd.ConfigOverrides{CurrentContext: kubeContext}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubernetes host %s: load kubeconfig (KUBECONFIG, ~/.kube/config or in-cluster): %w", endpoint, err)
	}
	// Every worker polls and execs: the client's default 5 requests a
	// second would queue them.
	rc.QPS, rc.Burst = 100, 200
	rc.UserAgent = "swetui"
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes host %s: %w", endpoint, err)
	}
	b := &Backend{endpoint: endpoint, namespace: ns, cs: cs, rest: rc, cfg: cfg, nodes: map[string]string{}}
	b.drv.Limits = cfg.Limits
	if err := b.Ping(ctx); err != nil {
		return nil, err
	}
	b.ensureDenyAll(ctx)
	return b, nil
}

// Name is the endpoint.
func (b *Backend) Name() string { return b.endpoint }

// Capacity is how many evaluations fit at once (0: no bound known).
func (b *Backend) Capacity() int { return int(b.capacity.Load()) }

// Notes are what Open found that limits the guarantees (no NetworkPolicy
// allowed, no node list), for the user.
func (b *Backend) Notes() []string { return b.notes }

// Where is the node Pod id runs on.
func (b *Backend) Where(id string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n := b.nodes[id]; n != "" {
		return "node " + n
	}
	return ""
}

// Close lets the client go.
func (b *Backend) Close() error { return nil }

// Remove deletes Pod id with no grace period; one already gone is removed.
func (b *Backend) Remove(ctx context.Context, id string) error {
	b.mu.Lock()
	delete(b.nodes, id)
	b.mu.Unlock()
	zero := int64(0)
	err := b.cs.CoreV1().Pods(b.namespace).Delete(ctx, id, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete pod %s on %s: %w", id, b.endpoint, err)
	}
	return nil
}

// Reap deletes the managed Pods sel selects: of any run, those whose owner
// is gone or whose deadline passed; of one run, all it does not keep.
func (b *Backend) Reap(ctx context.Context, sel sandbox.Reaping) (int, error) {
	selector := sandbox.LabelManaged + "=true"
	if sel.RunID != "" {
		selector += "," + sandbox.LabelRun + "=" + LabelValue(sel.RunID)
	}
	list, err := b.cs.CoreV1().Pods(b.namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return 0, fmt.Errorf("list swetui pods on %s: %w", b.endpoint, err)
	}
	n := 0
	var errs []error
	now := time.Now()
	for _, pod := range list.Items {
		if sel.RunID == "" {
			running := pod.Status.Phase == corev1.PodRunning || pod.Status.Phase == corev1.PodPending
			if !sandbox.Stale(pod.Annotations, running, now) {
				continue
			}
		} else if sel.RunID != pod.Annotations[sandbox.LabelRun] || (sel.Keep != nil && sel.Keep(pod.Name)) {
			continue
		}
		if err := b.Remove(ctx, pod.Name); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// LabelValue makes s a valid label value (63 characters of [A-Za-z0-9._-],
// alphanumeric at both ends); a value that had to change ends in a hash
// of the original, so two runs never share one.
func LabelValue(s string) string {
	ok := len(s) <= 63
	var b strings.Builder
	for i, r := range s {
		alnum := r < 128 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
		switch {
		case alnum:
			b.WriteRune(r)
		case (r == '-' || r == '_' || r == '.') && i > 0 && i < len(s)-1:
			b.WriteRune(r)
		default:
			b.WriteByte('x')
			ok = false
		}
	}
	if ok {
		return s
	}
	h := fnv.New32a()
	h.Write([]byte(s))
	v := b.String()
	if len(v) > 54 {
		v = v[:54]
	}
	return strings.TrimRight(v, "-_.") + "-" + fmt.Sprintf("%08x", h.Sum32())
}
