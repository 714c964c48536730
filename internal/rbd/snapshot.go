package rbd

import (
	"context"
	"errors"
	"maps"
	"strconv"
	"time"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
	"github.com/container-storage-interface/spec/lib/go/csi"
	v1 "github.com/monoceph/monoceph/api/v1"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/controller"
	"github.com/monoceph/monoceph/internal/faultpoint"
	"github.com/monoceph/monoceph/internal/journal"
	"github.com/monoceph/monoceph/internal/owner"
	"github.com/monoceph/monoceph/internal/radosop"
	"github.com/monoceph/monoceph/internal/rbd/rbdname"
	"github.com/monoceph/monoceph/internal/volid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/klog/v2"
)

// Journal attributes of a snapshot reservation.
const (
	attrSourceVolume = "sourceVolume"
	attrCreated      = "created" // RFC 3339 with nanoseconds, set once the snapshot is cut
	attrSnapSize     = "size"
)

// CreateSnapshot cuts one RBD snapshot of the source image; the reservation (in the source's
// pool and namespace) makes it idempotent by name and records size and creation time for
// ListSnapshots.
func (c *Controller) CreateSnapshot(ctx context.Context, req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	if err := controller.CheckCreateSnapshot(req, paramPool); err != nil {
		return nil, err
	}
	srcID := req.GetSourceVolumeId()
	sid, err := parseVolumeID(srcID)
	if err != nil {
		return nil, controller.NotFoundf("source volume %q does not exist", srcID)
	}
	if sid.CSI != nil {
		return c.createSnapshotOfCSI(ctx, req, *sid.CSI)
	}
	return c.createSnapshotOf(ctx, req, sid.Own)
}

