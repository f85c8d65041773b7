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
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/klog/v2"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"

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

// Ping checks that the API server answers for the namespace and, where the
// nodes can be read, that one of them is Ready with a fresh heartbeat: a
// cluster whose kubelets are gone takes no more evaluations. A host that
// answers has its capacity worked out again (the pool pings every few
// seconds, so a cluster that scales is followed).
func (b *Backend) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	if _, err := b.cs.CoreV1().Pods(b.namespace).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		return fmt.Errorf("kubernetes host %s: list pods in namespace %s: %w", b.endpoint, b.namespace, err)
	}
	var quotas []corev1.ResourceQuota
	if list, err := b.cs.CoreV1().ResourceQuotas(b.namespace).List(ctx, metav1.ListOptions{}); err == nil {
		quotas = list.Items
	}
	list, err := b.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		// No right to read nodes: the API's answer is all we know.
		b.capacity.Store(int64(Fit(quotas, nil, b.podCPU(), b.podMemory())))
		return nil
	}
	b.capacity.Store(int64(Fit(quotas, list.Items, b.podCPU(), b.podMemory())))
	fresh := b.freshLeases(ctx)
	for _, n := range list.Items {
		if nodeReady(n) && !n.Spec.Unschedulable && (fresh == nil || fresh[n.Name]) {
			return nil
		}
	}
	return fmt.Errorf("kubernetes host %s: no node is Ready with a recent heartbeat", b.endpoint)
}

// freshLeases are the nodes whose kubelet renewed its lease within the
// lease's duration; nil when the leases cannot be read.
func (b *Backend) freshLeases(ctx context.Context) map[string]bool {
	leases, err := b.cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil
	}
	fresh := map[string]bool{}
	for _, l := range leases.Items {
		if l.Spec.RenewTime == nil {
			continue
		}
		d := 40 * time.Second
		if l.Spec.LeaseDurationSeconds != nil {
			d = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
		}
		fresh[l.Name] = time.Since(l.Spec.RenewTime.Time) <= d
	}
	return fresh
}

func nodeReady(n corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// ensureDenyAll puts a NetworkPolicy in the namespace that lets no traffic
// in or out of swetui's Pods. A cluster whose network plugin enforces none
// still has no route from the Pods (no service links, no DNS); a user
// without the right to create it is told.
func (b *Backend) ensureDenyAll(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: denyAllPolicy, Labels: map[string]string{sandbox.LabelManaged: "true"}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{sandbox.LabelManaged: "true"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		},
	}
	_, err := b.cs.NetworkingV1().NetworkPolicies(b.namespace).Create(ctx, np, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		b.notes = append(b.notes, fmt.Sprintf("no deny-all NetworkPolicy in namespace %s (%v): the Pods still have no service links, token or DNS", b.namespace, err))
	}
}

// Fit is how many Pods of cpu and mem fit at once: the least of what each
// quota allows (its cpu, memory and pods, limits or requests) and of what
// the Ready, schedulable nodes hold, each node counted in whole Pods by its
// allocatable CPU, memory and pods. 0 when nothing bounds it (no quota, no
// node known); at least 1 otherwise, so a run is never starved by rounding.
func Fit(quotas []corev1.ResourceQuota, nodes []corev1.Node, cpu, mem resource.Quantity) int {
	best := math.MaxInt
	bound := func(n int) { best = min(best, n) }
	for _, q := range quotas {
		for name, hard := range q.Spec.Hard {
			switch name {
			case corev1.ResourceLimitsCPU, corev1.ResourceRequestsCPU, corev1.ResourceCPU:
				bound(int(hard.MilliValue() / cpu.MilliValue()))
			case corev1.ResourceLimitsMemory, corev1.ResourceRequestsMemory, corev1.ResourceMemory:
				if mem.Value() > 0 {
					bound(int(hard.Value() / mem.Value()))
				}
			case corev1.ResourcePods:
				bound(int(hard.Value()))
			}
		}
	}
	if len(nodes) > 0 {
		total := 0
		for _, n := range nodes {
			if !nodeReady(n) || n.Spec.Unschedulable {
				continue
			}
			a := n.Status.Allocatable
			c, m := a[corev1.ResourceCPU], a[corev1.ResourceMemory]
			per := int(c.MilliValue() / cpu.MilliValue())
			if mem.Value() > 0 {
				per = min(per, int(m.Value()/mem.Value()))
			}
			if p, ok := a[corev1.ResourcePods]; ok {
				per = min(per, int(p.Value()))
			}
			total += per
		}
		bound(total)
	}
	if best == math.MaxInt {
		return 0
	}
	return max(best, 1)
}

