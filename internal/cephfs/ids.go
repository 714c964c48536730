package cephfs

import (
	"github.com/monoceph/monoceph/internal/cephcsi"
	"github.com/monoceph/monoceph/internal/volid"
)

// volumeID is a volume ID of either format: monoceph's own (fv1:…) or a ceph-csi handle of a
// volume ceph-csi created (0001-…), which lives side by side with monoceph's in the same pools.
type volumeID struct {
	mono volid.CephFSVolume
	csi  *cephcsi.Handle
}

// snapshotID is a snapshot ID of either format. Snapshots of ceph-csi volumes are always
// ceph-csi handles (see cephcsi_snapshot.go).
type snapshotID struct {
	mono volid.CephFSSnapshot
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
	v, err := volid.ParseCephFSVolume(s)
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
	v, err := volid.ParseCephFSSnapshot(s)
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

// fscid is the filesystem a volume ID names.
func (v volumeID) fscid() int64 {
	if v.csi != nil {
		return v.csi.LocationID
	}
	return v.mono.FSCID
}

func (s snapshotID) fscid() int64 {
	if s.csi != nil {
		return s.csi.LocationID
	}
	return s.mono.FSCID
}
