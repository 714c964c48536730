package cephfs

import "github.com/monoceph/monoceph/internal/volid"

// volumeID is a volume ID of either format: monoceph's own (fv1:…) or a ceph-csi handle of a
// volume ceph-csi created (0001-…); volid.Either says how the two live side by side. Its
// Location is the filesystem's FSCID.
type volumeID = volid.Either[volid.CephFSVolume]

// snapshotID is a snapshot ID of either format. Snapshots of ceph-csi volumes are always
// ceph-csi handles (see cephcsi_snapshot.go).
type snapshotID = volid.Either[volid.CephFSSnapshot]

func parseVolumeID(s string) (volumeID, error) {
	return volid.ParseEither(s, volid.ParseCephFSVolume)
}

func parseSnapshotID(s string) (snapshotID, error) {
	return volid.ParseEither(s, volid.ParseCephFSSnapshot)
}
