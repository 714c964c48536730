// Package owner names the Kubernetes objects (PV, PVC, VolumeSnapshot) and the cluster a Ceph
// image or subvolume belongs to, in the metadata keys ceph-csi writes, so its tools and
// monoceph's inventory can attribute every object.
package owner

import (
	"maps"
	"slices"
)

// The keys are the CreateVolume/CreateSnapshot parameters the sidecars add with
// --extra-create-metadata, stored under their own names, as ceph-csi does
// (internal/util/k8s/parameters.go); the cluster name is ceph-csi's clusterNameKey
// (internal/rbd/rbd_util.go, internal/cephfs/core/metadata.go).
const (
	PVName              = "csi.storage.k8s.io/pv/name"
	PVCName             = "csi.storage.k8s.io/pvc/name"
	PVCNamespace        = "csi.storage.k8s.io/pvc/namespace"
	SnapshotName        = "csi.storage.k8s.io/volumesnapshot/name"
	SnapshotNamespace   = "csi.storage.k8s.io/volumesnapshot/namespace"
	SnapshotContentName = "csi.storage.k8s.io/volumesnapshotcontent/name"
	ClusterName         = "csi.ceph.com/cluster/name"
)

// VolumeKeys and SnapshotKeys are the parameters copied onto volumes and snapshots.
var (
	VolumeKeys   = []string{PVName, PVCName, PVCNamespace}
	SnapshotKeys = []string{SnapshotName, SnapshotNamespace, SnapshotContentName}
)

// Keys is a set of ownership keys and their values.
type Keys map[string]string

// FromParams picks keys out of a request's parameters and adds the cluster name; empty values
// are left out (a sidecar without --extra-create-metadata passes none).
func FromParams(params map[string]string, keys []string, cluster string) Keys {
	out := Keys{}
	for _, k := range keys {
		if v := params[k]; v != "" {
			out[k] = v
		}
	}
	if cluster != "" {
		out[ClusterName] = cluster
	}
	return out
}

// Writes returns what must be written so that have carries want. Keys are never removed. With
// overwrite (a create, whose request is the truth) a different value is replaced; without it
// (a backfill, or a volume taken over from ceph-csi) only missing keys are added, so the values
// ceph-csi or an earlier create wrote stay.
func Writes(have, want Keys, overwrite bool) Keys {
	out := Keys{}
	for k, v := range want {
		old, ok := have[k]
		if !ok || (overwrite && old != v) {
			out[k] = v
		}
	}
	return out
}

// Sorted returns the keys of k in order, so writes happen in a stable order.
func (k Keys) Sorted() []string { return slices.Sorted(maps.Keys(k)) }
