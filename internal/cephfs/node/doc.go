// Package node is the CephFS CSI Node service: NodeStageVolume mounts a subvolume (or, for a
// shallow volume, the directory holding its snapshot) at the staging path with ceph-fuse or
// the kernel client; NodePublishVolume bind-mounts it at target paths; broken FUSE mounts —
// the daemon died, "Transport endpoint is not connected" — are remounted on the next stage or
// publish and by Recover at start-up.
//
// State lives in two places. The staging record, <staging path>.monoceph.json, next to the
// staging path (not inside it, where the mount would cover it), says what is mounted there, how,
// and at which targets it is published. The state directory holds one private directory per
// volume (named by a hash of the volume ID): a link to the record, for calls that carry no
// staging path and for Recover; ceph-fuse's admin socket, log and configuration; key files
// while a mount helper runs; and, for FUSE mounts, the recovery key (see credentials.go).
package node
