package cephfs

import (
	"context"
	"fmt"
	"path"

	"github.com/container-storage-interface/spec/lib/go/csi"
	v1 "github.com/monoceph/monoceph/api/v1"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephcsi"
	"github.com/monoceph/monoceph/internal/cephname"
	"github.com/monoceph/monoceph/internal/classparam"
	"github.com/monoceph/monoceph/internal/controller"
	"github.com/monoceph/monoceph/internal/faultpoint"
	"github.com/monoceph/monoceph/internal/volid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/klog/v2"
)

// Snapshots of ceph-csi volumes: subvolume snapshot <prefix><uuid> (csi.imagename) of the
// subvolume csi.source, journal entry csi.snap.<uuid> next to the volumes'. When shallow
// volumes use one, ceph-csi's reference tracker rt-backingsnapshot-<handle> counts them; a
// DeleteSnapshot then masks the snapshot's own reference, and the snapshot with its entry stays
// until the last shallow volume goes. monoceph snapshots ceph-csi volumes the same way, and
// keeps the same tracker (its own shallow volumes of such snapshots take references in it), so
// both drivers' shallow volumes and the way back agree on when a snapshot may go.

// csiBacking resolves a ceph-csi snapshot handle to the snapshot it names. A snapshot whose
// DeleteSnapshot already ran (its reference masked, kept for shallow volumes) is NOT_FOUND,
// as for the CO it is gone.
func (c *Controller) csiBacking(ctx context.Context, s site, handle, what string) (backing, error) {
	h, err := volid.ParseHandle(handle)
	if err != nil || h.LocationID != s.fs.ID {
		return backing{}, controller.NotFoundf("%s does not exist", what)
	}
	e, err := cephcsi.Read(ctx, s.journal(), cephcsi.Snapshots, h.UUID)
	if err != nil {
		return backing{}, err
	}
	if e == nil || e.Name == "" || e.Attrs[cephcsi.KeySource] == "" {
		return backing{}, controller.NotFoundf("%s does not exist", what)
	}
	if err := refuseEncrypted(e, what); err != nil {
		return backing{}, err
	}
	t, err := cephcsi.ReadTracker(ctx, s.journal(), cephcsi.TrackerName(handle))
	if err != nil {
		return backing{}, err
	}
	if t.Exists && t.Refs[handle] == cephcsi.RefMask {
		return backing{}, controller.NotFoundf("%s does not exist (deleted, kept for the shallow volumes using it)", what)
	}
	sub := e.Attrs[cephcsi.KeySource]
	if err := plainJournalNames(sub, e.ImageName()); err != nil {
		return backing{}, status.Errorf(codes.FailedPrecondition, "%s: ceph-csi's journal entry %v", what, err)
	}
	b := backing{csi: handle, group: s.group, subvolume: sub, snapshot: e.ImageName()}
	if b.size, err = quota(s, s.group, sub); err != nil {
		return backing{}, err
	}
	// a subvolume removed with retained snapshots has no path any more: the node then finds
	// the subvolume's directory inside the snapshot itself
	b.rootPath, err = s.admin.SubVolumePath(s.fs.Name, s.group, sub)
	if isNotFound(err) {
		b.rootPath, err = path.Join("/volumes", s.group, sub), nil
	}
	if err != nil {
		return backing{}, ceph.Wrap("get path of "+sub, err)
	}
	return b, nil
}

// plainJournalNames checks the subvolume and snapshot names a ceph-csi journal entry gives (omap
// values anyone with write access to the journal can set): they become the root path and the
// .snap/<snapshot> directory shallow volumes are staged from.
func plainJournalNames(subvolume, snapshot string) error {
	if err := cephname.Check(subvolume); err != nil {
		return fmt.Errorf("names subvolume %q, which %v", subvolume, err)
	}
	if err := cephname.Check(snapshot); err != nil {
		return fmt.Errorf("names snapshot %q, which %v", snapshot, err)
	}
	return nil
}

