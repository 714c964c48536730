//go:build tools

// Package tools pins Helm, which the end-to-end tests use to lint, template and install the
// driver's chart against the local kube-apiserver; the Makefile builds it into bin/.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
