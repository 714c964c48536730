package rbd

import (
	"context"
	"time"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
	"github.com/container-storage-interface/spec/lib/go/csi"
	v1 "github.com/monoceph/monoceph/api/v1"
	"github.com/monoceph/monoceph/internal/cephcsi"
	"github.com/monoceph/monoceph/internal/controller"
	"github.com/monoceph/monoceph/internal/faultpoint"
	"github.com/monoceph/monoceph/internal/radosop"
	"github.com/monoceph/monoceph/internal/volid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/klog/v2"
)

// Snapshots of ceph-csi volumes.
//
// A ceph-csi snapshot of volume image V is a clone image C (csi-snap-<uuid>) carrying one
// snapshot of its own name, C@C; the point in time itself is a snapshot of V that was removed
// right after the clone was cut, so it lives on in V's trash namespace for as long as C needs
// it. Its journal entry csi.snap.<uuid> (csi.snapname, csi.imagename = C, csi.source = V) is
// in V's pool and namespace, its handle names V's pool.
//
// monoceph snapshots ceph-csi volumes the same way: the snapshot is then a ceph-csi snapshot in
// every respect, so restoring, deleting, listing and changed block queries have one model for
// all snapshots of a ceph-csi volume, and the way back to ceph-csi keeps them.

// features of the clone images of snapshots, as ceph-csi makes them: no object map (fast-diff
// needs one per image, and the image is never written).
var csiSnapshotFeatures = []string{"layering", "deep-flatten"}

func (c *Controller) instance() string { return c.opts.CephCSIInstanceID }

// createCSISnapshot snapshots ceph-csi volume src. Every step is checked before it is done, so
// a retry after a crash anywhere finishes the same snapshot: reservation (directory key, then
// entry), the point in time V@C, the clone C, V@C removed (into V's trash namespace), C@C.
// CreateSnapshot has found the cluster cl and locked the snapshot name.
func (c *Controller) createCSISnapshot(ctx context.Context, req *csi.CreateSnapshotRequest, cl v1.Cluster, src volid.Handle) (*csi.CreateSnapshotResponse, error) {
	name, srcID := req.GetName(), src.String()
	what := "source volume " + srcID
	conn, err := c.Connect(ctx, cl, req.GetSecrets())
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	loc, err := c.csiLocation(ctx, conn, src)
	if err != nil {
		return nil, orNotFound(err, what)
	}
	vol, err := c.csiEntry(ctx, loc, cephcsi.Volumes, src, what)
	if err != nil {
		return nil, err
	}
	if err := refuseEncrypted(vol, what); err != nil {
		return nil, err
	}
	image := vol.ImageName()
	// a missing source must not leave a reservation behind
	if _, err := (origin{loc: loc, image: image, what: what}).size(ctx); err != nil {
		return nil, err
	}
	e, _, err := cephcsi.Reserve(ctx, loc, cephcsi.Snapshots, c.instance(), name, func(id string) map[string]string {
		attrs := map[string]string{cephcsi.KeyImageName: cephcsi.Snapshots.DefaultName(id), cephcsi.KeySource: image}
		if ns := req.GetParameters()["csi.storage.k8s.io/volumesnapshot/namespace"]; ns != "" {
			attrs[cephcsi.KeyOwner] = ns
		}
		return attrs
	})
	if err != nil {
		return nil, err
	}
	if e.Attrs[cephcsi.KeySource] != image {
		return nil, status.Errorf(codes.AlreadyExists, "snapshot %q exists for source image %q, not %q (%s)", name, e.Attrs[cephcsi.KeySource], image, srcID)
	}
	faultpoint.Hit("rbd.CreateCephCSISnapshot.reserved")
	clone := e.ImageName()
	res, err := radosop.WithConn(ctx, loc, "snapshot "+image, func(r *rados.Conn, io *rados.IOContext) (csiCut, error) {
		return cutCSISnapshot(r, io, image, clone, c.opts.MaxCloneDepth)
	})
	if err != nil {
		c.giveBackCSI(ctx, loc, e, err, clone)
		return nil, err
	}
	if e.Attrs[cephcsi.KeyImageID] != res.id {
		if err := cephcsi.SetAttrs(ctx, loc, e, map[string]string{cephcsi.KeyImageID: res.id}); err != nil {
			return nil, err
		}
	}
	id := volid.Handle{ClusterID: src.ClusterID, LocationID: src.LocationID, UUID: e.UUID}
	klog.FromContext(ctx).V(2).Info("ceph-csi snapshot ready", "snapshot", loc.String()+"/"+clone+"@"+clone, "source", image, "name", name)
	return &csi.CreateSnapshotResponse{Snapshot: &csi.Snapshot{
		SnapshotId: id.String(), SourceVolumeId: srcID, SizeBytes: int64(res.size),
		CreationTime: timestamppb.New(res.created), ReadyToUse: true,
	}}, nil
}