// podCPU is one evaluation's CPU (the sandbox's cpus, at least 10m).
func (b *Backend) podCPU() resource.Quantity {
	return *resource.NewMilliQuantity(max(int64(b.cfg.Limits.CPUs*1000), 10), resource.DecimalSI)
}

// podMemory is one evaluation's memory; /tmp is memory-backed and counts
// against it, as Docker's tmpfs does.
func (b *Backend) podMemory() resource.Quantity {
	return *resource.NewQuantity(int64(b.cfg.Limits.MemoryMB)<<20, resource.BinarySI)
}

// Create makes the evaluation's Pod, waits until it runs and copies the
// files in. The returned id is the Pod's name.
func (b *Backend) Create(ctx context.Context, spec sandbox.Spec, d *sandbox.Durations) (string, error) {
	if err := sandbox.CheckSpec(spec); err != nil {
		return "", err
	}
	t0 := time.Now()
	pod, err := b.podFor(spec, time.Now())
	if err != nil {
		return "", err
	}
	cctx, cancel := context.WithTimeout(ctx, apiTimeout)
	made, err := b.cs.CoreV1().Pods(b.namespace).Create(cctx, pod, metav1.CreateOptions{})
	cancel()
	if err != nil {
		return "", fmt.Errorf("create pod for %s in %s: %w", spec.InstanceID, b.endpoint, err)
	}
	id := made.Name
	if err := b.waitRunning(ctx, id, spec); err != nil {
		return id, err
	}
	if err := b.copyIn(ctx, id, spec); err != nil {
		return id, err
	}
	d.Create = time.Since(t0)
	return id, nil
}

