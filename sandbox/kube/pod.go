package kube

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/swetui/swetui/sandbox"
)

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

// Create makes the evaluation's Pod, waits until it runs and copies the
// files in. The returned id is the Pod's name.
func (b *Backend) Create(ctx context.Context, spec sandbox.Spec, d *sandbox.Durations) (string, error) {
	if err := sandbox.CheckSpec(spec); err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("create pod for %s: %w", spec.ID, err)
	}
	t0 := time.Now()
	pod, err := b.podFor(spec, time.Now())
	if err != nil {
		return "", err
	}
	cctx, cancel := sandbox.UntilLost(ctx, apiTimeout)
	made, err := b.cs.CoreV1().Pods(b.namespace).Create(cctx, pod, metav1.CreateOptions{})
	cancel()
	if err != nil {
		return "", fmt.Errorf("create pod for %s in %s: %w", spec.InstanceID, b.endpoint, err)
	}
	id := made.Name
	if err := ctx.Err(); err != nil {
		return id, fmt.Errorf("create pod for %s in %s: %w", spec.InstanceID, b.endpoint, err)
	}
	if err := b.waitRunning(ctx, id, spec); err != nil {
		return id, callerGaveUp(ctx, err)
	}
	if err := b.copyIn(ctx, id, spec); err != nil {
		return id, callerGaveUp(ctx, err)
	}
	d.Create = time.Since(t0)
	return id, nil
}

// callerGaveUp is err, marked with the caller's deadline or cancellation
// when that is what ended it, so the caller tells its own giving up from a
// failing cluster. client-go's rate limiter refuses a request in the
// instant after the deadline, before ctx says so, with an error of its own.
func callerGaveUp(ctx context.Context, err error) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return err
	}
	cause := context.Cause(ctx)
	if d, ok := ctx.Deadline(); cause == nil && ok && !time.Now().Before(d) {
		cause = context.DeadlineExceeded
	}
	if cause == nil {
		return err
	}
	return fmt.Errorf("%w (%w)", err, cause)
}

// podFor is the Pod of spec.
// sessionInit is a session Pod's PID 1: it ignores every signal it may,
// and waits on a sleep of the Pod's life ($0) again and again, reaping each
// orphan as it exits (the shell's wait takes any child).
const sessionInit = `trap '' HUP INT QUIT TERM USR1 USR2 PIPE ALRM
while :; do sleep "$0" & wait; done`

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
	// An evaluation's container idles in a sleep, the Pod's pause process
	// its PID 1 (a shared PID namespace), reaping what the tests leave. A
	// session's own PID namespace has a reaping loop for its PID 1, which
	// no process of the agent's can signal (the kernel delivers nothing
	// from inside to a PID 1 that does not handle it, and it ignores
	// them all): kill -9 -1 ends the agent's processes and the loop's
	// sleep, never the sandbox.
	share, command := &yes, []string{"sleep", strconv.FormatInt(active+1, 10)}
	if spec.Script == sandbox.SessionScript {
		share, command = &no, []string{"/bin/sh", "-c", sessionInit, strconv.FormatInt(active+1, 10)}
	}
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
			ShareProcessNamespace:         share,
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
				Command:         command,
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

// shq quotes s for sh.
func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
