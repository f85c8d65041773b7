//go:build tools

// Package tools pins the Kubernetes commands .ci/k8s/build.sh builds for the
// test cluster; the module is separate so swetui's own go.mod stays small.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
