package kube

import (
	"context"
	"fmt"
	"math"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

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
