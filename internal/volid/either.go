package volid

// Own is the constraint of Either: one of monoceph's own volume or snapshot ID types. Its
// unexported methods keep other types out, so an Either always holds an ID this package parses.
type Own interface {
	RBDVolume | RBDSnapshot | CephFSVolume | CephFSSnapshot
	String() string
	cluster() string
	location() int64
}

// Either is a volume or snapshot ID of either format: monoceph's own (rv1:…, fs1:…) or the
// handle of a volume or snapshot ceph-csi created (0001-…), which lives side by side with
// monoceph's in the same pools. Exactly one of Own and CSI is set: CSI is nil for monoceph's
// own IDs, so an RPC branches once, on CSI, and the branch it takes needs no further checks.
type Either[M Own] struct {
	Own M
	CSI *Handle
}

// ParseEither decodes s as a ceph-csi handle when it has the handle's prefix (no monoceph ID
// has), and with parseOwn otherwise: the prefix decides, so a malformed handle is reported as
// such rather than as a malformed monoceph ID.
func ParseEither[M Own](s string, parseOwn func(string) (M, error)) (Either[M], error) {
	if IsHandle(s) {
		h, err := ParseHandle(s)
		if err != nil {
			return Either[M]{}, err
		}
		return Either[M]{CSI: &h}, nil
	}
	m, err := parseOwn(s)
	if err != nil {
		return Either[M]{}, err
	}
	return Either[M]{Own: m}, nil
}

// IsCephCSI reports whether the ID is a ceph-csi handle.
func (e Either[M]) IsCephCSI() bool { return e.CSI != nil }

// String encodes the ID in the format it was parsed from.
func (e Either[M]) String() string {
	if e.CSI != nil {
		return e.CSI.String()
	}
	return e.Own.String()
}

// ClusterID is the cluster the ID names (both formats carry it).
func (e Either[M]) ClusterID() string {
	if e.CSI != nil {
		return e.CSI.ClusterID
	}
	return e.Own.cluster()
}

// Location is what both formats encode next to the cluster ID: the RBD pool ID, or the CephFS
// filesystem ID (FSCID).
func (e Either[M]) Location() int64 {
	if e.CSI != nil {
		return e.CSI.LocationID
	}
	return e.Own.location()
}

// cluster and location implement Own; the snapshot types inherit them from the volume they embed.
func (v RBDVolume) cluster() string    { return v.ClusterID }
func (v RBDVolume) location() int64    { return v.PoolID }
func (v CephFSVolume) cluster() string { return v.ClusterID }
func (v CephFSVolume) location() int64 { return v.FSCID }