// podFor is the Pod of spec.
func (b *Backend) podFor(spec sandbox.Spec, now time.Time) (*corev1.Pod, error) {
	user, group, err := numericUser(spec.User)
	if err != nil {
		return nil, fmt.Errorf("evaluation %s: %w: %v", spec.ID, sandbox.ErrBadSpec, err)
	}
	deadline := sandbox.DeadlineOf(spec, now)
	// The Pod is killed at its deadline whatever swetui does.
	active := int64(time.Until(deadline).Seconds()) + 1
	yes, no, zero := true, false, int64(0)
	l := b.cfg.Limits
	k := b.cfg.Kubernetes
	limits := corev1.ResourceList{corev1.ResourceCPU: b.podCPU()}
	if l.MemoryMB > 0 {
		limits[corev1.ResourceMemory] = b.podMemory()
	}
	resources := corev1.ResourceRequirements{Limits: limits, Requests: limits}
	readOnly := !l.WritableRoot && !spec.WritableRoot
	caps := &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}
	for _, c := range l.CapAdd {
		caps.Add = append(caps.Add, corev1.Capability(strings.TrimPrefix(strings.ToUpper(c), "CAP_")))
	}
	sec := &corev1.SecurityContext{
		AllowPrivilegeEscalation: &no,
		Capabilities:             caps,
		ReadOnlyRootFilesystem:   &readOnly,
		RunAsUser:                user,
		RunAsGroup:               group,
	}
	if user != nil && *user != 0 {
		sec.RunAsNonRoot = &yes // what the restricted Pod Security level asks to see
	}
	var env []corev1.EnvVar
	for _, kv := range spec.Env {
		name, value, _ := strings.Cut(kv, "=")
		env = append(env, corev1.EnvVar{Name: name, Value: value})
	}
	tmpSize := resource.NewQuantity(int64(sandbox.TmpMB(l))<<20, resource.BinarySI)
	volumes := []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{
		EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: tmpSize}}}}
	mounts := []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}}
	var fill []string
	if readOnly {
		// The writable folders are emptyDirs; the init container fills
		// each with what the image holds there, as Docker fills a volume.
		for i, dir := range sandbox.WritableDirs(spec) {
			name := "w" + strconv.Itoa(i)
			volumes = append(volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
			mounts = append(mounts, corev1.VolumeMount{Name: name, MountPath: dir})
			fill = append(fill, fmt.Sprintf("if [ -d %s ]; then cp -a %s/. /fill/%s/; fi", shq(dir), shq(dir), name))
		}
	}
	// Where swetui prepare pushed it (an official SWE-bench image by its
	// Docker Hub name).
	image := sandbox.RegistryRef(k.Registry, sandbox.RemoteImage(spec.Image))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "swetui-", // 12 characters with the suffix: the console's container column
			Labels: map[string]string{
				sandbox.LabelManaged: "true",
				sandbox.LabelRun:     LabelValue(b.cfg.RunID),
				sandbox.LabelEval:    LabelValue(spec.ID),
			},
			Annotations: map[string]string{
				sandbox.LabelOwner:    sandbox.OwnerID(),
				sandbox.LabelDeadline: strconv.FormatInt(deadline.Unix(), 10),
				sandbox.LabelRun:      b.cfg.RunID,
				AnnotationInstance:    spec.InstanceID,
			},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			ShareProcessNamespace:         &yes, // the pause process is PID 1 and reaps what the tests leave
			DNSPolicy:                     corev1.DNSNone,
			DNSConfig:                     &corev1.PodDNSConfig{Nameservers: []string{"127.0.0.1"}}, // nothing listens there
			ActiveDeadlineSeconds:         &active,
			TerminationGracePeriodSeconds: &zero,
			SecurityContext:               &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Volumes:                       volumes,
			Containers: []corev1.Container{{
				Name:            evalContainer,
				Image:           image,
				ImagePullPolicy: corev1.PullPolicy(k.ImagePullPolicy),
				Command:         []string{"sleep", strconv.FormatInt(active+1, 10)},
				WorkingDir:      spec.Workdir,
				Env:             env,
				Resources:       resources,
				SecurityContext: sec,
				VolumeMounts:    mounts,
			}},
		},
	}
	for _, s := range k.ImagePullSecrets {
		pod.Spec.ImagePullSecrets = append(pod.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: s})
	}
	if k.RuntimeClass != "" {
		rc := k.RuntimeClass
		pod.Spec.RuntimeClassName = &rc
	}
	if len(fill) > 0 {
		var fillMounts []corev1.VolumeMount
		for _, m := range mounts[1:] {
			fillMounts = append(fillMounts, corev1.VolumeMount{Name: m.Name, MountPath: "/fill/" + m.Name})
		}
		root := int64(0)
		pod.Spec.InitContainers = []corev1.Container{{
			Name:            fillContainer,
			Image:           image,
			ImagePullPolicy: corev1.PullPolicy(k.ImagePullPolicy),
			Command:         []string{"sh", "-c", strings.Join(fill, " && ")},
			Resources:       resources,
			// Root with just what cp -a needs to keep owners and modes:
			// it copies the image's own files before any evaluation runs.
			SecurityContext: &corev1.SecurityContext{
				AllowPrivilegeEscalation: &no,
				RunAsUser:                &root,
				Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"},
					Add: []corev1.Capability{"CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID"}},
				ReadOnlyRootFilesystem: &yes,
			},
			VolumeMounts: fillMounts,
		}}
	}
	return pod, nil
}

