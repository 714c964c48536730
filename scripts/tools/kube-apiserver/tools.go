//go:build tools

// Package tools pins kube-apiserver for the tests of the Kubernetes-facing snapshot metadata
// service (TokenReview, SubjectAccessReview, CRDs); the Makefile builds it into bin/.
package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
