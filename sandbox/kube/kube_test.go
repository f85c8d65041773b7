package kube

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/sandbox"
)

func TestParseEndpoint(t *testing.T) {
	tests := []struct {
		endpoint, context, namespace, err string
	}{
		{"k8s:///swetui", "", "swetui", ""},
		{"k8s://prod/evals", "prod", "evals", ""},
		{"k8s://arn:aws:eks:eu-west-1:1:cluster/x/evals", "arn:aws:eks:eu-west-1:1:cluster/x", "evals", ""},
		{"k8s://prod", "", "", "no namespace"},
		{"k8s:///", "", "", "no namespace"},
		{"unix:///var/run/docker.sock", "", "", "want k8s://"},
	}
	for _, tt := range tests {
		c, ns, err := ParseEndpoint(tt.endpoint)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), tt.endpoint) {
				t.Errorf("%s: error %v, want one naming it and saying %q", tt.endpoint, err, tt.err)
			}
			continue
		}
		if err != nil || c != tt.context || ns != tt.namespace {
			t.Errorf("%s: %q %q %v", tt.endpoint, c, ns, err)
		}
	}
}

func TestLabelValue(t *testing.T) {
	tests := []struct{ in, want string }{
		{"full", "full"},
		{"20261202-003000-ab12cd", "20261202-003000-ab12cd"},
		{"my run/2", "myxrunx2-"},
		{"-lead", "xlead-"},
		{strings.Repeat("a", 70), strings.Repeat("a", 54) + "-"},
	}
	for _, tt := range tests {
		got := LabelValue(tt.in)
		if !strings.HasPrefix(got, tt.want) || len(got) > 63 {
			t.Errorf("LabelValue(%q) = %q, want prefix %q, at most 63", tt.in, got, tt.want)
		}
		if got != tt.in && LabelValue(tt.in+"!") == got {
			t.Errorf("LabelValue(%q) and of %q collide", tt.in, tt.in+"!")
		}
	}
}

func TestNumericUser(t *testing.T) {
	tests := []struct {
		in       string
		uid, gid int64 // -1: unset
		err      bool
	}{
		{"", -1, -1, false}, {"1000", 1000, -1, false}, {"1000:1001", 1000, 1001, false},
		{"root", 0, -1, false}, {"swetui", 0, 0, true}, {"1000:staff", 0, 0, true},
	}
	for _, tt := range tests {
		uid, gid, err := numericUser(tt.in)
		if (err != nil) != tt.err {
			t.Errorf("%q: error %v", tt.in, err)
			continue
		}
		if tt.err {
			if !strings.Contains(err.Error(), "numeric") {
				t.Errorf("%q: error %v does not say a number is wanted", tt.in, err)
			}
			continue
		}
		if got := ptr(uid); got != tt.uid {
			t.Errorf("%q: uid %d, want %d", tt.in, got, tt.uid)
		}
		if got := ptr(gid); got != tt.gid {
			t.Errorf("%q: gid %d, want %d", tt.in, got, tt.gid)
		}
	}
}

func ptr(p *int64) int64 {
	if p == nil {
		return -1
	}
	return *p
}

