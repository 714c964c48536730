// Package rbd is the CSI Controller service for RBD block volumes: images, snapshots, clones and
// expansion, made idempotent and crash-safe by the journal.
//
// Ceph layout of one volume and its snapshots (pool and RADOS namespace from the StorageClass):
//
//	image        csi-vol-<UID>                 the volume
//	snapshot     csi-vol-<UID>@csi-snap-<UID'> one per CSI snapshot (clone v2: no protection)
//	snapshot     csi-vol-<src>@csi-clone-<UID> transient, while a PVC-PVC clone is cut
//	metadata     monoceph.deleted=true          a deleted volume kept for its snapshots
//
// A volume deleted while CSI snapshots of it exist stays, hidden, until its last snapshot is
// deleted: Pacific's librbd cannot clone from a parent in the RBD trash (rbd_clone3 takes a
// parent name), and keeping the image is what lets one RBD snapshot serve as one CSI snapshot
// (the incumbent driver cuts two snapshots and a clone per CSI snapshot for the same reason).
// Images whose only remaining snapshots are in the trash namespace (kept by clones) go to the
// RBD trash and are purged when their last clone is deleted.
package rbd
