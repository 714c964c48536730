package cephfs

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/classparam"
	"github.com/monoceph/monoceph/internal/controller"
	"github.com/monoceph/monoceph/internal/faultpoint"
	"github.com/monoceph/monoceph/internal/journal"
	"github.com/monoceph/monoceph/internal/volid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// GroupController is the CSI GroupController service for CephFS. A group snapshot is one
// ordinary CSI snapshot per volume (a subvolume snapshot with its reservation and reference
// tracker, so CreateVolume clones it or serves it as a shallow volume like any other), all cut
// while `fs quiesce` holds the volumes' writers paused, plus a reservation of its own that
// names them:
//
//	journal   gsnap.name.<request name>               sources, members, quiesce set, time
//	journal   snap.name.group:<group UID>:<volume UID> each member, marked with the group
//	snapshot  <group>/csi-vol-<v>@csi-snap-<member UID> each member's subvolume snapshot
//
// On managers without `fs quiesce` (before Ceph 19.2) CreateVolumeGroupSnapshot answers
// FAILED_PRECONDITION naming it.
type GroupController struct {
	csi.UnimplementedGroupControllerServer
	c *Controller
}

// Group returns the controller's GroupController service.
func (c *Controller) Group() *GroupController { return &GroupController{c: c} }

// Journal attributes of group snapshots: of the group's reservation, and the mark of a member's.
const (
	attrGroupSources  = "sources"       // source volume IDs, sorted, comma-separated
	attrGroupMembers  = "members"       // JSON []groupMember once every member is cut
	attrQuiesceSet    = "quiesceSet"    // the quiesce set of the latest attempt
	attrGroupSnapshot = "groupSnapshot" // on a member's reservation: its group snapshot's UID
)

// groupMember is one member as the group's reservation records it.
type groupMember struct {
	Volume   string `json:"volume"`   // the volume's UID
	Snapshot string `json:"snapshot"` // the member snapshot's UID
}

// GroupControllerGetCapabilities advertises group snapshots.
func (g *GroupController) GroupControllerGetCapabilities(context.Context, *csi.GroupControllerGetCapabilitiesRequest) (*csi.GroupControllerGetCapabilitiesResponse, error) {
	return controller.GroupCapabilities(), nil
}

// memberName is the snapshot reservation name of the member of group snapshot gs for volume v.
func memberName(gs, v string) string { return "group:" + gs + ":" + v }

// validateGroupCreate checks a CreateVolumeGroupSnapshot: CephFS volumes of this driver, on one
// filesystem of one cluster (one quiesce set pauses subvolumes of one filesystem).
func validateGroupCreate(req *csi.CreateVolumeGroupSnapshotRequest) ([]string, []volid.CephFSVolume, error) {
	ids, err := controller.CheckCreateGroupSnapshot(req)
	if err != nil {
		return nil, nil, err
	}
	var vols []volid.CephFSVolume
	for _, id := range ids {
		if volid.IsHandle(id) {
			// its journal, names and snapshot layout are ceph-csi's; a group snapshot of it would
			// need ceph-csi's group format, which the takeover does not implement
			return nil, nil, status.Errorf(codes.FailedPrecondition, "source_volume_ids: %s is a volume ceph-csi created: group snapshots take only volumes monoceph created", id)
		}
		v, err := volid.ParseCephFSVolume(id)
		if err != nil {
			return nil, nil, controller.NotFoundf("source volume %q does not exist", id)
		}
		if len(vols) > 0 && (v.ClusterID != vols[0].ClusterID || v.FSCID != vols[0].FSCID) {
			return nil, nil, controller.NotTogether("%s and %s are on different filesystems", id, vols[0].String())
		}
		vols = append(vols, v)
	}
	if err := classparam.UnknownParams(req.GetParameters(), paramClusterID, paramFSName); err != nil {
		return nil, nil, err
	}
	if c, ok := req.GetParameters()[paramClusterID]; ok && c != vols[0].ClusterID {
		return nil, nil, classparam.InvalidParam(paramClusterID, "the volumes are on cluster %q", vols[0].ClusterID)
	}
	return ids, vols, nil
}

