// Package node is the CSI Node service of RBD volumes: it attaches images with the mounter a
// volume asks for (internal/rbd/attach), formats and mounts them at the staging path, bind
// mounts them into pods, grows their filesystems and reports their usage and health.
//
// NodeStageVolume leaves a small JSON record next to the staging path (<path>.monoceph.json)
// that names everything it set up: the mounter, the device, the FUSE directory. Every
// later call (and a restarted plugin) finds what to undo or inspect there, never from the
// request, which may come from a CO that has forgotten the details. A per-volume directory
// under Options.StateDir holds the fuse mounter's mount point and a link back to the record, so
// calls that carry only a volume ID and a path (expand, stats) find it too.
package node