// numericUser reads uid[:gid]; Kubernetes runs a container as a number,
// and an exec cannot choose another user.
func numericUser(u string) (uid, gid *int64, err error) {
	if u == "" {
		return nil, nil, nil
	}
	us, gs, hasGroup := strings.Cut(u, ":")
	n, err := strconv.ParseInt(us, 10, 64)
	if err != nil {
		if us == "root" {
			n = 0
		} else {
			return nil, nil, fmt.Errorf("user %q: a Kubernetes Pod runs as a numeric uid[:gid] (set sandbox.user to one, e.g. \"1000\")", u)
		}
	}
	uid = &n
	if hasGroup {
		g, err := strconv.ParseInt(gs, 10, 64)
		if err != nil {
			return nil, nil, fmt.Errorf("user %q: group %q is not numeric", u, gs)
		}
		gid = &g
	}
	return uid, gid, nil
}

// waitRunning waits until Pod id's evaluation container runs. Waiting to
// be scheduled is queueing, bounded by startTimeout plus the evaluation's
// timeout; a Pod that fails (its image cannot be pulled, it is evicted,
// the node rejects it) is an infrastructure failure naming why.
func (b *Backend) waitRunning(ctx context.Context, id string, spec sandbox.Spec) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout+spec.Timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		gctx, gcancel := context.WithTimeout(ctx, apiTimeout)
		pod, err := b.cs.CoreV1().Pods(b.namespace).Get(gctx, id, metav1.GetOptions{})
		gcancel()
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("pod %s for %s on %s did not start: %w", id, spec.InstanceID, b.endpoint, context.Cause(ctx))
			}
			return fmt.Errorf("pod %s for %s on %s: %w", id, spec.InstanceID, b.endpoint, err)
		}
		if running, err := podStarted(pod); err != nil {
			return fmt.Errorf("pod %s for %s on %s (image %s): %w", id, spec.InstanceID, b.endpoint, pod.Spec.Containers[0].Image, err)
		} else if running {
			b.mu.Lock()
			b.nodes[id] = pod.Spec.NodeName
			b.mu.Unlock()
			return nil
		}
		select {
		case <-ctx.Done():
			why := "waiting to be scheduled"
			if pod.Spec.NodeName != "" {
				why = "scheduled on " + pod.Spec.NodeName + " but not started"
			}
			return fmt.Errorf("pod %s for %s on %s: %s after %s: %w", id, spec.InstanceID, b.endpoint, why,
				(startTimeout + spec.Timeout).Round(time.Second), context.Cause(ctx))
		case <-tick.C:
		}
	}
}

// errImage marks a Pod whose image cannot be had.
var errImage = errors.New("image cannot be pulled")

// podStarted says whether the evaluation container runs, or why it never
// will.
func podStarted(pod *corev1.Pod) (bool, error) {
	switch pod.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		return false, fmt.Errorf("pod ended (%s %s: %s)", pod.Status.Phase, pod.Status.Reason, pod.Status.Message)
	}
	if pod.DeletionTimestamp != nil {
		return false, errors.New("pod is being deleted")
	}
	for _, cs := range append(append([]corev1.ContainerStatus(nil), pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...) {
		if w := cs.State.Waiting; w != nil {
			switch w.Reason {
			case "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull":
				return false, fmt.Errorf("%w: %s: %s (build and push it with swetui prepare; see sandbox.kubernetes.registry)", errImage, w.Reason, w.Message)
			case "CreateContainerConfigError", "CreateContainerError", "RunContainerError":
				return false, fmt.Errorf("%s: %s", w.Reason, w.Message)
			}
		}
		if t := cs.State.Terminated; t != nil && (cs.Name == evalContainer || t.ExitCode != 0) {
			return false, fmt.Errorf("container %s ended before the evaluation (%s, exit %d): %s", cs.Name, t.Reason, t.ExitCode, t.Message)
		}
		if cs.Name == evalContainer && cs.State.Running != nil {
			return true, nil
		}
	}
	return false, nil
}

