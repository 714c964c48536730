package snapmeta

import (
	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/rbd/rbdcaps"
	"github.com/monoceph/monoceph/internal/rbd/rbdname"
	"github.com/monoceph/monoceph/internal/volid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A snapshot ID names either a snapshot of its own, reached by its name, or the member of a
// group snapshot: a snapshot librbd named in the group snapshot namespace, which name lookups
// do not reach. Members are found through their group (rbdname.MemberSnapshot) and used by
// snapshot ID: the target is opened at it (rbd_snap_set_by_id, every release), and a diff
// from it needs rbd_diff_iterate3 (Ceph 18.2.5+, 19.2.3+), looked up in the loaded librbd.

// openTarget opens the image of snapshot t read-only at t, and records t's snapshot ID.
func openTarget(io *rados.IOContext, t volid.RBDSnapshot) (*snapImage, error) {
	image := rbdname.Image(t.UID)
	if !t.Member {
		img, err := openSnapImage(io, image, rbdname.Snapshot(t.SnapUID))
		if err != nil {
			return nil, err
		}
		if img.at, err = img.snapID(rbdname.Snapshot(t.SnapUID)); err != nil {
			img.close()
			return nil, err
		}
		return img, nil
	}
	id, err := memberSnapID(io, t)
	if err != nil {
		return nil, err
	}
	img, err := openImageAt(io, image, id)
	if err != nil {
		return nil, err
	}
	img.at = id
	return img, nil
}

// memberSnapID finds the snapshot ID of a group snapshot member; a missing image or member is
// ENOENT.
func memberSnapID(io *rados.IOContext, s volid.RBDSnapshot) (uint64, error) {
	img, err := rbd.OpenImageReadOnly(io, rbdname.Image(s.UID), rbd.NoSnapshot)
	if err != nil {
		return 0, err
	}
	defer img.Close()
	info, ok, err := rbdname.MemberSnapshot(img, s.PoolID, s.SnapUID)
	if err == nil && !ok {
		err = ceph.NewError("find member", ceph.ErrNotFound, s.String()+" has no snapshot")
	}
	return info.Id, err
}

// baseSnapshot checks that base is a snapshot of the target's image taken before the target
// (img is open at it), and returns where the diff starts.
func baseSnapshot(io *rados.IOContext, img *snapImage, base, target volid.RBDSnapshot) (fromSnap, error) {
	var from fromSnap
	var bid uint64
	var err error
	if base.Member {
		bid, err = memberSnapID(io, base)
		from.id = bid
	} else {
		// by ID too where librbd diffs so (diff picks): no second lookup by name there
		from.name = rbdname.Snapshot(base.SnapUID)
		bid, err = img.snapID(from.name)
		from.id = bid
	}
	if ceph.Is(err, ceph.ErrNotFound) {
		return from, status.Errorf(codes.NotFound, "base snapshot %s does not exist", base.String())
	}
	if err != nil {
		return from, err
	}
	if bid > img.at {
		return from, status.Errorf(codes.InvalidArgument, "base snapshot %s was taken after target snapshot %s", base.String(), target.String())
	}
	if base.Member && !rbdcaps.Has(rbdcaps.DiffIterate3) {
		// the spec's answer when changed block tracking is not available: back up in full
		return from, status.Errorf(codes.FailedPrecondition, "changed blocks since %s, the member of a group snapshot, need librbd's "+
			"rbd_diff_iterate3 (Ceph 18.2.5, 19.2.3 or later), which this driver's librbd lacks: back up the allocated blocks of %s instead",
			base.String(), target.String())
	}
	return from, nil
}