// createCSISnapshot snapshots a ceph-csi volume the way ceph-csi does, in site s (opened, and
// the snapshot name locked, by CreateSnapshot). Every step is checked first, so a retry after
// a crash anywhere finishes the same snapshot.
func (c *Controller) createCSISnapshot(ctx context.Context, req *csi.CreateSnapshotRequest, s site, src volid.Handle) (*csi.CreateSnapshotResponse, error) {
	name, srcID := req.GetName(), src.String()
	what := "source volume " + srcID
	vol, err := c.csiVolume(ctx, s, src, what)
	if err != nil {
		return nil, err
	}
	if vol.Attrs[cephcsi.KeyBackingSnapshot] != "" {
		return nil, status.Errorf(codes.InvalidArgument, "source_volume_id %q is a shallow read-only volume: snapshot its source snapshot's volume instead", srcID)
	}
	if err := refuseEncrypted(vol, what); err != nil {
		return nil, err
	}
	sub := vol.ImageName()
	size, err := quota(s, s.group, sub)
	if err != nil {
		return nil, err
	}
	e, _, err := cephcsi.Reserve(ctx, s.journal(), cephcsi.Snapshots, c.instance(), name, func(id string) map[string]string {
		return map[string]string{cephcsi.KeyImageName: cephcsi.Snapshots.DefaultName(id), cephcsi.KeySource: sub}
	})
	if err != nil {
		return nil, err
	}
	if e.Attrs[cephcsi.KeySource] != sub {
		return nil, status.Errorf(codes.AlreadyExists, "snapshot %q exists for subvolume %q, not %q (%s)", name, e.Attrs[cephcsi.KeySource], sub, srcID)
	}
	faultpoint.Hit("cephfs.CreateCephCSISnapshot.reserved")
	snap := e.ImageName()
	err = s.admin.CreateSubVolumeSnapshot(s.fs.Name, s.group, sub, snap)
	if err != nil && !ceph.Is(err, ceph.ErrExists) {
		err = ceph.Wrap("snapshot "+sub, err)
		if isNotFound(err) {
			// the subvolume is gone: nothing was cut, the reservation goes too
			if rerr := cephcsi.Release(ctx, s.journal(), c.instance(), e); rerr != nil {
				return nil, rerr
			}
			return nil, controller.NotFoundf("%s does not exist", what)
		}
		return nil, err
	}
	faultpoint.Hit("cephfs.CreateCephCSISnapshot.cut")
	info, err := s.admin.SubVolumeSnapshotInfo(s.fs.Name, s.group, sub, snap)
	if err != nil {
		return nil, ceph.Wrap("snapshot info", err)
	}
	id := volid.Handle{ClusterID: src.ClusterID, LocationID: src.LocationID, UUID: e.UUID}
	klog.FromContext(ctx).V(2).Info("ceph-csi snapshot ready", "snapshot", s.fs.Name+"/"+s.group+"/"+sub+"@"+snap, "name", name)
	return &csi.CreateSnapshotResponse{Snapshot: &csi.Snapshot{SnapshotId: id.String(), SourceVolumeId: srcID, SizeBytes: size,
		CreationTime: timestamppb.New(info.CreatedAt.UTC()), ReadyToUse: true}}, nil
}

// deleteCSISnapshot masks the snapshot's own reference in its tracker; the subvolume snapshot
// and its entry go when no shallow volume references it (or there is no tracker).
func (c *Controller) deleteCSISnapshot(ctx context.Context, req *csi.DeleteSnapshotRequest, h volid.Handle) (*csi.DeleteSnapshotResponse, error) {
	raw := h.String()
	ctx, s, done, gone, err := c.deletionSite(ctx, "DeleteSnapshot", "snapshot_id", h.ClusterID, h.LocationID, raw, req.GetSecrets())
	if err != nil || gone {
		return &csi.DeleteSnapshotResponse{}, err
	}
	defer done()
	e, err := cephcsi.Read(ctx, s.journal(), cephcsi.Snapshots, h.UUID)
	if err != nil || e == nil {
		return &csi.DeleteSnapshotResponse{}, err
	}
	sub, snap := e.Attrs[cephcsi.KeySource], e.ImageName()
	// refuse before changing anything while clones copy from it
	info, err := s.admin.SubVolumeSnapshotInfo(s.fs.Name, s.group, sub, snap)
	switch {
	case err == nil && info.HasPendingClones == "yes":
		return nil, status.Errorf(codes.FailedPrecondition, "snapshot %s@%s has pending clones", sub, snap)
	case err != nil && !isNotFound(err):
		return nil, ceph.Wrap("snapshot info", err)
	}
	t, err := cephcsi.TrackerRemove(ctx, s.journal(), cephcsi.TrackerName(raw), map[string]cephcsi.RefType{raw: cephcsi.RefMask})
	if err != nil {
		return nil, err
	}
	if t.Exists {
		klog.FromContext(ctx).V(2).Info("Snapshot kept for shallow volumes", "snapshot", sub+"@"+snap, "references", t.Count)
		return &csi.DeleteSnapshotResponse{}, nil
	}
	faultpoint.Hit("cephfs.DeleteCephCSISnapshot.unreferenced")
	if err := c.dropCSISnapshot(ctx, s, e); err != nil {
		return nil, err
	}
	return &csi.DeleteSnapshotResponse{}, nil
}