// CreateVolumeGroupSnapshot reserves the group's name and one snapshot per volume, pauses the
// volumes with `fs quiesce`, cuts every member snapshot, and releases them. A release that
// fails (the set expired or lost a member first) means the cut was not one point in time: the
// member snapshots go again and the answer is ABORTED, so the CO retries.
func (g *GroupController) CreateVolumeGroupSnapshot(ctx context.Context, req *csi.CreateVolumeGroupSnapshotRequest) (*csi.CreateVolumeGroupSnapshotResponse, error) {
	c := g.c
	ids, vols, err := validateGroupCreate(req)
	if err != nil {
		return nil, err
	}
	name, first := req.GetName(), vols[0]
	cl, err := c.Cluster(first.ClusterID, codes.NotFound, "source_volume_ids")
	if err != nil {
		return nil, err
	}
	ctx, unlock, err := c.opts.Locks.TryLockContext(ctx, "CreateVolumeGroupSnapshot", append([]string{"cephfs-group-snapshot-name:" + name}, ids...)...)
	if err != nil {
		return nil, err
	}
	defer unlock()
	s, err := c.siteOf(ctx, cl, first.FSCID, req.GetSecrets(), "source volume "+first.String())
	if err != nil {
		return nil, err
	}
	defer s.release()
	if fs, ok := req.GetParameters()[paramFSName]; ok && fs != s.fs.Name {
		return nil, classparam.InvalidParam(paramFSName, "the volumes are on filesystem %q", s.fs.Name)
	}
	joined := strings.Join(ids, ",")
	gid := volid.CephFSGroupSnapshot{ClusterID: first.ClusterID, FSCID: first.FSCID}
	rec, err := journal.Lookup(ctx, s.journal(), journal.GroupSnapshot, name)
	if err != nil {
		return nil, err
	}
	if rec != nil && rec.Attrs[attrGroupSources] != joined {
		return nil, status.Errorf(codes.AlreadyExists, "group snapshot %q exists of volumes [%s], not [%s]", name, rec.Attrs[attrGroupSources], joined)
	}
	if rec != nil && rec.Attrs[attrCreated] != "" {
		// cut and handed out: it stays valid even if a source volume was deleted since
		gid.UID = rec.UID
		gs, err := c.groupSnapshot(ctx, s, gid, rec)
		if err != nil {
			return nil, err
		}
		return &csi.CreateVolumeGroupSnapshotResponse{GroupSnapshot: gs}, nil
	}
	if ok, err := c.canQuiesce(ctx, cl.ClusterID, s); err != nil || !ok {
		if err == nil {
			err = errNoQuiesce(cl.ClusterID)
		}
		return nil, err
	}
	sources, err := checkGroupSources(ctx, s, vols)
	if err != nil {
		if rec != nil && controller.Permanent(err) {
			// a killed earlier attempt's members and reservation: nothing was handed out
			gid.UID = rec.UID
			if cerr := c.removeGroup(ctx, s, gid, rec, nil); cerr != nil {
				klog.FromContext(ctx).Error(cerr, "Could not remove what a failed group snapshot made", "name", name)
			}
		}
		return nil, err
	}
	rec, _, err = journal.Reserve(ctx, s.journal(), journal.GroupSnapshot, name, map[string]string{attrGroupSources: joined})
	if err != nil {
		return nil, err
	}
	faultpoint.Hit("cephfs.CreateVolumeGroupSnapshot.reserved")
	gid.UID = rec.UID
	members, err := c.reserveMembers(ctx, s, rec.UID, vols, sources)
	if err != nil {
		return nil, err
	}
	if err := c.cutMembers(ctx, s, rec, members); err != nil {
		return nil, err
	}
	gs, err := c.recordGroup(ctx, s, gid, rec, members)
	if err != nil {
		return nil, err
	}
	klog.FromContext(ctx).V(2).Info("Group snapshot ready", "group", gid.String(), "name", name, "members", len(members))
	return &csi.CreateVolumeGroupSnapshotResponse{GroupSnapshot: gs}, nil
}

