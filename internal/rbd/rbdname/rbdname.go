// Package rbdname is where RBD volumes and snapshots live on Ceph: the image of a volume,
// the RBD snapshot of a CSI snapshot and the group of a group snapshot, named from the UIDs
// their IDs carry, and the member snapshots group snapshots cut. The layout is
// defined once, here, for the controller, the changed-block service (which opens snapshots
// straight from their IDs) and the tests.
package rbdname

// Prefixes of the names the driver gives to what it creates.
const (
	VolumePrefix   = "csi-vol-"
	SnapshotPrefix = "csi-snap-"
	// ClonePrefix marks the transient snapshot a PVC-PVC clone cuts of its source.
	ClonePrefix = "csi-clone-"
)

// Image is the RBD image of the volume whose ID ends in uid.
func Image(uid string) string { return VolumePrefix + uid }

// Snapshot is the RBD snapshot of the CSI snapshot whose ID ends in snapUID.
func Snapshot(snapUID string) string { return SnapshotPrefix + snapUID }

// CloneSnapshot is the transient snapshot of a clone's source, named after the new volume, so
// that a retry finds its own.
func CloneSnapshot(uid string) string { return ClonePrefix + uid }
