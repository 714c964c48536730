//go:build tools

// Package tools pins the kubernetes-csi sidecars and the snapshot controller the end-to-end
// tests run next to the driver; the Makefile builds them into bin/.
//
// MVS lifts the provisioner's and resizer's Kubernetes libraries (v0.33) to the snapshotter's
// (v0.36.1). go.mod therefore also pins, as indirect requirements, sigs.k8s.io/gateway-api
// v1.4.0 and controller-runtime v0.22.1 (v1.3.0 is built on structured-merge-diff v4, which
// client-go v0.36 no longer uses) and k8s.io/csi-translation-lib v0.36.1 to match.
// sigs.k8s.io/sig-storage-lib-external-provisioner/v11 v11.0.1 has no checksum database entry
// (404): its go.sum lines were taken with GONOSUMDB and match external-provisioner v5.3.0's own
// go.sum.
package tools

import (
	_ "github.com/kubernetes-csi/external-provisioner/v5/cmd/csi-provisioner"
	_ "github.com/kubernetes-csi/external-resizer/cmd/csi-resizer"
	_ "github.com/kubernetes-csi/external-snapshotter/v8/cmd/csi-snapshotter"
	_ "github.com/kubernetes-csi/external-snapshotter/v8/cmd/snapshot-controller"
)
