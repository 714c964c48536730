// Package cephfs is the CSI Controller service for CephFS volumes: one subvolume of the mgr
// volumes module per volume, subvolume snapshots, clones and quota expansion, made idempotent
// and crash-safe by the journal in the filesystem's metadata pool. Shallow read-only volumes
// are served from snapshots without copying data, guarded by reference trackers.
//
// Ceph layout (group from the StorageClass, the cluster map, or "csi"):
//
//	subvolume  <group>/csi-vol-<UID>                     the volume
//	snapshot   <group>/csi-vol-<UID>@csi-snap-<UID'>     one per CSI snapshot
//	snapshot   <group>/csi-vol-<src>@csi-clone-<UID>     transient, while a PVC-PVC clone copies
//	journal    <metadata pool>/<namespace>/monoceph.journal.*
package cephfs
