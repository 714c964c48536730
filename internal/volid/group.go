package volid

import "fmt"

// RBDGroupSnapshot locates an RBD group snapshot: the pool and RADOS namespace its group,
// journal reservation and member images share, and its UID.
type RBDGroupSnapshot struct {
	ClusterID string
	PoolID    int64
	Namespace string
	UID       string
}

func (g RBDGroupSnapshot) String() string {
	return fmt.Sprintf("rg1:%s:%d:%s:%s", g.ClusterID, g.PoolID, g.Namespace, g.UID)
}

// Member is the snapshot ID of the group snapshot's member of volume v.
func (g RBDGroupSnapshot) Member(v RBDVolume) RBDSnapshot {
	return RBDSnapshot{RBDVolume: v, SnapUID: g.UID, Member: true}
}

// Group is the group snapshot a member snapshot belongs to (its image shares the group's pool
// and namespace); ok is false for a snapshot of its own.
func (s RBDSnapshot) Group() (g RBDGroupSnapshot, ok bool) {
	return RBDGroupSnapshot{ClusterID: s.ClusterID, PoolID: s.PoolID, Namespace: s.Namespace, UID: s.SnapUID}, s.Member
}

// ParseRBDGroupSnapshot decodes an RBD group snapshot ID.
func ParseRBDGroupSnapshot(s string) (RBDGroupSnapshot, error) {
	p, err := split(s, "rg1", 4)
	if err != nil {
		return RBDGroupSnapshot{}, malformed("RBD group snapshot", s)
	}
	v, err := rbdVolume(p)
	if err != nil {
		return RBDGroupSnapshot{}, malformed("RBD group snapshot", s)
	}
	return RBDGroupSnapshot(v), nil
}

// CephFSGroupSnapshot locates a CephFS group snapshot's reservation, in the journal of its
// filesystem. Its members are ordinary CephFS snapshots (fs1 IDs).
type CephFSGroupSnapshot struct {
	ClusterID string
	FSCID     int64
	UID       string
}

func (g CephFSGroupSnapshot) String() string {
	return fmt.Sprintf("fg1:%s:%d:%s", g.ClusterID, g.FSCID, g.UID)
}

// ParseCephFSGroupSnapshot decodes a CephFS group snapshot ID.
func ParseCephFSGroupSnapshot(s string) (CephFSGroupSnapshot, error) {
	p, err := split(s, "fg1", 3)
	if err != nil {
		return CephFSGroupSnapshot{}, malformed("CephFS group snapshot", s)
	}
	v, err := cephfsVolume(p)
	if err != nil {
		return CephFSGroupSnapshot{}, malformed("CephFS group snapshot", s)
	}
	return CephFSGroupSnapshot(v), nil
}
