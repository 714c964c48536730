package rbd

import (
	"context"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/controller"
	"github.com/monoceph/monoceph/internal/faultpoint"
	"github.com/monoceph/monoceph/internal/journal"
	"github.com/monoceph/monoceph/internal/radosop"
	"github.com/monoceph/monoceph/internal/rbd/rbdcaps"
	"github.com/monoceph/monoceph/internal/rbd/rbdname"
	"github.com/monoceph/monoceph/internal/volid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// metaCopied marks an image restored by copying a group snapshot member once the copy is
// complete: a copy outlives an RPC whose deadline passed (its operation lock lingers), and the
// CO's retry must find it done rather than start over.
const (
	metaCopied     = "monoceph.copied"
	metaCopiedTrue = "true"
)

// memberSnapshot finds the snapshot a group snapshot member ID names: NOT_FOUND when its
// image or the snapshot is gone.
func memberSnapshot(ctx context.Context, parent radosop.Location, s volid.RBDSnapshot) (rbd.SnapInfo, error) {
	what := "source snapshot " + s.String()
	return radosop.With(ctx, parent, "inspect "+what, func(io *rados.IOContext) (rbd.SnapInfo, error) {
		img, err := rbd.OpenImageReadOnly(io, rbdname.Image(s.UID), rbd.NoSnapshot)
		if isNotFound(err) {
			return rbd.SnapInfo{}, controller.NotFoundf("%s does not exist", what)
		}
		if err != nil {
			return rbd.SnapInfo{}, err
		}
		defer img.Close()
		info, ok, err := rbdname.MemberSnapshot(img, s.PoolID, s.SnapUID)
		if err == nil && !ok {
			err = controller.NotFoundf("%s does not exist", what)
		}
		return info, err
	})
}

// restoreMember makes a new volume from a group snapshot member. A clone needs librbd's clone
// by snapshot ID (rbd_clone4, Ceph 19.2+): member snapshots live in the group snapshot
// namespace, which clones by name cannot reach. Where the loaded library lacks it (Pacific,
// Reef), the member is copied (rbd_copy2 from the image opened at the snapshot's ID). Deep
// copy is never used: from a group snapshot it aborts the process on Pacific.
func (c *Controller) restoreMember(ctx context.Context, dst radosop.Location, uid string, size uint64, params volumeParams, s volid.RBDSnapshot) error {
	what := "source snapshot " + s.String()
	pool, err := poolByID(ctx, dst.Conn, s.PoolID)
	if err != nil {
		return orNotFound(err, what)
	}
	parent := radosop.Location{Conn: dst.Conn, Pool: pool, Namespace: s.Namespace}
	info, err := memberSnapshot(ctx, parent, s)
	if err != nil {
		return err
	}
	if info.Size > size {
		return status.Errorf(codes.OutOfRange, "requested size %d is smaller than %s (%d bytes)", size, what, info.Size)
	}
	image, child := rbdname.Image(s.UID), rbdname.Image(uid)
	if !rbdcaps.Has(rbdcaps.Clone4) {
		return copyMember(ctx, parent, image, info.Id, dst, child, size, params)
	}
	return c.cloneWith(ctx, parent, dst, child, size, params, func(pio, io *rados.IOContext, opts *rbd.ImageOptions) error {
		// snapshots outside the user namespace cannot be protected: clone v2
		if err := opts.SetUint64(rbd.ImageOptionCloneFormat, 2); err != nil {
			return err
		}
		return rbd.CloneImageByID(pio, image, info.Id, io, child, opts)
	})
}

// copyMember copies the member snapshot snapID of image into a new image child of size bytes
// with the StorageClass's features. rbd_copy2 writes only what the snapshot holds (it skips
// zeroes), so a copy a crash cut short is completed by copying again over it.
func copyMember(ctx context.Context, parent radosop.Location, image string, snapID uint64, dst radosop.Location, child string, size uint64, params volumeParams) error {
	_, err := radosop.WithConn(ctx, dst, "copy "+image+" to "+child, func(r *rados.Conn, io *rados.IOContext) (struct{}, error) {
		st, err := inspect(io, child)
		if err != nil {
			return struct{}{}, err
		}
		if !st.exists {
			opts, err := imageOptions(params.Features, params.DataPool)
			if err != nil {
				return struct{}{}, err
			}
			defer opts.Destroy()
			if err := createOrRepair(io, child, func() error { return rbd.CreateImage(io, child, size, opts) }); err != nil {
				return struct{}{}, err
			}
			faultpoint.Hit("rbd.CreateVolume.copy-created")
		}
		dimg, err := rbd.OpenImage(io, child, rbd.NoSnapshot)
		if err != nil {
			return struct{}{}, err
		}
		defer dimg.Close()
		if v, err := dimg.GetMetadata(metaCopied); err == nil && v == metaCopiedTrue {
			return struct{}{}, nil
		} else if err != nil && !isNotFound(err) {
			return struct{}{}, err
		}
		pio, err := r.OpenIOContext(parent.Pool)
		if err != nil {
			return struct{}{}, err
		}
		defer pio.Destroy()
		pio.SetNamespace(parent.Namespace)
		src, err := rbd.OpenImageReadOnly(pio, image, rbd.NoSnapshot)
		if err != nil {
			return struct{}{}, err
		}
		defer src.Close()
		if err := src.SetSnapByID(snapID); err != nil {
			return struct{}{}, err
		}
		if err := src.Copy2(dimg); err != nil {
			return struct{}{}, err
		}
		faultpoint.Hit("rbd.CreateVolume.copied")
		if err := dropInherited(dimg); err != nil {
			return struct{}{}, err
		}
		return struct{}{}, dimg.SetMetadata(metaCopied, metaCopiedTrue)
	})
	return err
}

// deleteMember answers DeleteSnapshot for a group snapshot member: the spec's INVALID_ARGUMENT
// while its group snapshot exists (members go with DeleteVolumeGroupSnapshot), OK once the
// group snapshot is gone.
func (c *Controller) deleteMember(ctx context.Context, id volid.RBDSnapshot, secrets map[string]string) (*csi.DeleteSnapshotResponse, error) {
	cl, err := c.Cluster(id.ClusterID, codes.FailedPrecondition, "snapshot_id")
	if err != nil {
		return nil, err
	}
	p, gone, err := c.locate(ctx, cl, id.PoolID, id.Namespace, secrets)
	if gone {
		return &csi.DeleteSnapshotResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer p.Conn.Release()
	gid, _ := id.Group()
	rec, err := journal.Get(ctx, p, journal.GroupSnapshot, gid.UID)
	if err != nil {
		return nil, err
	}
	if rec == nil {
		return &csi.DeleteSnapshotResponse{}, nil
	}
	snaps, _, _ := memberSnapshots(*rec, gid)
	for _, s := range snaps {
		if s.GetSnapshotId() == id.String() {
			return nil, status.Errorf(codes.InvalidArgument, "snapshot %s is a member of group snapshot %s: it is deleted with the group snapshot (DeleteVolumeGroupSnapshot)", id.String(), gid.String())
		}
	}
	return &csi.DeleteSnapshotResponse{}, nil
}

// groupMembersIn lists the members of the completed group snapshots whose reservations are at
// p, for ListSnapshots.
func groupMembersIn(ctx context.Context, p radosop.Location, clusterID string, poolID int64, keep func(*csi.Snapshot) bool) ([]*csi.Snapshot, error) {
	recs, err := journal.List(ctx, p, journal.GroupSnapshot)
	if err != nil {
		return nil, err
	}
	var out []*csi.Snapshot
	for _, r := range recs {
		snaps, _, _ := memberSnapshots(r, volid.RBDGroupSnapshot{ClusterID: clusterID, PoolID: poolID, Namespace: p.Namespace, UID: r.UID})
		for _, s := range snaps {
			if keep == nil || keep(s) {
				out = append(out, s)
			}
		}
	}
	return out, nil
}
