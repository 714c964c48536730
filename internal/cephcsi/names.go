package cephcsi

import "github.com/monoceph/monoceph/internal/volid"

// UUIDOf returns the UUID a ceph-csi image, subvolume or snapshot name ends in (whatever its
// prefix), or "" when it ends in none: ceph-csi names every object <prefix><uuid>.
func UUIDOf(name string) string {
	if len(name) < volid.UUIDLen {
		return ""
	}
	u := name[len(name)-volid.UUIDLen:]
	if !volid.ValidUUID(u) {
		return ""
	}
	return u
}
