//go:build tools

// Package kube pins the kube-apiserver build for hack/deps.sh.
package kube

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
