package rbd

import "github.com/monoceph/monoceph/internal/volid"

// volumeID is a volume ID of either format: monoceph's own (rv1:…) or a ceph-csi handle of a
// volume ceph-csi created (0001-…); volid.Either says how the two live side by side.
type volumeID = volid.Either[volid.RBDVolume]

// snapshotID is a snapshot ID of either format. Snapshots of ceph-csi volumes are always
// ceph-csi handles (see cephcsi_snapshot.go).
type snapshotID = volid.Either[volid.RBDSnapshot]

func parseVolumeID(s string) (volumeID, error) { return volid.ParseEither(s, volid.ParseRBDVolume) }

func parseSnapshotID(s string) (snapshotID, error) {
	return volid.ParseEither(s, volid.ParseRBDSnapshot)
}