// TestPodConfinement checks the Pod spec an evaluation gets: what the
// cluster is asked to enforce. The integration tests check it is enforced.
func TestPodConfinement(t *testing.T) {
	b := &Backend{cfg: sandbox.BackendConfig{RunID: "my run", Limits: sandbox.Limits{MemoryMB: 512, CPUs: 0.5, TmpMB: 16},
		Kubernetes: config.Kubernetes{Registry: "127.0.0.1:5050", ImagePullPolicy: "Always", ImagePullSecrets: []string{"regcred"}, RuntimeClass: "gvisor"}}}
	spec := sandbox.Spec{ID: "e1", InstanceID: "acme__w-1", Image: "swetui/mini:latest", Workdir: "/testbed", Script: "true",
		Timeout: time.Minute, Env: []string{"A=b=c"}}
	pod, err := b.podFor(spec, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ps := pod.Spec
	c := ps.Containers[0]
	checks := []struct {
		what string
		ok   bool
	}{
		{"no service-account token", ps.AutomountServiceAccountToken != nil && !*ps.AutomountServiceAccountToken},
		{"no service links", ps.EnableServiceLinks != nil && !*ps.EnableServiceLinks},
		{"a DNS that resolves nothing", ps.DNSPolicy == corev1.DNSNone && ps.DNSConfig.Nameservers[0] == "127.0.0.1"},
		{"no host namespaces", !ps.HostNetwork && !ps.HostPID && !ps.HostIPC},
		{"never restarted", ps.RestartPolicy == corev1.RestartPolicyNever},
		{"a deadline of its own", ps.ActiveDeadlineSeconds != nil && *ps.ActiveDeadlineSeconds >= 240},
		{"the runtime class", ps.RuntimeClassName != nil && *ps.RuntimeClassName == "gvisor"},
		{"the pull secret", len(ps.ImagePullSecrets) == 1 && ps.ImagePullSecrets[0].Name == "regcred"},
		{"the image from the registry", c.Image == "127.0.0.1:5050/swetui/mini:latest" && c.ImagePullPolicy == corev1.PullAlways},
		{"capabilities dropped", len(c.SecurityContext.Capabilities.Drop) == 1 && c.SecurityContext.Capabilities.Drop[0] == "ALL" && len(c.SecurityContext.Capabilities.Add) == 0},
		{"no privilege escalation", !*c.SecurityContext.AllowPrivilegeEscalation},
		{"read-only root", *c.SecurityContext.ReadOnlyRootFilesystem},
		{"CPU limit = request", c.Resources.Limits.Cpu().MilliValue() == 500 && c.Resources.Requests.Cpu().MilliValue() == 500},
		{"memory limit = request", c.Resources.Limits.Memory().Value() == 512<<20 && c.Resources.Requests.Memory().Value() == 512<<20},
		{"env split at the first =", len(c.Env) == 1 && c.Env[0].Name == "A" && c.Env[0].Value == "b=c"},
		{"labels", pod.Labels[sandbox.LabelManaged] == "true" && pod.Labels[sandbox.LabelEval] == "e1" && pod.Labels[sandbox.LabelRun] == LabelValue("my run")},
		{"owner and deadline annotations", pod.Annotations[sandbox.LabelOwner] == sandbox.OwnerID() && pod.Annotations[sandbox.LabelDeadline] != "" && pod.Annotations[sandbox.LabelRun] == "my run"},
		{"an init container filling the workdir", len(ps.InitContainers) == 1 && strings.Contains(ps.InitContainers[0].Command[2], "cp -a '/testbed'/.")},
		{"tmp in memory, sized", ps.Volumes[0].EmptyDir.Medium == corev1.StorageMediumMemory && ps.Volumes[0].EmptyDir.SizeLimit.Value() == 16<<20},
	}
	for _, ck := range checks {
		if !ck.ok {
			t.Errorf("pod spec lacks %s", ck.what)
		}
	}
	spec.WritableRoot = true
	if pod, _ := b.podFor(spec, time.Now()); len(pod.Spec.InitContainers) != 0 || *pod.Spec.Containers[0].SecurityContext.ReadOnlyRootFilesystem {
		t.Error("a spec that needs a writable root got a read-only one")
	}
	spec.User = "1000"
	if pod, _ := b.podFor(spec, time.Now()); *pod.Spec.Containers[0].SecurityContext.RunAsUser != 1000 ||
		!*pod.Spec.Containers[0].SecurityContext.RunAsNonRoot {
		t.Error("a numeric user is not run as, non-root")
	}
	spec.User = "swetui"
	if _, err := b.podFor(spec, time.Now()); err == nil || !strings.Contains(err.Error(), "numeric") {
		t.Errorf("a user name: %v", err)
	}
}

func TestPodStarted(t *testing.T) {
	waiting := func(reason string) *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{
			Name: evalContainer, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "m"}}}}}}
	}
	running := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{
		Name: evalContainer, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}}
	evicted := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted", Message: "low on memory"}}
	tests := []struct {
		name    string
		pod     *corev1.Pod
		running bool
		err     string
	}{
		{"pending", &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending}}, false, ""},
		{"creating", waiting("ContainerCreating"), false, ""},
		{"pull failed", waiting("ImagePullBackOff"), false, "swetui prepare"},
		{"running", running, true, ""},
		{"evicted", evicted, false, "Evicted"},
	}
	for _, tt := range tests {
		ok, err := podStarted(tt.pod)
		if ok != tt.running || (err == nil) != (tt.err == "") || (err != nil && !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("%s: %v %v", tt.name, ok, err)
		}
	}
}