// copyIn writes the evaluation's files into the Pod: one tar stream per
// writable folder (the whole root when it is writable), unpacked by tar in
// the Pod.
func (b *Backend) copyIn(ctx context.Context, id string, spec sandbox.Spec) error {
	files := sandbox.SandboxFiles(spec)
	roots := []string{"/"}
	if !b.cfg.Limits.WritableRoot && !spec.WritableRoot {
		roots = sandbox.WritableDirs(spec)
	}
	for _, root := range roots {
		archive, err := sandbox.TarFiles(files, root)
		if err != nil {
			return fmt.Errorf("evaluation %s: %w: %v", spec.ID, sandbox.ErrBadSpec, err)
		}
		if archive == nil {
			continue
		}
		var out bytes.Buffer
		cctx, cancel := context.WithTimeout(ctx, apiTimeout)
		status, err := b.exec(cctx, id, []string{"tar", "-x", "-m", "-o", "-f", "-", "-C", root}, bytes.NewReader(archive), &out)
		cancel()
		if err != nil {
			return fmt.Errorf("copy files into pod %s: %w", id, err)
		}
		if status != 0 {
			return fmt.Errorf("copy files into pod %s: tar exited %d: %s", id, status, strings.TrimSpace(out.String()))
		}
	}
	if len(files) > 0 {
		return fmt.Errorf("evaluation %s: %w: %d files outside the writable folders %v of a read-only root", spec.ID, sandbox.ErrBadSpec, len(files), roots)
	}
	return nil
}

// Execute drives the evaluation in the running Pod.
func (b *Backend) Execute(ctx context.Context, id string, spec sandbox.Spec, onLog func([]byte), res *sandbox.Result) {
	b.drv.Drive(ctx, spec, podProcs{b: b, id: id}, onLog, res)
	b.mu.Lock()
	delete(b.nodes, id)
	b.mu.Unlock()
}

// podProcs are one Pod's processes, as the Driver runs them.
type podProcs struct {
	b  *Backend
	id string
}

// Exec runs cmd in the evaluation container under the file-size limit
// (RLIMIT_FSIZE: Kubernetes has no ulimit setting). A user other than the
// Pod's cannot be chosen per process: podFor runs the container as it.
func (p podProcs) Exec(ctx context.Context, cmd []string, _ string, out io.Writer) (int, error) {
	if mb := p.b.cfg.Limits.DiskMB; mb > 0 {
		cmd = append([]string{"bash", "-c", fmt.Sprintf(`ulimit -f %d && exec "$@"`, mb<<10), "swetui"}, cmd...)
	}
	return p.b.exec(ctx, p.id, cmd, nil, out)
}

// Kill deletes the Pod at once: its processes end, and with them the
// exec streams.
func (p podProcs) Kill(ctx context.Context) error {
	if err := p.b.Remove(ctx, p.id); err != nil {
		return fmt.Errorf("kill pod %s: %w", p.id, err)
	}
	return nil
}

// exec runs cmd in Pod id's evaluation container through the API server
// (WebSocket, else SPDY), stdout and stderr both to out, and returns the
// exit status the kubelet reported.
func (b *Backend) exec(ctx context.Context, id string, cmd []string, stdin io.Reader, out io.Writer) (int, error) {
	req := b.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(b.namespace).Name(id).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{
			Container: evalContainer, Command: cmd, Stdin: stdin != nil, Stdout: true, Stderr: true,
		}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(b.rest, "GET", req.URL().String())
	if err != nil {
		return -1, fmt.Errorf("exec in pod %s: %w", id, err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(b.rest, "POST", req.URL())
	if err != nil {
		return -1, fmt.Errorf("exec in pod %s: %w", id, err)
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return -1, fmt.Errorf("exec in pod %s: %w", id, err)
	}
	w := &syncWriter{w: out}
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: w, Stderr: w})
	var exit utilexec.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &exit) && exit.Exited():
		return exit.ExitStatus(), nil
	default:
		return -1, fmt.Errorf("exec %s in pod %s on %s: %w", cmd[0], id, b.endpoint, err)
	}
}

// syncWriter serialises the two streams' writes into one output.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// Remove deletes Pod id with no grace period; one already gone is removed.
func (b *Backend) Remove(ctx context.Context, id string) error {
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

// shq quotes s for sh.
func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
