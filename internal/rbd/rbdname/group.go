package rbdname

import "github.com/ceph/go-ceph/rbd"

// Prefixes of the RBD group and group snapshot of a CSI group snapshot.
const (
	GroupPrefix         = "csi-group-"
	GroupSnapshotPrefix = "csi-gsnap-"
)

// Group is the RBD group of the CSI group snapshot whose ID ends in uid: one group per group
// snapshot, in the pool and namespace of its member images, holding that one group snapshot.
// Images are members only while the snapshot is cut (an image can be in one group at a time).
func Group(uid string) string { return GroupPrefix + uid }

// GroupSnapshot is the RBD group snapshot of the CSI group snapshot whose ID ends in uid.
func GroupSnapshot(uid string) string { return GroupSnapshotPrefix + uid }

// MemberSnapshot finds the snapshot that the group snapshot uid (its group in pool poolID)
// cut of img. librbd names member snapshots itself (.group.<pool>_<group id>_<snap id>) in
// the group snapshot namespace, where name lookups do not reach: they are told apart by their
// group and group snapshot names, and used by snapshot ID.
func MemberSnapshot(img *rbd.Image, poolID int64, uid string) (rbd.SnapInfo, bool, error) {
	snaps, err := img.GetSnapshotNames()
	if err != nil {
		return rbd.SnapInfo{}, false, err
	}
	for _, s := range snaps {
		ok, err := IsMember(img, s.Id, poolID, uid)
		if err != nil {
			return rbd.SnapInfo{}, false, err
		}
		if ok {
			return s, true, nil
		}
	}
	return rbd.SnapInfo{}, false, nil
}

// IsMember reports whether snapshot id of img was cut by the group snapshot uid.
func IsMember(img *rbd.Image, id uint64, poolID int64, uid string) (bool, error) {
	kind, err := img.GetSnapNamespaceType(id)
	if err != nil || kind != rbd.SnapNamespaceTypeGroup {
		return false, err
	}
	ns, err := img.GetSnapGroupNamespace(id)
	if err != nil {
		return false, err
	}
	return ns.GroupName == Group(uid) && ns.GroupSnapName == GroupSnapshot(uid) && int64(ns.Pool) == poolID, nil
}