// TestFit counts whole Pods on hand-made quotas and nodes.
func TestFit(t *testing.T) {
	q := func(kv ...string) corev1.ResourceQuota {
		hard := corev1.ResourceList{}
		for i := 0; i < len(kv); i += 2 {
			hard[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
		}
		return corev1.ResourceQuota{Spec: corev1.ResourceQuotaSpec{Hard: hard}}
	}
	node := func(cpu, mem, pods string, ready bool) corev1.Node {
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		return corev1.Node{Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem),
				corev1.ResourcePods: resource.MustParse(pods)},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}}}}
	}
	cpu, mem := resource.MustParse("500m"), resource.MustParse("1Gi")
	tests := []struct {
		name   string
		quotas []corev1.ResourceQuota
		nodes  []corev1.Node
		want   int
	}{
		{"nothing known", nil, nil, 0},
		{"one 2-CPU node: 4 half-CPU pods", nil, []corev1.Node{node("2", "16Gi", "110", true)}, 4},
		{"memory binds: 3 Gi holds 3", nil, []corev1.Node{node("8", "3Gi", "110", true)}, 3},
		{"whole pods per node: 2x 1.5 CPU is 2x3, not 6 of 3 CPU summed", nil,
			[]corev1.Node{node("1500m", "16Gi", "110", true), node("1500m", "16Gi", "110", true)}, 6},
		{"a NotReady node holds nothing", nil, []corev1.Node{node("2", "16Gi", "110", true), node("64", "256Gi", "110", false)}, 4},
		{"the quota's limits.cpu", []corev1.ResourceQuota{q("limits.cpu", "3")}, []corev1.Node{node("64", "256Gi", "110", true)}, 6},
		{"the least of the quota's keys", []corev1.ResourceQuota{q("limits.cpu", "8", "limits.memory", "5Gi", "pods", "20")}, nil, 5},
		{"the quota's pods", []corev1.ResourceQuota{q("pods", "2")}, []corev1.Node{node("64", "256Gi", "110", true)}, 2},
		{"rounding down to none still runs one", []corev1.ResourceQuota{q("limits.cpu", "250m")}, nil, 1},
	}
	for _, tt := range tests {
		if got := Fit(tt.quotas, tt.nodes, cpu, mem); got != tt.want {
			t.Errorf("%s: %d, want %d", tt.name, got, tt.want)
		}
	}
}

// lateContext is a context in the instant after its deadline, before its
// timer has fired: what client-go's rate limiter sees when it refuses.
type lateContext struct{ context.Context }

func (lateContext) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }

func TestCallerGaveUp(t *testing.T) {
	limiter := errors.New("client rate limiter Wait returned an error: rate: Wait(n=1) would exceed context deadline")
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name     string
		ctx      context.Context
		err      error
		deadline bool
		canceled bool
	}{
		{"caller waits on", context.Background(), limiter, false, false},
		{"deadline passed, not yet signalled", lateContext{context.Background()}, limiter, true, false},
		{"caller cancelled", cancelled, limiter, false, true},
		{"already the caller's", lateContext{context.Background()}, fmt.Errorf("x: %w", context.DeadlineExceeded), true, false},
	}
	for _, tt := range tests {
		got := callerGaveUp(tt.ctx, tt.err)
		if !errors.Is(got, tt.err) {
			t.Errorf("%s: %v lost %v", tt.name, got, tt.err)
		}
		if errors.Is(got, context.DeadlineExceeded) != tt.deadline || errors.Is(got, context.Canceled) != tt.canceled {
			t.Errorf("%s: %v, want deadline %v, cancelled %v", tt.name, got, tt.deadline, tt.canceled)
		}
	}
}

// A session's Pod has a PID namespace of its own whose PID 1, a reaping
// loop that ignores every signal, keeps it alive (kill -9 -1 from the
// agent cannot end it), and lives as long as the session: its life and a
// minute, not twice it; an evaluation's keeps the pause process as PID 1.
func TestSessionPodKeepsItselfAlive(t *testing.T) {
	b := &Backend{cfg: sandbox.BackendConfig{RunID: "r", Limits: sandbox.Limits{MemoryMB: 512, CPUs: 1}}}
	spec := sandbox.Spec{ID: "s1", Image: "swetui/mini:latest", Workdir: "/testbed", Script: sandbox.SessionScript, Timeout: 10 * time.Minute, User: "1000"}
	pod, err := b.podFor(spec, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	c := pod.Spec.Containers[0]
	if *pod.Spec.ShareProcessNamespace || len(c.Command) != 4 || c.Command[2] != sessionInit || !strings.Contains(sessionInit, "trap '' HUP INT QUIT TERM") {
		t.Errorf("a session's Pod: share %v, command %q", *pod.Spec.ShareProcessNamespace, c.Command)
	}
	if d := time.Duration(*pod.Spec.ActiveDeadlineSeconds) * time.Second; d > 11*time.Minute+2*time.Second {
		t.Errorf("a 10-minute session's Pod lives %s", d)
	}
	if !(sessionProcs{}).InitKeepsAlive() {
		t.Error("a session Pod spares a process besides its PID 1")
	}
	spec.Script = "true"
	if pod, _ := b.podFor(spec, time.Now()); !*pod.Spec.ShareProcessNamespace || pod.Spec.Containers[0].Command[0] != "sleep" {
		t.Errorf("an evaluation's Pod: share %v, command %q", *pod.Spec.ShareProcessNamespace, pod.Spec.Containers[0].Command)
	}
}
