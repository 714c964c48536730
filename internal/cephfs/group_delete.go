package cephfs

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/controller"
	"github.com/monoceph/monoceph/internal/faultpoint"
	"github.com/monoceph/monoceph/internal/journal"
	"github.com/monoceph/monoceph/internal/volid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// openGroup connects for a group snapshot ID and reads its reservation (nil when there is
// none). notFound reports a group snapshot whose ID is malformed or whose filesystem is gone.
func (c *Controller) openGroup(ctx context.Context, raw string, secrets map[string]string, code codes.Code) (s site, gid volid.CephFSGroupSnapshot, rec *journal.Record, notFound bool, err error) {
	if err := controller.CheckGroupSnapshotID(raw); err != nil {
		return site{}, gid, nil, false, err
	}
	if gid, err = volid.ParseCephFSGroupSnapshot(raw); err != nil {
		return site{}, gid, nil, true, nil
	}
	cl, err := c.Cluster(gid.ClusterID, code, "group_snapshot_id")
	if err != nil {
		return site{}, gid, nil, false, err
	}
	s, err = c.siteOf(ctx, cl, gid.FSCID, secrets, "group snapshot "+raw)
	if status.Code(err) == codes.NotFound {
		return site{}, gid, nil, true, nil
	}
	if err != nil {
		return site{}, gid, nil, false, err
	}
	rec, err = journal.Get(ctx, s.journal(), journal.GroupSnapshot, gid.UID)
	if err != nil {
		s.release()
		return site{}, gid, nil, false, err
	}
	return s, gid, rec, false, nil
}

// DeleteVolumeGroupSnapshot deletes each member as DeleteSnapshot deletes a snapshot (shallow
// volumes may keep its Ceph snapshot), then the group's reservation.
func (g *GroupController) DeleteVolumeGroupSnapshot(ctx context.Context, req *csi.DeleteVolumeGroupSnapshotRequest) (*csi.DeleteVolumeGroupSnapshotResponse, error) {
	c := g.c
	raw := req.GetGroupSnapshotId()
	if raw != "" {
		var unlock func()
		var err error
		if ctx, unlock, err = c.opts.Locks.TryLockContext(ctx, "DeleteVolumeGroupSnapshot", raw); err != nil {
			return nil, err
		}
		defer unlock()
	}
	s, gid, rec, notFound, err := c.openGroup(ctx, raw, req.GetSecrets(), codes.FailedPrecondition)
	if notFound {
		return &csi.DeleteVolumeGroupSnapshotResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer s.release()
	var given []string // member snapshot UIDs the request names
	if rec != nil && rec.Attrs[attrCreated] != "" {
		if err := controller.CheckMembers(req.GetSnapshotIds(), memberIDs(gid, rec)); err != nil {
			return nil, err
		}
	}
	for _, id := range req.GetSnapshotIds() {
		if m, err := volid.ParseCephFSSnapshot(id); err == nil {
			given = append(given, m.SnapUID)
		}
	}
	if err := c.removeGroup(ctx, s, gid, rec, given); err != nil {
		return nil, err
	}
	klog.FromContext(ctx).V(2).Info("Group snapshot deleted", "group", raw)
	return &csi.DeleteVolumeGroupSnapshotResponse{}, nil
}

// removeGroup deletes each member of group snapshot gid as DeleteSnapshot deletes a snapshot
// (shallow volumes may keep its Ceph snapshot), then its reservation rec (if any). Members are
// found through rec's sources, and through the member UIDs given (a retry after rec went).
func (c *Controller) removeGroup(ctx context.Context, s site, gid volid.CephFSGroupSnapshot, rec *journal.Record, given []string) error {
	members := given
	if rec != nil {
		for _, v := range groupSources(rec) {
			m, err := journal.Lookup(ctx, s.journal(), journal.Snapshot, memberName(gid.UID, v.UID))
			if err != nil {
				return err
			}
			if m != nil {
				members = append(members, m.UID)
			}
		}
		if set := rec.Attrs[attrQuiesceSet]; set != "" {
			_ = c.releaseMembers(ctx, s, set, 0) // an interrupted attempt's; it also expires by itself
		}
	}
	for _, uid := range members {
		m, err := journal.Get(ctx, s.journal(), journal.Snapshot, uid)
		if err != nil {
			return err
		}
		if m == nil || m.Attrs[attrGroupSnapshot] != gid.UID {
			continue // not a member of this group snapshot, or gone already
		}
		if err := c.releaseSnapshotRef(ctx, s, m); err != nil {
			return err
		}
		if err := journal.ReleaseRecord(ctx, s.journal(), journal.Snapshot, m); err != nil {
			return err
		}
	}
	faultpoint.Hit("cephfs.DeleteVolumeGroupSnapshot.members")
	if rec == nil {
		return nil
	}
	return journal.ReleaseRecord(ctx, s.journal(), journal.GroupSnapshot, rec)
}

// GetVolumeGroupSnapshot answers from the reservations of a completed group snapshot.
func (g *GroupController) GetVolumeGroupSnapshot(ctx context.Context, req *csi.GetVolumeGroupSnapshotRequest) (*csi.GetVolumeGroupSnapshotResponse, error) {
	c := g.c
	raw := req.GetGroupSnapshotId()
	s, gid, rec, notFound, err := c.openGroup(ctx, raw, req.GetSecrets(), codes.NotFound)
	if notFound {
		return nil, controller.NotFoundf("group snapshot %q does not exist", raw)
	}
	if err != nil {
		return nil, err
	}
	defer s.release()
	if rec == nil || rec.Attrs[attrCreated] == "" {
		return nil, controller.NotFoundf("group snapshot %q does not exist", raw)
	}
	gs, err := c.groupSnapshot(ctx, s, gid, rec)
	if err != nil {
		return nil, err
	}
	if err := controller.CheckMembers(req.GetSnapshotIds(), memberSnapshotIDs(gs)); err != nil {
		return nil, err
	}
	return &csi.GetVolumeGroupSnapshotResponse{GroupSnapshot: gs}, nil
}

// refuseMember is DeleteSnapshot's answer for the member of a group snapshot that still
// exists: the spec's INVALID_ARGUMENT, as members go with their group snapshot.
func (c *Controller) refuseMember(ctx context.Context, s site, rec *journal.Record, id volid.CephFSSnapshot) error {
	gs := groupOfMember(*rec, id)
	if gs == "" {
		return nil
	}
	group, err := journal.Get(ctx, s.journal(), journal.GroupSnapshot, rec.Attrs[attrGroupSnapshot])
	if err != nil || group == nil {
		return err
	}
	return status.Errorf(codes.InvalidArgument, "snapshot %s is a member of group snapshot %s: it is deleted with the group snapshot (DeleteVolumeGroupSnapshot)", id.String(), gs)
}

func memberSnapshotIDs(gs *csi.VolumeGroupSnapshot) []string {
	out := make([]string, 0, len(gs.GetSnapshots()))
	for _, m := range gs.GetSnapshots() {
		out = append(out, m.GetSnapshotId())
	}
	return out
}

// groupSources are the source volumes a group snapshot's reservation names.
func groupSources(rec *journal.Record) []volid.CephFSVolume {
	var out []volid.CephFSVolume
	for _, id := range splitIDs(rec.Attrs[attrGroupSources]) {
		if v, err := volid.ParseCephFSVolume(id); err == nil {
			out = append(out, v)
		}
	}
	return out
}