// createSnapshotOfCSI is CreateSnapshot of a volume ceph-csi created: the snapshot is
// ceph-csi's too (createCSISnapshot).
func (c *Controller) createSnapshotOfCSI(ctx context.Context, req *csi.CreateSnapshotRequest, h volid.Handle) (*csi.CreateSnapshotResponse, error) {
	srcID := req.GetSourceVolumeId()
	if err := controller.CheckSnapshotCluster(req.GetParameters(), srcID, h.ClusterID); err != nil {
		return nil, err
	}
	cl, err := c.csiCluster(h.ClusterID, codes.NotFound, "source_volume_id")
	if err != nil {
		return nil, err
	}
	ctx, unlock, err := c.opts.Locks.TryLockContext(ctx, "CreateSnapshot", "rbd-snapshot-name:"+req.GetName(), srcID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return c.createCSISnapshot(ctx, req, cl, h)
}

// createSnapshotOf is CreateSnapshot of a volume monoceph created.
func (c *Controller) createSnapshotOf(ctx context.Context, req *csi.CreateSnapshotRequest, src volid.RBDVolume) (*csi.CreateSnapshotResponse, error) {
	name, srcID := req.GetName(), req.GetSourceVolumeId()
	srcCluster := src.ClusterID
	if cl, err := c.Clusters.RBDCluster(srcCluster); err == nil && cl.MirrorOf != "" && req.GetParameters()[controller.ParamClusterID] == cl.ClusterID {
		// a mirror peer's volume on this site (volume replication): its class names this site
		srcCluster = cl.ClusterID
	}
	if err := controller.CheckSnapshotCluster(req.GetParameters(), srcID, srcCluster); err != nil {
		return nil, err
	}
	cl, err := c.idCluster(src.ClusterID, codes.NotFound, "source_volume_id")
	if err != nil {
		return nil, err
	}
	ctx, unlock, err := c.opts.Locks.TryLockContext(ctx, "CreateSnapshot", "rbd-snapshot-name:"+name, srcID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	p, _, err := c.locate(ctx, cl, src.PoolID, src.Namespace, req.GetSecrets())
	if err != nil {
		return nil, orNotFound(err, "source volume "+srcID)
	}
	defer p.Conn.Release()
	image := rbdname.Image(src.UID)
	// a missing source must not leave a reservation (or a journal object) behind
	if _, err := (origin{loc: p, image: image, what: "source volume " + srcID}).size(ctx); err != nil {
		return nil, err
	}
	rec, err := c.reserveSnapshot(ctx, p, req)
	if err != nil {
		return nil, err
	}
	faultpoint.Hit("rbd.CreateSnapshot.reserved")
	id := volid.RBDSnapshot{RBDVolume: src, SnapUID: rec.UID}
	if rec.Attrs[attrCreated] != "" {
		if snap, ok := snapshotFromRecord(*rec, id); ok {
			return &csi.CreateSnapshotResponse{Snapshot: snap}, nil
		}
	}
	if err := cutSnapshot(ctx, p, rec, image, srcID); err != nil {
		return nil, err
	}
	klog.FromContext(ctx).V(2).Info("Snapshot ready", "snapshot", p.String()+"/"+image+"@"+rbdname.Snapshot(rec.UID), "name", name)
	snap, _ := snapshotFromRecord(*rec, id)
	return &csi.CreateSnapshotResponse{Snapshot: snap}, nil
}

// reserveSnapshot reserves the snapshot's name next to its source. A reservation found again
// must be of the same source, and gets the ownership keys an older version did not record.
func (c *Controller) reserveSnapshot(ctx context.Context, p radosop.Location, req *csi.CreateSnapshotRequest) (*journal.Record, error) {
	name, srcID := req.GetName(), req.GetSourceVolumeId()
	own := owner.FromParams(req.GetParameters(), owner.SnapshotKeys, c.opts.ClusterName)
	attrs := map[string]string{attrSourceVolume: srcID}
	maps.Copy(attrs, own)
	rec, created, err := journal.Reserve(ctx, p, journal.Snapshot, name, attrs)
	if err != nil {
		return nil, err
	}
	if !created && rec.Attrs[attrSourceVolume] != srcID {
		return nil, status.Errorf(codes.AlreadyExists, "snapshot %q exists for source volume %q, not %q", name, rec.Attrs[attrSourceVolume], srcID)
	}
	if !created {
		// a reservation of an older version, or of a request without the names
		if err := setRecordOwner(ctx, p, journal.Snapshot, rec, own); err != nil {
			return nil, err
		}
	}
	return rec, nil
}

// cutSnapshot cuts the reservation's snapshot of image unless an earlier attempt did, and
// records its size and creation time; a cut that fails for good gives the reservation back.
func cutSnapshot(ctx context.Context, p radosop.Location, rec *journal.Record, image, srcID string) error {
	sname := rbdname.Snapshot(rec.UID)
	type cut struct {
		size    uint64
		created time.Time
	}
	res, err := radosop.With(ctx, p, "snapshot "+image, func(io *rados.IOContext) (cut, error) {
		st, err := inspect(io, image)
		if err != nil {
			return cut{}, err
		}
		if !st.exists || st.deleted {
			return cut{}, controller.NotFoundf("source volume %q does not exist", srcID)
		}
		img, err := rbd.OpenImage(io, image, rbd.NoSnapshot)
		if err != nil {
			return cut{}, err
		}
		defer img.Close()
		info, ok := st.hasSnap(sname)
		if !ok {
			if _, err := img.CreateSnapshot(sname); err != nil {
				return cut{}, err
			}
			faultpoint.Hit("rbd.CreateSnapshot.cut")
		}
		// also a snapshot an interrupted call cut: it is not acknowledged yet
		if err := keyRotationAborts(io, img, img.GetSnapshot(sname).Remove); err != nil {
			return cut{}, err
		}
		if !ok {
			snaps, err := img.GetSnapshotNames()
			if err != nil {
				return cut{}, err
			}
			for _, s := range snaps {
				if s.Name == sname {
					info = s
				}
			}
		}
		ts, err := img.GetSnapTimestamp(info.Id)
		if err != nil {
			return cut{}, err
		}
		// an encrypted volume's snapshot is the size of the volume, not of its image
		enc, err := readEncryption(img)
		if err != nil {
			return cut{}, err
		}
		if enc != nil && info.Size > enc.HeaderBytes {
			info.Size -= enc.HeaderBytes
		}
		return cut{size: info.Size, created: time.Unix(ts.Sec, ts.Nsec)}, nil
	})
	if err != nil {
		giveBack(ctx, p, journal.Snapshot, rec, err, func(io *rados.IOContext) (bool, error) {
			st, err := inspect(io, image)
			_, cut := st.hasSnap(sname)
			return cut, err
		})
		return err
	}
	rec.Attrs[attrCreated] = res.created.UTC().Format(time.RFC3339Nano)
	rec.Attrs[attrSnapSize] = strconv.FormatUint(res.size, 10)
	return journal.SetAttrs(ctx, p, journal.Snapshot, rec)
}

func snapshotFromRecord(rec journal.Record, id volid.RBDSnapshot) (*csi.Snapshot, bool) {
	created, err := time.Parse(time.RFC3339Nano, rec.Attrs[attrCreated])
	if err != nil {
		return nil, false
	}
	size, err := strconv.ParseInt(rec.Attrs[attrSnapSize], 10, 64)
	if err != nil {
		return nil, false
	}
	return &csi.Snapshot{
		SnapshotId: id.String(), SourceVolumeId: rec.Attrs[attrSourceVolume],
		SizeBytes: size, CreationTime: timestamppb.New(created), ReadyToUse: true,
	}, true
}

// DeleteSnapshot removes the RBD snapshot (clone v2 moves one with clones to the trash
// namespace, where the clones keep it), then the reservation, then a hidden deleted volume
// whose last snapshot this was.
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
	if id.Member {
		return c.deleteMember(ctx, id, req.GetSecrets())
	}
	cl, err := c.idCluster(id.ClusterID, codes.FailedPrecondition, "snapshot_id")
	if err != nil {
		return nil, err
	}
	ctx, unlock, err := c.opts.Locks.TryLockContext(ctx, "DeleteSnapshot", raw, id.RBDVolume.String())
	if err != nil {
		return nil, err
	}
	defer unlock()
	p, gone, err := c.locate(ctx, cl, id.PoolID, id.Namespace, req.GetSecrets())
	if gone {
		return &csi.DeleteSnapshotResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer p.Conn.Release()
	image := rbdname.Image(id.UID)
	_, err = radosop.With(ctx, p, "delete snapshot", func(io *rados.IOContext) (struct{}, error) {
		return struct{}{}, removeSnapshot(io, image, rbdname.Snapshot(id.SnapUID))
	})
	if err != nil {
		return nil, err
	}
	faultpoint.Hit("rbd.DeleteSnapshot.removed")
	if err := journal.Release(ctx, p, journal.Snapshot, id.SnapUID); err != nil {
		return nil, err
	}
	_, err = radosop.WithConn(ctx, p, "collect deleted volume", func(r *rados.Conn, io *rados.IOContext) (struct{}, error) {
		st, err := inspect(io, image)
		if err != nil || !st.deleted {
			return struct{}{}, err
		}
		return struct{}{}, deleteImage(r, io, image, false)
	})
	if err != nil {
		return nil, err
	}
	return &csi.DeleteSnapshotResponse{}, nil
}

// ListSnapshots reads the snapshot journals, monoceph's and ceph-csi's: of the snapshot's or
// source volume's pool when filtered, else of every pool and RBD namespace of every cluster the
// secrets open.
func (c *Controller) ListSnapshots(ctx context.Context, req *csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error) {
	var all []*csi.Snapshot
	var err error
	switch {
	case req.GetSnapshotId() != "":
		want := req.GetSnapshotId()
		id, perr := parseSnapshotID(want)
		if perr != nil {
			return &csi.ListSnapshotsResponse{}, nil
		}
		keep := func(s *csi.Snapshot) bool { return s.GetSnapshotId() == want }
		all, err = c.listFor(ctx, id.CSI, id.Own.RBDVolume, req.GetSecrets(), keep)
	case req.GetSourceVolumeId() != "":
		want := req.GetSourceVolumeId()
		v, perr := parseVolumeID(want)
		if perr != nil {
			return &csi.ListSnapshotsResponse{}, nil
		}
		keep := func(s *csi.Snapshot) bool { return s.GetSourceVolumeId() == want }
		all, err = c.listFor(ctx, v.CSI, v.Own, req.GetSecrets(), keep)
	default:
		all, err = c.listEverywhere(ctx, req.GetSecrets())
	}
	if err != nil {
		return nil, err
	}
	return controller.Page(all, req.GetStartingToken(), req.GetMaxEntries(), func(tok string) bool {
		_, err := parseSnapshotID(tok)
		return err == nil
	})
}

// listFor lists the snapshots of the pool a snapshot or volume ID names: ceph-csi's journal
// for a handle h, else monoceph's in v's pool and namespace.
func (c *Controller) listFor(ctx context.Context, h *volid.Handle, v volid.RBDVolume, secrets map[string]string, keep func(*csi.Snapshot) bool) ([]*csi.Snapshot, error) {
	if h != nil {
		return c.listCSIAt(ctx, *h, secrets, keep)
	}
	return c.listAt(ctx, v.ClusterID, v.PoolID, v.Namespace, secrets, keep)
}

func (c *Controller) listAt(ctx context.Context, clusterID string, poolID int64, ns string, secrets map[string]string, keep func(*csi.Snapshot) bool) ([]*csi.Snapshot, error) {
	cl, err := c.Clusters.RBDCluster(clusterID)
	if err != nil {
		return nil, nil // not one of ours: nothing to list
	}
	p, gone, err := c.locate(ctx, cl, poolID, ns, secrets)
	if gone {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer p.Conn.Release()
	// the pool's own IDs (group snapshots) carry this cluster's ID and pool ID, also when the
	// listing came through a mirror peer's ID (locate mapped it already, so no error here)
	local, err := cl.RBDPoolID(poolID)
	if err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	return snapshotsIn(ctx, p, cl.ClusterID, local, keep)
}

func snapshotsIn(ctx context.Context, p radosop.Location, clusterID string, poolID int64, keep func(*csi.Snapshot) bool) ([]*csi.Snapshot, error) {
	recs, err := journal.List(ctx, p, journal.Snapshot)
	if err != nil {
		return nil, err
	}
	var out []*csi.Snapshot
	for _, r := range recs {
		src, err := volid.ParseRBDVolume(r.Attrs[attrSourceVolume])
		if err != nil {
			continue
		}
		s, ok := snapshotFromRecord(r, recordSnapshotID(src, r.UID))
		if ok && (keep == nil || keep(s)) {
			out = append(out, s)
		}
	}
	members, err := groupMembersIn(ctx, p, clusterID, poolID, keep)
	return append(out, members...), err
}

// recordSnapshotID is the ID CreateSnapshot minted for a snapshot record: the source volume's
// ID (as the record keeps it) with the snapshot's UID. Not the listing's cluster and pool: on
// the secondary of volume replication a snapshot of the peer's volume carries the peer's
// cluster ID and pool ID, which resolve here only together (B's cluster ID with A's pool ID
// would name another pool).
func recordSnapshotID(src volid.RBDVolume, snapUID string) volid.RBDSnapshot {
	return volid.RBDSnapshot{RBDVolume: src, SnapUID: snapUID}
}

func (c *Controller) listEverywhere(ctx context.Context, secrets map[string]string) ([]*csi.Snapshot, error) {
	var out []*csi.Snapshot
	for _, cl := range c.Clusters.Map() {
		found, err := c.listCluster(ctx, cl, secrets)
		if err != nil {
			return nil, err
		}
		out = append(out, found...)
	}
	return out, nil
}

func (c *Controller) listCluster(ctx context.Context, cl v1.Cluster, secrets map[string]string) ([]*csi.Snapshot, error) {
	conn, err := c.Connect(ctx, cl, secrets)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	type loc struct {
		pool string
		id   int64
		ns   string
	}
	locs, err := ceph.Call(ctx, conn, "list pools", func(r *rados.Conn) ([]loc, error) {
		pools, err := r.ListPools()
		if err != nil {
			return nil, err
		}
		var out []loc
		for _, pool := range pools {
			id, err := r.GetPoolByName(pool)
			if err != nil {
				continue
			}
			io, err := r.OpenIOContext(pool)
			if err != nil {
				continue
			}
			nss, err := rbd.NamespaceList(io)
			io.Destroy()
			if err != nil {
				continue // not an RBD pool (CephFS data and metadata pools)
			}
			for _, ns := range append([]string{""}, nss...) {
				out = append(out, loc{pool, id, ns})
			}
		}
		return out, nil
	})
	if err != nil {
		return nil, err
	}
	var out []*csi.Snapshot
	for _, l := range locs {
		loc := radosop.Location{Conn: conn, Pool: l.pool, Namespace: l.ns}
		found, err := snapshotsIn(ctx, loc, cl.ClusterID, l.id, nil)
		if err != nil && !errors.Is(err, ceph.ErrPermission) {
			return nil, err
		}
		out = append(out, found...)
		// ceph-csi keeps its journal in the cluster's configured namespace only, and its
		// handles do not name one: entries elsewhere could not be resolved from their IDs
		if l.ns != cl.RBD.RadosNamespace {
			continue
		}
		found, err = c.csiSnapshotsIn(ctx, loc, cl.ClusterID, l.id, nil)
		if err != nil && !errors.Is(err, ceph.ErrPermission) {
			return nil, err
		}
		out = append(out, found...)
	}
	return out, nil
}
