//go:build tools

// Package kube pins the Kubernetes builds: kube-apiserver for hack/deps.sh,
// and the node and the rest of the control plane for hack/cluster.sh.
package kube

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
