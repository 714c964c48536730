package rbd

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/classparam"
	"github.com/monoceph/monoceph/internal/controller"
	"github.com/monoceph/monoceph/internal/faultpoint"
	"github.com/monoceph/monoceph/internal/journal"
	"github.com/monoceph/monoceph/internal/volid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/klog/v2"
)

// GroupController is the CSI GroupController service for RBD: group snapshots cut by RBD
// group snapshots, one point in time across the member images (librbd takes every image's
// exclusive lock, so writers pause, then snapshots each image).
//
// Ceph layout of one group snapshot (pool and namespace of its volumes):
//
//	group     csi-group-<UID>                      members only while the snapshot is cut
//	gsnap     csi-group-<UID>@csi-gsnap-<UID>      the group snapshot
//	snapshot  csi-vol-<v>@.group.<pool>_<ids>      one per member, in the group namespace
//	journal   gsnap.name.<request name>            sources, then members and creation time
//
// Members are ordinary CSI snapshots (rm1 IDs): CreateVolume restores them, ListSnapshots
// lists them with their group snapshot's ID, and changed blocks are computed from and to
// them. DeleteSnapshot refuses them while their group snapshot exists (the spec's
// INVALID_ARGUMENT): they go with DeleteVolumeGroupSnapshot.
type GroupController struct {
	csi.UnimplementedGroupControllerServer
	c *Controller
}

// Group returns the controller's GroupController service.
func (c *Controller) Group() *GroupController { return &GroupController{c: c} }

// Journal attributes of a group snapshot reservation.
const (
	attrGroupSources = "sources" // the source volume IDs, sorted, comma-separated
	attrGroupMembers = "members" // JSON []groupMember, set with attrCreated once the snapshot is cut
)

// groupMember is what a group snapshot's reservation keeps of one member snapshot.
type groupMember struct {
	UID     string    `json:"uid"` // the volume's
	Size    int64     `json:"size"`
	Created time.Time `json:"created"`
}

// GroupControllerGetCapabilities advertises group snapshots.
func (g *GroupController) GroupControllerGetCapabilities(context.Context, *csi.GroupControllerGetCapabilitiesRequest) (*csi.GroupControllerGetCapabilitiesResponse, error) {
	return controller.GroupCapabilities(), nil
}

// groupRequest is a CreateVolumeGroupSnapshot whose fields passed the checks that need no
// cluster.
type groupRequest struct {
	name    string
	ids     []string // sorted
	volumes []volid.RBDVolume
}

// validateGroupCreate checks a CreateVolumeGroupSnapshot: every source is a volume of this
// driver, all on one cluster, in one pool and RADOS namespace (librbd refuses group members of
// another namespace, and one pool keeps the group, its journal and its members together, so
// member IDs name everything), and the parameters name that cluster and pool if they name any.
func validateGroupCreate(req *csi.CreateVolumeGroupSnapshotRequest) (groupRequest, error) {
	ids, err := controller.CheckCreateGroupSnapshot(req)
	if err != nil {
		return groupRequest{}, err
	}
	r := groupRequest{name: req.GetName(), ids: ids}
	for _, id := range ids {
		if volid.IsHandle(id) {
			// its journal, names and snapshot layout are ceph-csi's; a group snapshot of it would
			// need ceph-csi's group format, which the takeover does not implement
			return r, status.Errorf(codes.FailedPrecondition, "source_volume_ids: %s is a volume ceph-csi created: group snapshots take only volumes monoceph created", id)
		}
		v, err := volid.ParseRBDVolume(id)
		if err != nil {
			return r, controller.NotFoundf("source volume %q does not exist", id)
		}
		if first := r.volumes; len(first) > 0 {
			switch f := first[0]; {
			case v.ClusterID != f.ClusterID:
				return r, controller.NotTogether("%s is on cluster %q, %s on %q", id, v.ClusterID, f.String(), f.ClusterID)
			case v.PoolID != f.PoolID || v.Namespace != f.Namespace:
				return r, controller.NotTogether("%s and %s are in different pools or RADOS namespaces; an RBD group snapshot needs one", id, f.String())
			}
		}
		r.volumes = append(r.volumes, v)
	}
	if err := classparam.UnknownParams(req.GetParameters(), paramClusterID, paramPool); err != nil {
		return r, err
	}
	if c, ok := req.GetParameters()[paramClusterID]; ok && c != r.volumes[0].ClusterID {
		return r, classparam.InvalidParam(paramClusterID, "the volumes are on cluster %q", r.volumes[0].ClusterID)
	}
	return r, nil
}

