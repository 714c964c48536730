package cephfs

import (
	"context"
	"errors"
	"strconv"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephcsi"
	"github.com/monoceph/monoceph/internal/cephfs/volumecontext"
	"github.com/monoceph/monoceph/internal/controller"
	"github.com/monoceph/monoceph/internal/faultpoint"
	"github.com/monoceph/monoceph/internal/journal"
	"github.com/monoceph/monoceph/internal/reftracker"
	"github.com/monoceph/monoceph/internal/volid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// References a snapshot's tracker holds.
const snapshotRef = "snapshot"

func volumeRef(uid string) string { return "volume." + uid }

// Journal attributes of a shallow volume: its backing snapshot, which outlives the CSI
// snapshot's own reservation while shallow volumes use it.
const (
	attrSnapUID     = "snapUID"
	attrSnapshot    = "snapshot"
	attrBackingSize = "snapSize"
	// attrBackingHandle is the handle of a ceph-csi snapshot backing the volume, whose
	// tracker is ceph-csi's (see cephcsi_snapshot.go)
	attrBackingHandle = "cephcsiSnapshot"
)

// backing is the Ceph snapshot behind a shallow volume.
type backing struct {
	snapUID   string // also the reference tracker's ID (monoceph's snapshots)
	csi       string // the snapshot's handle (ceph-csi's snapshots; snapUID is then empty)
	group     string
	subvolume string
	snapshot  string
	rootPath  string // the source subvolume's path when the snapshot was cut
	size      int64
}

func backingFromShallow(rec *journal.Record) backing {
	size, _ := strconv.ParseInt(rec.Attrs[attrBackingSize], 10, 64)
	return backing{snapUID: rec.Attrs[attrSnapUID], csi: rec.Attrs[attrBackingHandle], group: rec.Attrs[attrGroup],
		subvolume: rec.Attrs[attrSrcSubvolume], snapshot: rec.Attrs[attrSnapshot], rootPath: rec.Attrs[attrRootPath], size: size}
}

// backingOf resolves the snapshot a shallow volume would expose: the source snapshot, or the
// backing snapshot of a shallow source volume. A regular source volume cannot back a shallow
// volume (there is no snapshot to expose).
func (c *Controller) backingOf(ctx context.Context, s site, src source) (backing, error) {
	switch {
	case src.Snap != nil && src.Snap.CSI != nil:
		return c.csiBacking(ctx, s, src.Snap.CSI.String(), "source snapshot "+src.Snap.String())
	case src.Vol != nil && src.Vol.CSI != nil:
		what := "source volume " + src.Vol.String()
		e, err := c.csiVolume(ctx, s, *src.Vol.CSI, what)
		if err != nil {
			return backing{}, err
		}
		snap := e.Attrs[cephcsi.KeyBackingSnapshot]
		if snap == "" {
			return backing{}, notShallowSource(src.Vol.String())
		}
		return c.csiBacking(ctx, s, snap, what)
	}
	if src.Vol != nil {
		rec, err := journal.Get(ctx, s.journal(), journal.Volume, src.Vol.Own.UID)
		if err != nil {
			return backing{}, err
		}
		if rec == nil || rec.Attrs[attrState] != stateReady {
			return backing{}, controller.NotFoundf("source volume %q does not exist", src.Vol.String())
		}
		if rec.Attrs[attrKind] != kindShallow {
			return backing{}, notShallowSource(src.Vol.String())
		}
		return backingFromShallow(rec), nil
	}
	rec, err := journal.Get(ctx, s.journal(), journal.Snapshot, src.Snap.Own.SnapUID)
	if err != nil {
		return backing{}, err
	}
	if rec == nil || rec.Attrs[attrCreated] == "" {
		return backing{}, controller.NotFoundf("source snapshot %q does not exist", src.Snap.String())
	}
	size, _ := strconv.ParseInt(rec.Attrs[attrSnapSize], 10, 64)
	return backing{snapUID: rec.UID, group: rec.Attrs[attrGroup], subvolume: rec.Attrs[attrSubvolume],
		snapshot: snapName(rec.UID), rootPath: rec.Attrs[attrRootPath], size: size}, nil
}

func notShallowSource(id string) error {
	return status.Errorf(codes.InvalidArgument,
		"volume_content_source: a read-only volume from regular volume %q would be shallow, which needs a snapshot: use a snapshot source, or parameters[%q]=\"false\" for a full copy",
		id, paramBackingSnapshot)
}

// createShallow makes a read-only volume that exposes a snapshot: a reservation and a
// reference in the snapshot's tracker, no subvolume and no data copied.
func (c *Controller) createShallow(ctx context.Context, s site, r request, b backing) (*csi.CreateVolumeResponse, error) {
	rec, created, err := journal.Reserve(ctx, s.journal(), journal.Volume, r.req.GetName(), map[string]string{
		attrKind: kindShallow, attrSource: r.src.String(), attrSize: "0", attrSnapUID: b.snapUID, attrGroup: b.group,
		attrSrcSubvolume: b.subvolume, attrSnapshot: b.snapshot, attrRootPath: b.rootPath, attrBackingSize: strconv.FormatInt(b.size, 10),
		attrBackingHandle: b.csi,
	})
	if err != nil {
		return nil, err
	}
	if !created {
		if err := compatible(rec, r.req, r.src, kindShallow); err != nil {
			return nil, err
		}
		b = backingFromShallow(rec)
	}
	id := volid.CephFSVolume{ClusterID: r.params.ClusterID, FSCID: s.fs.ID, UID: rec.UID}
	resp := &csi.CreateVolumeResponse{Volume: &csi.Volume{
		VolumeId:      id.String(),
		CapacityBytes: 0, // a PVC cannot ask for 0, so the requested size is ignored
		VolumeContext: volumecontext.Volume{ClusterID: r.params.ClusterID, FSName: s.fs.Name, RootPath: b.rootPath,
			Mounter: r.params.Mounter, FuseMountOptions: r.params.FuseOptions, KernelMountOptions: r.params.KernelOptions,
			Shallow: true, SnapshotName: b.snapshot}.Map(),
		ContentSource: r.req.GetVolumeContentSource(),
	}}
	if rec.Attrs[attrState] == stateReady {
		return resp, nil
	}
	faultpoint.Hit("cephfs.CreateVolume.shallow-reserved")
	if err := c.addShallowRef(ctx, s, rec, b); err != nil {
		return nil, err
	}
	faultpoint.Hit("cephfs.CreateVolume.shallow-referenced")
	// a DeleteSnapshot may have won between our check and our reference: if the snapshot is
	// gone, the reference points at nothing
	if _, err := s.admin.SubVolumeSnapshotInfo(s.fs.Name, b.group, b.subvolume, b.snapshot); err != nil {
		if isNotFound(err) {
			return nil, c.abandonShallow(ctx, s, rec, b, "its snapshot no longer exists")
		}
		return nil, ceph.Wrap("check snapshot", err)
	}
	rec.Attrs[attrState] = stateReady
	if err := journal.SetAttrs(ctx, s.journal(), journal.Volume, rec); err != nil {
		return nil, err
	}
	klog.FromContext(ctx).V(2).Info("Shallow volume ready", "name", r.req.GetName(), "snapshot", b.subvolume+"@"+b.snapshot)
	return resp, nil
}

// addShallowRef adds a shallow volume's reference to its snapshot's tracker.
func (c *Controller) addShallowRef(ctx context.Context, s site, rec *journal.Record, b backing) error {
	loc := s.journal()
	if b.csi != "" {
		// ceph-csi's own shallow volumes add both, so a first one initialises the tracker with
		// the snapshot's reference; a masked one means the CSI snapshot was deleted meanwhile
		t, err := cephcsi.TrackerAdd(ctx, loc, cephcsi.TrackerName(b.csi), b.csi, subvolumeName(rec.UID))
		if err != nil {
			return err
		}
		if t.Refs[b.csi] == cephcsi.RefMask {
			return c.abandonShallow(ctx, s, rec, b, "its snapshot is being deleted")
		}
		return nil
	}
	// a snapshot cut before trackers existed has none: the first shallow volume creates it,
	// with the snapshot's own reference too
	if _, err := reftracker.Add(ctx, loc, b.snapUID, volumeRef(rec.UID), snapshotRef); err != nil {
		if errors.Is(err, reftracker.ErrGone) {
			return c.abandonShallow(ctx, s, rec, b, "its snapshot is being deleted")
		}
		return err
	}
	return nil
}

// abandonShallow rolls a shallow create back (reference, an orphaned tracker, reservation) and
// answers NOT_FOUND.
func (c *Controller) abandonShallow(ctx context.Context, s site, rec *journal.Record, b backing, why string) error {
	loc := s.journal()
	if b.csi != "" {
		// the snapshot is gone or CSI-deleted: its own reference goes with ours, and whoever
		// leaves the tracker empty removes the snapshot
		t, err := cephcsi.TrackerRemove(ctx, loc, cephcsi.TrackerName(b.csi),
			map[string]cephcsi.RefType{subvolumeName(rec.UID): cephcsi.RefNormal, b.csi: cephcsi.RefNormal})
		if err != nil {
			return err
		}
		if !t.Exists {
			if err := c.unrefCSISnapshot(ctx, s, b.csi, subvolumeName(rec.UID)); err != nil {
				return err
			}
		}
		if err := journal.ReleaseRecord(ctx, loc, journal.Volume, rec); err != nil {
			return err
		}
		return controller.NotFoundf("cannot create shallow volume %q: %s", rec.Name, why)
	}
	if _, err := reftracker.Remove(ctx, loc, b.snapUID, volumeRef(rec.UID)); err != nil {
		return err
	}
	// with the snapshot gone, a tracker left with only the snapshot's own reference (one a
	// legacy initialisation may just have created) tracks nothing
	if _, err := reftracker.Delete(ctx, loc, b.snapUID, snapshotRef); err != nil {
		return err
	}
	if err := journal.ReleaseRecord(ctx, loc, journal.Volume, rec); err != nil {
		return err
	}
	return controller.NotFoundf("cannot create shallow volume %q: %s", rec.Name, why)
}

// deleteShallow drops the volume's reference; the last reference of an already deleted CSI
// snapshot takes the Ceph snapshot and the tracker with it.
func (c *Controller) deleteShallow(ctx context.Context, s site, rec *journal.Record, volumeID string) error {
	b := backingFromShallow(rec)
	if b.csi != "" {
		return c.unrefCSISnapshot(ctx, s, b.csi, subvolumeName(rec.UID))
	}
	st, err := reftracker.Remove(ctx, s.journal(), b.snapUID, volumeRef(rec.UID))
	if err != nil {
		return err
	}
	faultpoint.Hit("cephfs.DeleteVolume.shallow-unreferenced")
	if st.Exists && len(st.Refs) == 0 {
		return c.dropSnapshot(ctx, s, b)
	}
	klog.FromContext(ctx).V(4).Info("Shallow volume unreferenced", "volume", volumeID, "remainingReferences", len(st.Refs))
	return nil
}

// dropSnapshot removes a snapshot nothing references any more, then its tracker.
func (c *Controller) dropSnapshot(ctx context.Context, s site, b backing) error {
	if err := removeCephSnapshot(s, b.group, b.subvolume, b.snapshot); err != nil {
		return err
	}
	faultpoint.Hit("cephfs.snapshot.removed")
	_, err := reftracker.Delete(ctx, s.journal(), b.snapUID)
	return err
}

// trackSnapshot creates a new snapshot's tracker holding its own reference.
func (c *Controller) trackSnapshot(ctx context.Context, s site, rec *journal.Record) error {
	_, err := reftracker.Create(ctx, s.journal(), rec.UID, snapshotRef)
	return err
}

// releaseSnapshotRef is DeleteSnapshot's part: drop the snapshot's own reference, and remove
// the Ceph snapshot if nothing else references it. Without a tracker (a snapshot older than
// trackers, never used by a shallow volume) the snapshot is removed directly.
func (c *Controller) releaseSnapshotRef(ctx context.Context, s site, rec *journal.Record) error {
	b := backing{snapUID: rec.UID, group: rec.Attrs[attrGroup], subvolume: rec.Attrs[attrSubvolume], snapshot: snapName(rec.UID)}
	// refuse before changing anything while clones copy from it
	info, err := s.admin.SubVolumeSnapshotInfo(s.fs.Name, b.group, b.subvolume, b.snapshot)
	switch {
	case err == nil && info.HasPendingClones == "yes":
		return status.Errorf(codes.FailedPrecondition, "snapshot %s@%s has pending clones", b.subvolume, b.snapshot)
	case err != nil && !isNotFound(err):
		return ceph.Wrap("snapshot info", err)
	}
	st, err := reftracker.Get(ctx, s.journal(), b.snapUID)
	if err != nil {
		return err
	}
	if !st.Exists {
		return removeCephSnapshot(s, b.group, b.subvolume, b.snapshot)
	}
	st, err = reftracker.Remove(ctx, s.journal(), b.snapUID, snapshotRef)
	if err != nil {
		return err
	}
	faultpoint.Hit("cephfs.DeleteSnapshot.unreferenced")
	if len(st.Refs) == 0 {
		return c.dropSnapshot(ctx, s, b)
	}
	klog.FromContext(ctx).V(2).Info("Snapshot kept for shallow volumes", "snapshot", b.subvolume+"@"+b.snapshot, "references", len(st.Refs))
	return nil
}
