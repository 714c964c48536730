//go:build tools

// Package tools pins etcd, the store of the kube-apiserver the snapshot metadata tests run
// against; the Makefile builds it into bin/.
package tools

import _ "go.etcd.io/etcd/server/v3"