// checkGroupSources reads the reservations of the source volumes: each must be a complete
// volume with a subvolume (a shallow volume has none).
func checkGroupSources(ctx context.Context, s site, vols []volid.CephFSVolume) ([]*journal.Record, error) {
	sources := make([]*journal.Record, len(vols))
	for i, v := range vols {
		rec, err := journal.Get(ctx, s.journal(), journal.Volume, v.UID)
		if err != nil {
			return nil, err
		}
		switch {
		case rec == nil || rec.Attrs[attrState] != stateReady:
			return nil, controller.NotFoundf("source volume %q does not exist", v.String())
		case rec.Attrs[attrKind] == kindShallow:
			return nil, status.Errorf(codes.InvalidArgument, "source volume %q is a shallow read-only volume, which has no subvolume to snapshot", v.String())
		}
		sources[i] = rec
	}
	return sources, nil
}

// reserveMembers reserves one snapshot per volume, each with the reference tracker every
// snapshot has before it is cut (see CreateSnapshot).
func (c *Controller) reserveMembers(ctx context.Context, s site, gsUID string, vols []volid.CephFSVolume, sources []*journal.Record) ([]*journal.Record, error) {
	out := make([]*journal.Record, len(vols))
	for i, v := range vols {
		src := sources[i]
		rec, _, err := journal.Reserve(ctx, s.journal(), journal.Snapshot, memberName(gsUID, v.UID), map[string]string{
			attrSourceVolume: v.String(), attrGroup: src.Attrs[attrGroup], attrSubvolume: subvolumeName(src.UID),
			attrSnapSize: src.Attrs[attrSize], attrRootPath: src.Attrs[attrRootPath], attrGroupSnapshot: gsUID,
		})
		if err != nil {
			return nil, err
		}
		if err := c.trackSnapshot(ctx, s, rec); err != nil {
			return nil, err
		}
		out[i] = rec
	}
	faultpoint.Hit("cephfs.CreateVolumeGroupSnapshot.members")
	return out, nil
}

// cutMembers cuts every member snapshot inside one quiesce set. Member snapshots an earlier,
// interrupted attempt cut were not cut with these, so they go first; a set an earlier attempt
// left paused is released.
func (c *Controller) cutMembers(ctx context.Context, s site, rec *journal.Record, members []*journal.Record) error {
	if old := rec.Attrs[attrQuiesceSet]; old != "" {
		if err := c.releaseMembers(ctx, s, old, 0); err != nil {
			klog.FromContext(ctx).V(2).Info("Quiesce set of an interrupted attempt not released (it expires by itself)", "set", old, "err", err)
		}
	}
	if err := removeMemberSnapshots(s, members); err != nil {
		return err
	}
	set := rec.UID + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	rec.Attrs[attrQuiesceSet] = set
	if err := journal.SetAttrs(ctx, s.journal(), journal.GroupSnapshot, rec); err != nil {
		return err
	}
	paths := make([]string, len(members))
	for i, m := range members {
		paths[i] = m.Attrs[attrGroup] + "/" + m.Attrs[attrSubvolume]
	}
	version, err := c.quiesceMembers(ctx, s, set, paths)
	if err != nil {
		return err
	}
	faultpoint.Hit("cephfs.CreateVolumeGroupSnapshot.quiesced")
	for _, m := range members {
		err := s.admin.CreateSubVolumeSnapshot(s.fs.Name, m.Attrs[attrGroup], m.Attrs[attrSubvolume], snapName(m.UID))
		if err != nil && !ceph.Is(err, ceph.ErrExists) {
			_ = c.releaseMembers(ctx, s, set, 0) // don't leave the writers paused until expiry
			return ceph.Wrap("snapshot "+m.Attrs[attrSubvolume], err)
		}
	}
	faultpoint.Hit("cephfs.CreateVolumeGroupSnapshot.cut")
	if err := c.releaseMembers(ctx, s, set, version); err != nil {
		if rerr := removeMemberSnapshots(s, members); rerr != nil {
			return rerr
		}
		return status.Errorf(codes.Aborted, "the volumes did not stay paused until every snapshot was cut (%v); retry", err)
	}
	return nil
}

// removeMemberSnapshots removes member snapshots that were never handed out.
func removeMemberSnapshots(s site, members []*journal.Record) error {
	for _, m := range members {
		if err := removeCephSnapshot(s, m.Attrs[attrGroup], m.Attrs[attrSubvolume], snapName(m.UID)); err != nil {
			return err
		}
	}
	return nil
}