// csiCut is what a finished ceph-csi snapshot reports.
type csiCut struct {
	size    uint64
	created time.Time
	id      string // the clone image's ID (csi.imageid)
}

// cutCSISnapshot makes (or finishes) the snapshot of image whose clone is named clone.
func cutCSISnapshot(r *rados.Conn, io *rados.IOContext, image, clone string, maxDepth int) (csiCut, error) {
	st, err := inspect(io, clone)
	if err != nil {
		return csiCut{}, err
	}
	if err := ensureCSIClone(io, image, clone, st); err != nil {
		return csiCut{}, err
	}
	// the point in time moves to the source's trash namespace, where the clone keeps it
	if err := removeSnapshot(io, image, clone); err != nil {
		return csiCut{}, err
	}
	// the clone is open (watched) only while it changes: a watch a crash leaves keeps the
	// image from being removed until the OSDs time it out
	snap, ok := st.hasSnap(clone)
	if !ok {
		if err := withImage(io, clone, func(img *rbd.Image) error {
			_, err := img.CreateSnapshot(clone)
			return err
		}); err != nil {
			return csiCut{}, err
		}
	}
	faultpoint.Hit("rbd.CreateCephCSISnapshot.cut")
	if n, err := depth(r, io, clone, maxDepth); err != nil {
		return csiCut{}, err
	} else if n > maxDepth {
		if err := withImage(io, clone, (*rbd.Image).Flatten); err != nil {
			return csiCut{}, err
		}
	}
	img, err := rbd.OpenImageReadOnly(io, clone, rbd.NoSnapshot)
	if err != nil {
		return csiCut{}, err
	}
	defer img.Close()
	if !ok {
		if snap, err = userSnap(img, clone); err != nil {
			return csiCut{}, err
		}
	}
	ts, err := img.GetCreateTimestamp()
	if err != nil {
		return csiCut{}, err
	}
	id, err := img.GetId()
	if err != nil {
		return csiCut{}, err
	}
	return csiCut{size: snap.Size, created: time.Unix(ts.Sec, ts.Nsec), id: id}, nil
}

// ensureCSIClone makes the clone of image's snapshot named clone (st is the clone's state),
// first snapshotting the source unless an earlier attempt did, and removing a half-made clone.
func ensureCSIClone(io *rados.IOContext, image, clone string, st imageState) error {
	if _, done := st.hasSnap(clone); st.exists && st.parent == nil && !done {
		// librbd writes a clone's header before attaching its parent: a kill in between leaves
		// an image that is no clone yet (a flattened snapshot image has its own snapshot)
		if err := rbd.RemoveImage(io, clone); err != nil && !isNotFound(err) {
			return err
		}
		st.exists = false
	}
	if st.exists {
		return nil
	}
	src, err := inspect(io, image)
	if err != nil {
		return err
	}
	if !src.exists {
		return controller.NotFoundf("source image %s does not exist", image)
	}
	if _, ok := src.hasSnap(clone); !ok {
		img, err := rbd.OpenImage(io, image, rbd.NoSnapshot)
		if err != nil {
			return err
		}
		_, err = img.CreateSnapshot(clone)
		img.Close()
		if err != nil {
			return err
		}
	}
	faultpoint.Hit("rbd.CreateCephCSISnapshot.point")
	opts, err := imageOptions(csiSnapshotFeatures, "")
	if err != nil {
		return err
	}
	defer opts.Destroy()
	if err := opts.SetUint64(rbd.ImageOptionCloneFormat, 2); err != nil {
		return err
	}
	if err := createOrRepair(io, clone, func() error { return rbd.CloneImage(io, image, clone, io, clone, opts) }); err != nil {
		return err
	}
	faultpoint.Hit("rbd.CreateCephCSISnapshot.cloned")
	return nil
}

// userSnap finds a snapshot of img by name.
func userSnap(img *rbd.Image, name string) (rbd.SnapInfo, error) {
	snaps, err := img.GetSnapshotNames()
	if err != nil {
		return rbd.SnapInfo{}, err
	}
	for _, s := range snaps {
		if s.Name == name {
			return s, nil
		}
	}
	return rbd.SnapInfo{}, controller.NotFoundf("snapshot %s vanished", name)
}

// giveBackCSI releases the reservation of a snapshot whose creation failed for good, unless
// its clone image exists (then a retry or a delete takes it from there).
func (c *Controller) giveBackCSI(ctx context.Context, loc radosop.Location, e *cephcsi.Entry, cause error, clone string) {
	if !controller.Permanent(cause) {
		return
	}
	log := klog.FromContext(ctx)
	made, err := radosop.With(ctx, loc, "inspect remains of "+e.Name, func(io *rados.IOContext) (bool, error) {
		st, err := inspect(io, clone)
		return st.exists, err
	})
	if err != nil || made {
		log.V(2).Info("Keeping the reservation of a failed snapshot", "name", e.Name, "remains", made, "err", err)
		return
	}
	if err := cephcsi.Release(ctx, loc, c.instance(), e); err != nil {
		log.Error(err, "Could not give back the reservation of a failed snapshot", "name", e.Name)
	}
}