// CreateVolumeGroupSnapshot reserves the name, then cuts (or finishes cutting) one RBD group
// snapshot of the volumes and records its members. Every step is idempotent, so a retry after
// a crash at any point converges on one group snapshot; a request that fails for good removes
// what it made, as no ID was handed out for the CO to delete.
func (g *GroupController) CreateVolumeGroupSnapshot(ctx context.Context, req *csi.CreateVolumeGroupSnapshotRequest) (*csi.CreateVolumeGroupSnapshotResponse, error) {
	c := g.c
	r, err := validateGroupCreate(req)
	if err != nil {
		return nil, err
	}
	first := r.volumes[0]
	cl, err := c.Cluster(first.ClusterID, codes.NotFound, "source_volume_ids")
	if err != nil {
		return nil, err
	}
	// the volumes' locks keep their deletion, snapshots and other group snapshots out while
	// they are group members
	ctx, unlock, err := c.opts.Locks.TryLockContext(ctx, "CreateVolumeGroupSnapshot", append([]string{"rbd-group-snapshot-name:" + r.name}, r.ids...)...)
	if err != nil {
		return nil, err
	}
	defer unlock()
	p, gone, err := c.locate(ctx, cl, first.PoolID, first.Namespace, req.GetSecrets())
	if gone {
		return nil, controller.NotFoundf("source volume %s does not exist (pool %d is gone)", first.String(), first.PoolID)
	}
	if err != nil {
		return nil, err
	}
	defer p.Conn.Release()
	if pool, ok := req.GetParameters()[paramPool]; ok && pool != p.Pool {
		return nil, classparam.InvalidParam(paramPool, "the volumes are in pool %q, where their group snapshot lives too", p.Pool)
	}
	sources := strings.Join(r.ids, ",")
	rec, created, err := journal.Reserve(ctx, p, journal.GroupSnapshot, r.name, map[string]string{attrGroupSources: sources})
	if err != nil {
		return nil, err
	}
	if !created && rec.Attrs[attrGroupSources] != sources {
		return nil, status.Errorf(codes.AlreadyExists, "group snapshot %q exists of volumes [%s], not [%s]", r.name, rec.Attrs[attrGroupSources], sources)
	}
	faultpoint.Hit("rbd.CreateVolumeGroupSnapshot.reserved")
	gid := volid.RBDGroupSnapshot{ClusterID: first.ClusterID, PoolID: first.PoolID, Namespace: first.Namespace, UID: rec.UID}
	if gs, ok := groupFromRecord(*rec, gid); ok {
		// cut and handed out: it stays valid even if a source volume was deleted since
		return &csi.CreateVolumeGroupSnapshotResponse{GroupSnapshot: gs}, nil
	}
	var members []groupMember
	if err = checkGroupSources(ctx, p, r.volumes); err == nil {
		members, err = cutGroupSnapshot(ctx, p, rec.UID, r.volumes)
	}
	if err != nil {
		if controller.Permanent(err) {
			// no ID was handed out: remove what this or a killed earlier call made
			if cerr := removeGroupSnapshot(ctx, p, rec.UID, rec, r.volumes); cerr != nil {
				klog.FromContext(ctx).Error(cerr, "Could not remove what a failed group snapshot made", "name", r.name)
			}
		}
		return nil, err
	}
	b, err := json.Marshal(members)
	if err != nil {
		return nil, err
	}
	rec.Attrs[attrGroupMembers] = string(b)
	rec.Attrs[attrCreated] = earliest(members).UTC().Format(time.RFC3339Nano)
	if err := journal.SetAttrs(ctx, p, journal.GroupSnapshot, rec); err != nil {
		return nil, err
	}
	klog.FromContext(ctx).V(2).Info("Group snapshot ready", "group", p.String()+"/"+gid.String(), "name", r.name, "members", len(members))
	gs, _ := groupFromRecord(*rec, gid)
	return &csi.CreateVolumeGroupSnapshotResponse{GroupSnapshot: gs}, nil
}

func earliest(members []groupMember) time.Time {
	t := members[0].Created
	for _, m := range members[1:] {
		if m.Created.Before(t) {
			t = m.Created
		}
	}
	return t
}

// membersOf decodes the members a completed group snapshot's reservation recorded; ok is
// false while the snapshot is being cut.
func membersOf(rec journal.Record) (members []groupMember, created time.Time, ok bool) {
	created, err := time.Parse(time.RFC3339Nano, rec.Attrs[attrCreated])
	if err != nil {
		return nil, time.Time{}, false
	}
	if json.Unmarshal([]byte(rec.Attrs[attrGroupMembers]), &members) != nil || len(members) == 0 {
		return nil, time.Time{}, false
	}
	return members, created, true
}

// memberSnapshots are the CSI snapshots of a completed group snapshot's members.
func memberSnapshots(rec journal.Record, gid volid.RBDGroupSnapshot) ([]*csi.Snapshot, time.Time, bool) {
	members, created, ok := membersOf(rec)
	if !ok {
		return nil, time.Time{}, false
	}
	out := make([]*csi.Snapshot, 0, len(members))
	for _, m := range members {
		v := volid.RBDVolume{ClusterID: gid.ClusterID, PoolID: gid.PoolID, Namespace: gid.Namespace, UID: m.UID}
		out = append(out, &csi.Snapshot{
			SnapshotId: gid.Member(v).String(), SourceVolumeId: v.String(), SizeBytes: m.Size,
			CreationTime: timestamppb.New(m.Created), ReadyToUse: true, GroupSnapshotId: gid.String(),
		})
	}
	return out, created, true
}

func groupFromRecord(rec journal.Record, gid volid.RBDGroupSnapshot) (*csi.VolumeGroupSnapshot, bool) {
	snaps, created, ok := memberSnapshots(rec, gid)
	if !ok {
		return nil, false
	}
	return controller.GroupSnapshot(gid.String(), created, snaps), true
}

// memberIDs are the snapshot IDs of a group snapshot's members.
func memberIDs(snaps []*csi.Snapshot) []string {
	out := make([]string, len(snaps))
	for i, s := range snaps {
		out[i] = s.GetSnapshotId()
	}
	return out
}