// recordGroup records each member's creation time, then the group's: from then on the group
// snapshot and its members are handed out.
func (c *Controller) recordGroup(ctx context.Context, s site, gid volid.CephFSGroupSnapshot, rec *journal.Record, members []*journal.Record) (*csi.VolumeGroupSnapshot, error) {
	var list []groupMember
	var earliest time.Time
	for _, m := range members {
		info, err := s.admin.SubVolumeSnapshotInfo(s.fs.Name, m.Attrs[attrGroup], m.Attrs[attrSubvolume], snapName(m.UID))
		if err != nil {
			return nil, ceph.Wrap("snapshot info", err)
		}
		created := info.CreatedAt.UTC()
		m.Attrs[attrCreated] = created.Format(time.RFC3339Nano)
		if err := journal.SetAttrs(ctx, s.journal(), journal.Snapshot, m); err != nil {
			return nil, err
		}
		if earliest.IsZero() || created.Before(earliest) {
			earliest = created
		}
		v, _ := volid.ParseCephFSVolume(m.Attrs[attrSourceVolume])
		list = append(list, groupMember{Volume: v.UID, Snapshot: m.UID})
	}
	b, err := json.Marshal(list)
	if err != nil {
		return nil, err
	}
	rec.Attrs[attrGroupMembers] = string(b)
	rec.Attrs[attrCreated] = earliest.Format(time.RFC3339Nano)
	delete(rec.Attrs, attrQuiesceSet)
	if err := journal.SetAttrs(ctx, s.journal(), journal.GroupSnapshot, rec); err != nil {
		return nil, err
	}
	return c.groupSnapshot(ctx, s, gid, rec)
}

// groupMembers decodes the members a group snapshot's reservation names.
func groupMembers(rec *journal.Record) []groupMember {
	var list []groupMember
	_ = json.Unmarshal([]byte(rec.Attrs[attrGroupMembers]), &list)
	return list
}

// memberIDs are the snapshot IDs of the members a completed group snapshot's reservation names.
func memberIDs(gid volid.CephFSGroupSnapshot, rec *journal.Record) []string {
	var out []string
	for _, m := range groupMembers(rec) {
		out = append(out, volid.CephFSSnapshot{CephFSVolume: volid.CephFSVolume{ClusterID: gid.ClusterID, FSCID: gid.FSCID, UID: m.Volume}, SnapUID: m.Snapshot}.String())
	}
	return out
}

// groupSnapshot builds the answer for a completed group snapshot from its members'
// reservations.
func (c *Controller) groupSnapshot(ctx context.Context, s site, gid volid.CephFSGroupSnapshot, rec *journal.Record) (*csi.VolumeGroupSnapshot, error) {
	created, err := time.Parse(time.RFC3339Nano, rec.Attrs[attrCreated])
	if err != nil {
		return nil, status.Errorf(codes.Internal, "group snapshot %s has no valid creation time", gid.String())
	}
	var snaps []*csi.Snapshot
	for _, m := range groupMembers(rec) {
		mrec, err := journal.Get(ctx, s.journal(), journal.Snapshot, m.Snapshot)
		if err != nil {
			return nil, err
		}
		if mrec == nil {
			// members go first when a group snapshot is deleted
			return nil, controller.NotFoundf("group snapshot %s is being deleted: its member %s is gone", gid.String(), m.Snapshot)
		}
		id := volid.CephFSSnapshot{CephFSVolume: volid.CephFSVolume{ClusterID: gid.ClusterID, FSCID: gid.FSCID, UID: m.Volume}, SnapUID: m.Snapshot}
		snap, ok := snapshotFromRecord(*mrec, id)
		if !ok {
			return nil, ceph.NewError("group snapshot", ceph.ErrInconsistent, "member "+m.Snapshot+" of "+gid.String()+" was never cut")
		}
		snaps = append(snaps, snap)
	}
	return controller.GroupSnapshot(gid.String(), created, snaps), nil
}

// groupOfMember is the group snapshot ID of a member's reservation ("" for a snapshot of its
// own).
func groupOfMember(rec journal.Record, id volid.CephFSSnapshot) string {
	gs := rec.Attrs[attrGroupSnapshot]
	if gs == "" {
		return ""
	}
	return volid.CephFSGroupSnapshot{ClusterID: id.ClusterID, FSCID: id.FSCID, UID: gs}.String()
}

func splitIDs(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}
