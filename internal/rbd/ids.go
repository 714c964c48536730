package rbd

import (
	"github.com/monoceph/monoceph/internal/cephcsi"
	"github.com/monoceph/monoceph/internal/volid"
)

// volumeID is a volume ID of either format: monoceph's own (rv1:…) or a ceph-csi handle of a
// volume ceph-csi created (0001-…), which lives side by side with monoceph's in the same pools.
type volumeID struct {
	mono volid.RBDVolume
	csi  *cephcsi.Handle
}

// snapshotID is a snapshot ID of either format. Snapshots of ceph-csi volumes are always
// ceph-csi handles (see cephcsi_snapshot.go).
type snapshotID struct {
	mono volid.RBDSnapshot
	csi  *cephcsi.Handle
}

func parseVolumeID(s string) (volumeID, error) {
	if cephcsi.IsHandle(s) {
		h, err := cephcsi.ParseHandle(s)
		if err != nil {
			return volumeID{}, err
		}
		return volumeID{csi: &h}, nil
	}
	v, err := volid.ParseRBDVolume(s)
	return volumeID{mono: v}, err
}

func parseSnapshotID(s string) (snapshotID, error) {
	if cephcsi.IsHandle(s) {
		h, err := cephcsi.ParseHandle(s)
		if err != nil {
			return snapshotID{}, err
		}
		return snapshotID{csi: &h}, nil
	}
	v, err := volid.ParseRBDSnapshot(s)
	return snapshotID{mono: v}, err
}

func (v volumeID) String() string {
	if v.csi != nil {
		return v.csi.String()
	}
	return v.mono.String()
}

func (s snapshotID) String() string {
	if s.csi != nil {
		return s.csi.String()
	}
	return s.mono.String()
}

// attachKey names the volume's attachment object (attachment.Key): monoceph's UID, or the
// UUID of ceph-csi's handle, which no UID can equal.
func (v volumeID) attachKey() string {
	if v.csi != nil {
		return v.csi.UUID
	}
	return v.mono.UID
}

func (v volumeID) clusterID() string {
	if v.csi != nil {
		return v.csi.ClusterID
	}
	return v.mono.ClusterID
}

func (s snapshotID) clusterID() string {
	if s.csi != nil {
		return s.csi.ClusterID
	}
	return s.mono.ClusterID
}