// deleteCSISnapshot removes a ceph-csi snapshot: C@C (into C's trash namespace when volumes
// were restored from it), then C (into the RBD trash while those volumes need it; their
// deletion purges it), then the journal entry. Nothing left is success.
func (c *Controller) deleteCSISnapshot(ctx context.Context, req *csi.DeleteSnapshotRequest, h volid.Handle) (*csi.DeleteSnapshotResponse, error) {
	ctx, t, done, err := c.deletionTarget(ctx, "DeleteSnapshot", "snapshot_id", h, cephcsi.Snapshots, req.GetSecrets())
	if err != nil {
		return nil, err
	}
	defer done()
	if t.poolGone || t.entry == nil {
		return &csi.DeleteSnapshotResponse{}, nil
	}
	loc, e := t.loc, t.entry
	clone := e.ImageName()
	if _, err := radosop.WithConn(ctx, loc, "delete snapshot image "+clone, func(r *rados.Conn, io *rados.IOContext) (struct{}, error) {
		return struct{}{}, deleteCSIImage(r, io, loc, clone)
	}); err != nil {
		return nil, err
	}
	faultpoint.Hit("rbd.DeleteCephCSISnapshot.removed")
	if err := cephcsi.Release(ctx, loc, c.instance(), e); err != nil {
		return nil, err
	}
	klog.FromContext(ctx).V(2).Info("ceph-csi snapshot deleted", "snapshot", h.String(), "image", loc.String()+"/"+clone)
	return &csi.DeleteSnapshotResponse{}, nil
}

// listCSIAt lists the ceph-csi snapshots in the pool a handle names.
func (c *Controller) listCSIAt(ctx context.Context, h volid.Handle, secrets map[string]string, keep func(*csi.Snapshot) bool) ([]*csi.Snapshot, error) {
	cl, err := c.Clusters.Cluster(h.ClusterID)
	if err != nil {
		return nil, nil
	}
	conn, err := c.Connect(ctx, cl, secrets)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	loc, err := c.csiLocation(ctx, conn, h)
	if isNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return c.csiSnapshotsIn(ctx, loc, h.ClusterID, h.LocationID, keep)
}

// csiSnapshotsIn lists ceph-csi's snapshot journal at loc. ceph-csi itself offers no
// ListSnapshots; what it would have answered is rebuilt from the journal and the clone
// images: the source volume's handle from csi.source (same cluster and pool, the UUID its
// name ends in), size and creation time from the clone. Entries whose clone is gone (a
// creation in progress) are left out.
func (c *Controller) csiSnapshotsIn(ctx context.Context, loc radosop.Location, clusterID string, poolID int64, keep func(*csi.Snapshot) bool) ([]*csi.Snapshot, error) {
	entries, err := cephcsi.List(ctx, loc, cephcsi.Snapshots, c.instance())
	if err != nil || len(entries) == 0 {
		return nil, err
	}
	return radosop.With(ctx, loc, "inspect ceph-csi snapshots", func(io *rados.IOContext) ([]*csi.Snapshot, error) {
		var out []*csi.Snapshot
		for _, e := range entries {
			s, ok, err := csiSnapshot(io, clusterID, poolID, e)
			if err != nil {
				return nil, err
			}
			if ok && (keep == nil || keep(s)) {
				out = append(out, s)
			}
		}
		return out, nil
	})
}

// csiSnapshot describes one ceph-csi snapshot; ok is false when its clone image or the
// clone's snapshot does not exist.
func csiSnapshot(io *rados.IOContext, clusterID string, poolID int64, e *cephcsi.Entry) (*csi.Snapshot, bool, error) {
	clone := e.ImageName()
	img, err := rbd.OpenImageReadOnly(io, clone, rbd.NoSnapshot)
	if isNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer img.Close()
	snap, err := userSnap(img, clone)
	if status.Code(err) == codes.NotFound {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	ts, err := img.GetCreateTimestamp()
	if err != nil {
		return nil, false, err
	}
	s := &csi.Snapshot{
		SnapshotId:   volid.Handle{ClusterID: clusterID, LocationID: poolID, UUID: e.UUID}.String(),
		SizeBytes:    int64(snap.Size),
		CreationTime: timestamppb.New(time.Unix(ts.Sec, ts.Nsec)),
		ReadyToUse:   true,
	}
	if u := cephcsi.UUIDOf(e.Attrs[cephcsi.KeySource]); u != "" {
		s.SourceVolumeId = volid.Handle{ClusterID: clusterID, LocationID: poolID, UUID: u}.String()
	}
	return s, true, nil
}
