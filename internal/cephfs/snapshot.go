package cephfs

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	v1 "github.com/monoceph/monoceph/api/v1"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/controller"
	"github.com/monoceph/monoceph/internal/faultpoint"
	"github.com/monoceph/monoceph/internal/journal"
	"github.com/monoceph/monoceph/internal/owner"
	"github.com/monoceph/monoceph/internal/reftracker"
	"github.com/monoceph/monoceph/internal/volid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/klog/v2"
)

// Journal attributes of a snapshot reservation: where the snapshot is (the source volume's
// reservation may be gone, its subvolume removed with retained snapshots), and what
// ListSnapshots reports once it is cut.
const (
	attrSourceVolume = "sourceVolume"
	attrSubvolume    = "subvolume"
	attrCreated      = "created"
	attrSnapSize     = "size"
)

// CreateSnapshot snapshots the subvolume. Pacific's snapshot info has no size, so the size is
// the volume's quota when the snapshot is cut: what a restore needs.
func (c *Controller) CreateSnapshot(ctx context.Context, req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	if err := controller.CheckCreateSnapshot(req, paramFSName); err != nil {
		return nil, err
	}
	name, srcID := req.GetName(), req.GetSourceVolumeId()
	sid, err := parseVolumeID(srcID)
	if err != nil {
		return nil, controller.NotFoundf("source volume %q does not exist", srcID)
	}
	if err := controller.CheckSnapshotCluster(req.GetParameters(), srcID, sid.ClusterID()); err != nil {
		return nil, err
	}
	cl, err := c.Cluster(sid.ClusterID(), codes.NotFound, "source_volume_id")
	if err != nil {
		return nil, err
	}
	ctx, unlock, err := c.opts.Locks.TryLockContext(ctx, "CreateSnapshot", "cephfs-snapshot-name:"+name, srcID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	s, err := c.siteOf(ctx, cl, sid.Location(), req.GetSecrets(), "source volume "+srcID)
	if err != nil {
		return nil, err
	}
	defer s.release()
	if err := checkSnapshotFS(req.GetParameters(), s); err != nil {
		return nil, err
	}
	if sid.CSI != nil {
		return c.createCSISnapshot(ctx, req, s, *sid.CSI)
	}
	rec, err := reserveSnapshot(ctx, s, req, sid.Own.UID)
	if err != nil {
		return nil, err
	}
	faultpoint.Hit("cephfs.CreateSnapshot.reserved")
	id := volid.CephFSSnapshot{CephFSVolume: sid.Own, SnapUID: rec.UID}
	if snap, ok := snapshotFromRecord(*rec, id); ok {
		return &csi.CreateSnapshotResponse{Snapshot: snap}, nil
	}
	if err := c.cutSnapshot(ctx, s, cl.ClusterID, req, rec); err != nil {
		return nil, err
	}
	klog.FromContext(ctx).V(2).Info("Snapshot ready", "snapshot", s.fs.Name+"/"+rec.Attrs[attrGroup]+"/"+rec.Attrs[attrSubvolume]+"@"+snapName(rec.UID), "name", name)
	out, _ := snapshotFromRecord(*rec, id)
	return &csi.CreateSnapshotResponse{Snapshot: out}, nil
}

// reserveSnapshot reserves the snapshot's name for a ready, non-shallow source volume, with
// what the snapshot needs to outlive the volume's reservation; a reservation found again must
// be of the same source.
func reserveSnapshot(ctx context.Context, s site, req *csi.CreateSnapshotRequest, srcUID string) (*journal.Record, error) {
	name, srcID := req.GetName(), req.GetSourceVolumeId()
	vol, err := journal.Get(ctx, s.journal(), journal.Volume, srcUID)
	if err != nil {
		return nil, err
	}
	if vol == nil || vol.Attrs[attrState] != stateReady {
		return nil, controller.NotFoundf("source volume %q does not exist", srcID)
	}
	if vol.Attrs[attrKind] == kindShallow {
		return nil, status.Errorf(codes.InvalidArgument, "source_volume_id %q is a shallow read-only volume: snapshot its source snapshot's volume instead", srcID)
	}
	rec, created, err := journal.Reserve(ctx, s.journal(), journal.Snapshot, name, map[string]string{
		attrSourceVolume: srcID, attrGroup: vol.Attrs[attrGroup], attrSubvolume: subvolumeName(vol.UID), attrSnapSize: vol.Attrs[attrSize],
		attrRootPath: vol.Attrs[attrRootPath],
	})
	if err != nil {
		return nil, err
	}
	if !created && rec.Attrs[attrSourceVolume] != srcID {
		return nil, status.Errorf(codes.AlreadyExists, "snapshot %q exists for source volume %q, not %q", name, rec.Attrs[attrSourceVolume], srcID)
	}
	return rec, nil
}

// cutSnapshot cuts the reservation's subvolume snapshot (one an earlier attempt cut is
// taken as is), owns it, and records its creation time.
func (c *Controller) cutSnapshot(ctx context.Context, s site, clusterID string, req *csi.CreateSnapshotRequest, rec *journal.Record) error {
	// the reference tracker exists before the snapshot, so no shallow volume can ever find a
	// snapshot without one
	if err := c.trackSnapshot(ctx, s, rec); err != nil {
		return err
	}
	group, sub, snap := rec.Attrs[attrGroup], rec.Attrs[attrSubvolume], snapName(rec.UID)
	err := s.admin.CreateSubVolumeSnapshot(s.fs.Name, group, sub, snap)
	if err != nil && !ceph.Is(err, ceph.ErrExists) {
		err = ceph.Wrap("snapshot "+sub, err)
		if isNotFound(err) {
			// the subvolume went away after the journal said it was there: no snapshot was
			// cut, so its tracker and reservation go too
			return c.abandonSnapshot(ctx, s, rec, err)
		}
		return err
	}
	faultpoint.Hit("cephfs.CreateSnapshot.cut")
	if err := c.setOwner(ctx, clusterID, s, group, sub, snap, owner.FromParams(req.GetParameters(), owner.SnapshotKeys, c.opts.ClusterName), true); err != nil {
		return err
	}
	info, err := s.admin.SubVolumeSnapshotInfo(s.fs.Name, group, sub, snap)
	if err != nil {
		return ceph.Wrap("snapshot info", err)
	}
	// the volumes module prints local time without a zone; the mgr runs in UTC in containers
	rec.Attrs[attrCreated] = info.CreatedAt.UTC().Format(time.RFC3339Nano)
	return journal.SetAttrs(ctx, s.journal(), journal.Snapshot, rec)
}

// abandonSnapshot removes what CreateSnapshot made before the snapshot failed for good (the
// tracker holding only the snapshot's own reference, the reservation) and returns cause.
func (c *Controller) abandonSnapshot(ctx context.Context, s site, rec *journal.Record, cause error) error {
	if _, err := reftracker.Delete(ctx, s.journal(), rec.UID, snapshotRef); err != nil {
		return err
	}
	if err := journal.ReleaseRecord(ctx, s.journal(), journal.Snapshot, rec); err != nil {
		return err
	}
	return cause
}

func snapshotFromRecord(rec journal.Record, id volid.CephFSSnapshot) (*csi.Snapshot, bool) {
	created, err := time.Parse(time.RFC3339Nano, rec.Attrs[attrCreated])
	if err != nil {
		return nil, false
	}
	size, _ := strconv.ParseInt(rec.Attrs[attrSnapSize], 10, 64)
	return &csi.Snapshot{SnapshotId: id.String(), SourceVolumeId: rec.Attrs[attrSourceVolume], SizeBytes: size,
		CreationTime: timestamppb.New(created), ReadyToUse: true, GroupSnapshotId: groupOfMember(rec, id)}, true
}

// siteOf connects and resolves a filesystem ID; a filesystem that no longer exists is NOT_FOUND
// for what.
func (c *Controller) siteOf(ctx context.Context, cl v1.Cluster, fscid int64, secrets map[string]string, what string) (site, error) {
	s, err := c.openSite(ctx, cl, secrets, "", fscid)
	if errors.Is(err, ceph.ErrNotFound) {
		return site{}, controller.NotFoundf("%s does not exist", what)
	}
	return s, err
}

// deletionSite takes the operation lock of a delete of raw and opens the site of filesystem
// fscid. gone reports a filesystem that no longer exists: nothing is left to delete. Unless
// gone or failed, the caller defers done.
func (c *Controller) deletionSite(ctx context.Context, op, field, clusterID string, fscid int64, raw string, secrets map[string]string) (_ context.Context, s site, done func(), gone bool, err error) {
	cl, err := c.Cluster(clusterID, codes.FailedPrecondition, field)
	if err != nil {
		return ctx, s, nil, false, err
	}
	ctx, unlock, err := c.opts.Locks.TryLockContext(ctx, op, raw)
	if err != nil {
		return ctx, s, nil, false, err
	}
	s, err = c.openSite(ctx, cl, secrets, "", fscid)
	if err != nil {
		unlock()
		if errors.Is(err, ceph.ErrNotFound) {
			return ctx, s, nil, true, nil
		}
		return ctx, s, nil, false, err
	}
	return ctx, s, func() { s.release(); unlock() }, false, nil
}

// DeleteSnapshot drops the snapshot's own reference; the Ceph snapshot goes when no shallow
// volume references it any more.
func (c *Controller) DeleteSnapshot(ctx context.Context, req *csi.DeleteSnapshotRequest) (*csi.DeleteSnapshotResponse, error) {
	raw := req.GetSnapshotId()
	if raw == "" {
		return nil, status.Error(codes.InvalidArgument, "snapshot_id is missing")
	}
	sid, err := parseSnapshotID(raw)
	if err != nil {
		return &csi.DeleteSnapshotResponse{}, nil
	}
	if sid.CSI != nil {
		return c.deleteCSISnapshot(ctx, req, *sid.CSI)
	}
	id := sid.Own
	ctx, s, done, gone, err := c.deletionSite(ctx, "DeleteSnapshot", "snapshot_id", id.ClusterID, id.FSCID, raw, req.GetSecrets())
	if err != nil || gone {
		return &csi.DeleteSnapshotResponse{}, err
	}
	defer done()
	rec, err := journal.Get(ctx, s.journal(), journal.Snapshot, id.SnapUID)
	if err != nil || rec == nil {
		return &csi.DeleteSnapshotResponse{}, err
	}
	if err := c.refuseMember(ctx, s, rec, id); err != nil {
		return nil, err
	}
	if err := c.releaseSnapshotRef(ctx, s, rec); err != nil {
		return nil, err
	}
	faultpoint.Hit("cephfs.DeleteSnapshot.removed")
	if err := journal.ReleaseRecord(ctx, s.journal(), journal.Snapshot, rec); err != nil {
		return nil, err
	}
	return &csi.DeleteSnapshotResponse{}, nil
}

// removeCephSnapshot removes a subvolume snapshot; one that clones still copy from is
// FAILED_PRECONDITION, as the CSI spec asks for a snapshot in use.
func removeCephSnapshot(s site, group, sub, snap string) error {
	err := s.admin.RemoveSubVolumeSnapshot(s.fs.Name, group, sub, snap)
	switch kind := ceph.Wrap("", err); {
	case err == nil || errors.Is(kind, ceph.ErrNotFound):
		return nil
	case errors.Is(kind, ceph.ErrUnavailable) || errors.Is(kind, ceph.ErrBusy):
		// the volumes module answers EAGAIN while clones of the snapshot are pending
		return status.Errorf(codes.FailedPrecondition, "snapshot %s@%s has pending clones: %v", sub, snap, err)
	}
	return ceph.Wrap("remove snapshot "+sub+"@"+snap, err)
}

// ListSnapshots reads the snapshot journals of the filesystems involved.
func (c *Controller) ListSnapshots(ctx context.Context, req *csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error) {
	var all []*csi.Snapshot
	var err error
	switch {
	case req.GetSnapshotId() != "":
		id, perr := parseSnapshotID(req.GetSnapshotId())
		if perr != nil {
			return &csi.ListSnapshotsResponse{}, nil
		}
		all, err = c.listIn(ctx, id.ClusterID(), id.Location(), req.GetSecrets(), id.IsCephCSI(), func(s *csi.Snapshot) bool { return s.GetSnapshotId() == req.GetSnapshotId() })
	case req.GetSourceVolumeId() != "":
		v, perr := parseVolumeID(req.GetSourceVolumeId())
		if perr != nil {
			return &csi.ListSnapshotsResponse{}, nil
		}
		all, err = c.listIn(ctx, v.ClusterID(), v.Location(), req.GetSecrets(), v.IsCephCSI(), func(s *csi.Snapshot) bool { return s.GetSourceVolumeId() == req.GetSourceVolumeId() })
	default:
		for _, cl := range c.Clusters.Map() {
			found, lerr := c.listIn(ctx, cl.ClusterID, -1, req.GetSecrets(), true, nil)
			if lerr != nil {
				return nil, lerr
			}
			all = append(all, found...)
		}
	}
	if err != nil {
		return nil, err
	}
	return controller.Page(all, req.GetStartingToken(), req.GetMaxEntries(), func(tok string) bool {
		_, err := parseSnapshotID(tok)
		return err == nil
	})
}

// listIn lists the snapshots of one filesystem (fscid >= 0) or of all of a cluster's; with
// cephCSI, ceph-csi's too.
func (c *Controller) listIn(ctx context.Context, clusterID string, fscid int64, secrets map[string]string, cephCSI bool, keep func(*csi.Snapshot) bool) ([]*csi.Snapshot, error) {
	cl, err := c.Clusters.Cluster(clusterID)
	if err != nil {
		return nil, nil
	}
	conn, err := c.Connect(ctx, cl, secrets)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	fss, err := c.fss.get(ctx, clusterID, conn, false)
	if err != nil {
		return nil, err
	}
	var out []*csi.Snapshot
	for _, fs := range fss {
		if fscid >= 0 && fs.ID != fscid {
			continue
		}
		recs, err := journal.List(ctx, journalAt(conn, fs, journalNamespace(cl)), journal.Snapshot)
		if err != nil {
			return nil, err
		}
		for _, r := range recs {
			src, err := volid.ParseCephFSVolume(r.Attrs[attrSourceVolume])
			if err != nil {
				continue
			}
			snap, ok := snapshotFromRecord(r, volid.CephFSSnapshot{CephFSVolume: src, SnapUID: r.UID})
			if ok && (keep == nil || keep(snap)) {
				out = append(out, snap)
			}
		}
		if cephCSI {
			found, err := c.listCSIIn(ctx, cl, conn, fs, secrets, keep)
			if err != nil {
				return nil, err
			}
			out = append(out, found...)
		}
	}
	return out, nil
}
