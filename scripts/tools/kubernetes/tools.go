//go:build tools

// Package tools pins the Kubernetes binaries: kube-apiserver for the tests of the
// Kubernetes-facing snapshot metadata service (TokenReview, SubjectAccessReview, CRDs),
// kube-controller-manager for the end-to-end tests (service accounts, namespace deletion,
// Deployments), and kubectl for the README's install the end-to-end test runs; the Makefile
// builds them into bin/.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
