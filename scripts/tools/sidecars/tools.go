//go:build tools

// Package tools pins the kubernetes-csi sidecars and the snapshot controller the end-to-end
// tests run next to the driver; the Makefile builds them into bin/.
//
// external-provisioner v6 and external-resizer v2 read VolumeAttributesClasses from
// storage.k8s.io/v1 (GA in Kubernetes 1.34; v1beta1 is off there by default, and the v5
// provisioner and v1 resizer read only that). All of them are built on Kubernetes v0.36.1
// libraries.
package tools

import (
	_ "github.com/kubernetes-csi/external-attacher/v4/cmd/csi-attacher"
	_ "github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner"
	_ "github.com/kubernetes-csi/external-resizer/v2/cmd/csi-resizer"
	_ "github.com/kubernetes-csi/external-snapshotter/v8/cmd/csi-snapshotter"
	_ "github.com/kubernetes-csi/external-snapshotter/v8/cmd/snapshot-controller"
)
