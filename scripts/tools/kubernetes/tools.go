//go:build tools

// Package tools pins the Kubernetes control plane binaries: kube-apiserver for the tests of the
// Kubernetes-facing snapshot metadata service (TokenReview, SubjectAccessReview, CRDs), and
// kube-controller-manager for the end-to-end tests (service accounts, namespace deletion,
// Deployments); the Makefile builds them into bin/.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
)
