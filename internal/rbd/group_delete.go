package rbd

import (
	"context"
	"strings"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/controller"
	"github.com/monoceph/monoceph/internal/journal"
	"github.com/monoceph/monoceph/internal/radosop"
	"github.com/monoceph/monoceph/internal/rbd/rbdname"
	"github.com/monoceph/monoceph/internal/volid"
	"google.golang.org/grpc/codes"
	"k8s.io/klog/v2"
)

// DeleteVolumeGroupSnapshot removes the group snapshot, its member snapshots and its group,
// then deleted volumes only its members kept, then the reservation. It answers OK for a
// group snapshot that does not exist.
func (g *GroupController) DeleteVolumeGroupSnapshot(ctx context.Context, req *csi.DeleteVolumeGroupSnapshotRequest) (*csi.DeleteVolumeGroupSnapshotResponse, error) {
	c := g.c
	raw := req.GetGroupSnapshotId()
	if err := controller.CheckGroupSnapshotID(raw); err != nil {
		return nil, err
	}
	gid, err := volid.ParseRBDGroupSnapshot(raw)
	if err != nil {
		return &csi.DeleteVolumeGroupSnapshotResponse{}, nil // names no group snapshot
	}
	cl, err := c.Cluster(gid.ClusterID, codes.FailedPrecondition, "group_snapshot_id")
	if err != nil {
		return nil, err
	}
	ctx, unlock, err := c.opts.Locks.TryLockContext(ctx, "DeleteVolumeGroupSnapshot", raw)
	if err != nil {
		return nil, err
	}
	defer unlock()
	p, gone, err := c.locate(ctx, cl, gid.PoolID, gid.Namespace, req.GetSecrets())
	if gone {
		return &csi.DeleteVolumeGroupSnapshotResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer p.Conn.Release()
	rec, err := journal.Get(ctx, p, journal.GroupSnapshot, gid.UID)
	if err != nil {
		return nil, err
	}
	var volumes []volid.RBDVolume
	if rec != nil {
		if snaps, _, ok := memberSnapshots(*rec, gid); ok {
			if err := controller.CheckMembers(req.GetSnapshotIds(), memberIDs(snaps)); err != nil {
				return nil, err
			}
		}
		volumes = groupSources(*rec)
	} else {
		// the reservation goes last, so nothing but what the request names may remain
		for _, id := range req.GetSnapshotIds() {
			if s, err := volid.ParseRBDSnapshot(id); err == nil && s.Member && s.SnapUID == gid.UID {
				volumes = append(volumes, s.RBDVolume)
			}
		}
	}
	// the members' volumes are locked too: a deleted one that only this group snapshot kept is
	// removed, as DeleteSnapshot removes one under its volume's lock
	ids := make([]string, len(volumes))
	for i, v := range volumes {
		ids[i] = v.String()
	}
	ctx, unlockVolumes, err := c.opts.Locks.TryLockContext(ctx, "DeleteVolumeGroupSnapshot", ids...)
	if err != nil {
		return nil, err
	}
	defer unlockVolumes()
	if err := removeGroupSnapshot(ctx, p, gid.UID, rec, volumes); err != nil {
		return nil, err
	}
	klog.FromContext(ctx).V(2).Info("Group snapshot deleted", "group", p.String()+"/"+rbdname.Group(gid.UID))
	return &csi.DeleteVolumeGroupSnapshotResponse{}, nil
}

// groupSources are the source volumes a group snapshot's reservation names.
func groupSources(rec journal.Record) []volid.RBDVolume {
	var out []volid.RBDVolume
	for _, id := range strings.Split(rec.Attrs[attrGroupSources], ",") {
		if v, err := volid.ParseRBDVolume(id); err == nil {
			out = append(out, v)
		}
	}
	return out
}

// GetVolumeGroupSnapshot answers from the reservation of a completed group snapshot whose RBD
// group snapshot still exists; anything else is NOT_FOUND.
func (g *GroupController) GetVolumeGroupSnapshot(ctx context.Context, req *csi.GetVolumeGroupSnapshotRequest) (*csi.GetVolumeGroupSnapshotResponse, error) {
	c := g.c
	raw := req.GetGroupSnapshotId()
	if err := controller.CheckGroupSnapshotID(raw); err != nil {
		return nil, err
	}
	notFound := controller.NotFoundf("group snapshot %q does not exist", raw)
	gid, err := volid.ParseRBDGroupSnapshot(raw)
	if err != nil {
		return nil, notFound
	}
	cl, err := c.Cluster(gid.ClusterID, codes.NotFound, "group_snapshot_id")
	if err != nil {
		return nil, err
	}
	p, gone, err := c.locate(ctx, cl, gid.PoolID, gid.Namespace, req.GetSecrets())
	if gone {
		return nil, notFound
	}
	if err != nil {
		return nil, err
	}
	defer p.Conn.Release()
	rec, err := journal.Get(ctx, p, journal.GroupSnapshot, gid.UID)
	if err != nil {
		return nil, err
	}
	if rec == nil {
		return nil, notFound
	}
	gs, ok := groupFromRecord(*rec, gid)
	if !ok {
		return nil, notFound // still being cut: no ID was handed out yet
	}
	if err := controller.CheckMembers(req.GetSnapshotIds(), memberIDs(gs.GetSnapshots())); err != nil {
		return nil, err
	}
	exists, err := radosop.With(ctx, p, "look up group snapshot", func(io *rados.IOContext) (bool, error) {
		state, found, err := groupSnapState(io, rbdname.Group(gid.UID), rbdname.GroupSnapshot(gid.UID))
		return found && state == rbd.GroupSnapStateComplete, err
	})
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, notFound
	}
	return &csi.GetVolumeGroupSnapshotResponse{GroupSnapshot: gs}, nil
}