// dropCSISnapshot removes a snapshot nothing references any more, then its entry.
func (c *Controller) dropCSISnapshot(ctx context.Context, s site, e *cephcsi.Entry) error {
	if err := removeCephSnapshot(s, s.group, e.Attrs[cephcsi.KeySource], e.ImageName()); err != nil {
		return err
	}
	faultpoint.Hit("cephfs.cephcsi-snapshot.removed")
	return cephcsi.Release(ctx, s.journal(), c.instance(), e)
}

// unrefCSISnapshot drops a shallow volume's reference (ref, its would-be subvolume name) from
// the tracker of the ceph-csi snapshot handle; with the last one the snapshot goes. A missing
// tracker counts as emptied, as ceph-csi counts it: a retry after a crash between the tracker's
// removal and the snapshot's finds none.
func (c *Controller) unrefCSISnapshot(ctx context.Context, s site, handle, ref string) error {
	t, err := cephcsi.TrackerRemove(ctx, s.journal(), cephcsi.TrackerName(handle), map[string]cephcsi.RefType{ref: cephcsi.RefNormal})
	if err != nil || t.Exists {
		return err
	}
	faultpoint.Hit("cephfs.DeleteCephCSIVolume.unreferenced")
	h, err := volid.ParseHandle(handle)
	if err != nil {
		return nil // not a snapshot ceph-csi could have made: nothing to remove
	}
	e, err := cephcsi.Read(ctx, s.journal(), cephcsi.Snapshots, h.UUID)
	if err != nil || e == nil {
		return err
	}
	return c.dropCSISnapshot(ctx, s, e)
}

// csiSnapshotsIn lists ceph-csi's snapshot journal of one filesystem (ceph-csi itself offers
// no ListSnapshots): the source's handle from csi.source, creation time from the snapshot, size
// from the source's quota (0 once it is removed with retained snapshots). Deleted snapshots kept
// for shallow volumes, and entries whose snapshot is not cut yet, are left out.
func (c *Controller) listCSIIn(ctx context.Context, cl v1.Cluster, conn *ceph.Conn, fs filesystem, secrets map[string]string, keep func(*csi.Snapshot) bool) ([]*csi.Snapshot, error) {
	entries, err := cephcsi.List(ctx, journalAt(conn, fs, journalNamespace(cl)), cephcsi.Snapshots, c.instance())
	if err != nil || len(entries) == 0 {
		return nil, err
	}
	// the manager answers for the snapshots' creation times: open it only when there are some
	s, err := c.openSite(ctx, cl, secrets, "", fs.ID)
	if err != nil {
		return nil, err
	}
	defer s.release()
	clusterID := cl.ClusterID
	var out []*csi.Snapshot
	for _, e := range entries {
		id := volid.Handle{ClusterID: clusterID, LocationID: s.fs.ID, UUID: e.UUID}
		sub := e.Attrs[cephcsi.KeySource]
		src := ""
		if u := cephcsi.UUIDOf(sub); u != "" {
			src = volid.Handle{ClusterID: clusterID, LocationID: s.fs.ID, UUID: u}.String()
		}
		snap := &csi.Snapshot{SnapshotId: id.String(), SourceVolumeId: src, ReadyToUse: true}
		if keep != nil && !keep(snap) {
			continue
		}
		t, err := cephcsi.ReadTracker(ctx, s.journal(), cephcsi.TrackerName(snap.SnapshotId))
		if err != nil {
			return nil, err
		}
		if t.Exists && t.Refs[snap.SnapshotId] == cephcsi.RefMask {
			continue
		}
		info, err := s.admin.SubVolumeSnapshotInfo(s.fs.Name, s.group, sub, e.ImageName())
		if isNotFound(err) {
			continue
		}
		if err != nil {
			return nil, ceph.Wrap("snapshot info", err)
		}
		if snap.SizeBytes, err = quota(s, s.group, sub); err != nil {
			return nil, err
		}
		snap.CreationTime = timestamppb.New(info.CreatedAt.UTC())
		out = append(out, snap)
	}
	return out, nil
}

// checkSnapshotFS refuses a VolumeSnapshotClass fsName naming another filesystem than the
// source volume's.
func checkSnapshotFS(p map[string]string, s site) error {
	if v, ok := p[paramFSName]; ok && v != s.fs.Name {
		return classparam.InvalidParam(paramFSName, "%q is not the filesystem of the source volume (%q)", v, s.fs.Name)
	}
	return nil
}
