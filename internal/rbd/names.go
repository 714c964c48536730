package rbd

// ImageName is the RBD image of the volume whose ID ends in uid, and SnapshotName the RBD
// snapshot of the CSI snapshot whose ID ends in snapUID. Exported for the changed-block
// service (internal/snapmeta), which opens snapshots straight from their IDs; the layout
// itself stays defined once, here.
func ImageName(uid string) string { return imageName(uid) }

// SnapshotName: see ImageName.
func SnapshotName(snapUID string) string { return snapName(snapUID) }
