package rbd

import (
	"context"
	"strings"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephcsi"
	"github.com/monoceph/monoceph/internal/faultpoint"
	"github.com/monoceph/monoceph/internal/radosop"
	"github.com/monoceph/monoceph/internal/rbd/attachment"
	"github.com/monoceph/monoceph/internal/volid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// Volumes ceph-csi created: image <prefix><uuid> (csi.imagename), journal entry
// csi.volume.<uuid> in the image's pool and namespace, handle naming the pool. A PVC-PVC clone
// of ceph-csi also has an intermediate image <image>-temp between it and its source.

// transientSnapshot reports whether a user snapshot on a ceph-csi image is one a create left
// (ceph-csi's csi-snap-<uuid> point in time or <image>-temp of a PVC-PVC clone, monoceph's
// csi-clone-<UID>), or a snapshot image's own snapshot: ceph-csi keeps no other snapshots on
// its images.
func transientSnapshot(name string) bool {
	for _, p := range []string{cephcsi.Snapshots.DefaultName(""), cephcsi.Volumes.DefaultName(""), "csi-clone-"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// deleteCSIVolume removes a ceph-csi volume: its image (into the RBD trash while clones of its
// trashed snapshots need it), its -temp intermediate, trashed parents kept only for it, then
// its attachment object, then its journal entry.
func (c *Controller) deleteCSIVolume(ctx context.Context, req *csi.DeleteVolumeRequest, h volid.Handle) (*csi.DeleteVolumeResponse, error) {
	ctx, t, done, err := c.deletionTarget(ctx, "DeleteVolume", "volume_id", h, cephcsi.Volumes, req.GetSecrets())
	if err != nil {
		return nil, err
	}
	defer done()
	if t.poolGone {
		return &csi.DeleteVolumeResponse{}, nil
	}
	loc, e := t.loc, t.entry
	// without an entry ceph-csi's own delete falls back to the default name too
	name := cephcsi.Volumes.DefaultName(h.UUID)
	if e != nil {
		name = e.ImageName()
	}
	_, err = radosop.WithConn(ctx, loc, "delete image "+name, func(r *rados.Conn, io *rados.IOContext) (struct{}, error) {
		if err := deleteCSIImage(r, io, loc, name); err != nil {
			return struct{}{}, err
		}
		return struct{}{}, deleteCSIImage(r, io, loc, name+"-temp")
	})
	if err != nil {
		return nil, err
	}
	faultpoint.Hit("rbd.DeleteCephCSIVolume.image")
	// publications and node addresses of a volume the CO deleted without unpublishing; before
	// the journal entry, by which an unpublish finds them
	if err := attachment.Remove(ctx, loc, h.UUID); err != nil {
		return nil, err
	}
	if e != nil {
		if err := cephcsi.Release(ctx, loc, c.instance(), e); err != nil {
			return nil, err
		}
	}
	klog.FromContext(ctx).V(2).Info("ceph-csi volume deleted", "image", loc.String()+"/"+name)
	return &csi.DeleteVolumeResponse{}, nil
}

// csiTarget is what a delete of a ceph-csi handle works on.
type csiTarget struct {
	loc      radosop.Location
	entry    *cephcsi.Entry // nil: no journal entry (left, or never written)
	poolGone bool           // the handle's pool is gone: nothing is left to delete
}

// deletionTarget takes the operation lock of a delete of h, connects and reads h's journal
// entry. The caller defers done.
func (c *Controller) deletionTarget(ctx context.Context, op, field string, h volid.Handle, k cephcsi.Kind, secrets map[string]string) (context.Context, csiTarget, func(), error) {
	var t csiTarget
	cl, err := c.csiCluster(h.ClusterID, codes.FailedPrecondition, field)
	if err != nil {
		return ctx, t, nil, err
	}
	ctx, unlock, err := c.opts.Locks.TryLockContext(ctx, op, h.String())
	if err != nil {
		return ctx, t, nil, err
	}
	conn, err := c.Connect(ctx, cl, secrets)
	if err != nil {
		unlock()
		return ctx, t, nil, err
	}
	done := func() { conn.Release(); unlock() }
	if t.loc, err = c.csiLocation(ctx, conn, h); isNotFound(err) {
		t.poolGone = true
		return ctx, t, done, nil
	}
	if err == nil {
		t.entry, err = cephcsi.Read(ctx, t.loc, k, h.UUID)
	}
	if err != nil {
		done()
		return ctx, t, nil, err
	}
	return ctx, t, done, nil
}

// deleteCSIImage removes an image of ceph-csi's, or moves it to the RBD trash while snapshots
// in its trash namespace still back clones (their deletion purges it, see purgeTrashed). It
// also finishes what ceph-csi left: a removal in progress, an image ceph-csi moved to the trash
// for its manager task, transient snapshots of interrupted creates.
func deleteCSIImage(r *rados.Conn, io *rados.IOContext, loc radosop.Location, name string) error {
	st, err := inspect(io, name)
	if err != nil {
		return err
	}
	if !st.exists {
		if err := rbd.RemoveImage(io, name); err != nil && !isNotFound(err) && !ceph.Is(err, ceph.ErrBusy) {
			return err
		}
		if err := ensureRemoved(io, name); err != nil {
			return err
		}
		return purgeTrashed(r, &trashedImage{pool: loc.Pool, ns: loc.Namespace, name: name})
	}
	if st.watches > 0 {
		return status.Errorf(codes.FailedPrecondition, "image %s is in use: %d client(s) have it open or mapped", name, st.watches)
	}
	if err := removeTransientSnapshots(io, name, st.snaps); err != nil {
		return err
	}
	return removeOrTrash(r, io, name, st.parent)
}

// removeTransientSnapshots removes the user snapshots ceph-csi's and monoceph's creates cut on
// a ceph-csi image; one with clones moves to the trash namespace, where they keep it.
func removeTransientSnapshots(io *rados.IOContext, name string, snaps []rbd.SnapInfo) error {
	img, err := rbd.OpenImage(io, name, rbd.NoSnapshot)
	if err != nil {
		return err
	}
	defer img.Close()
	for _, s := range snaps {
		if !transientSnapshot(s.Name) {
			continue
		}
		if t, err := img.GetSnapNamespaceType(s.Id); err != nil || t != rbd.SnapNamespaceTypeUser {
			continue
		}
		if err := img.GetSnapshot(s.Name).Remove(); err != nil && !isNotFound(err) {
			return err
		}
	}
	return nil
}

// openCSIVolume resolves a ceph-csi volume handle to its location and image; missing is
// NOT_FOUND, encrypted FAILED_PRECONDITION. The caller releases loc.Conn.
func (c *Controller) openCSIVolume(ctx context.Context, h volid.Handle, secrets map[string]string) (radosop.Location, string, error) {
	what := "volume " + h.String()
	cl, err := c.csiCluster(h.ClusterID, codes.NotFound, "volume_id")
	if err != nil {
		return radosop.Location{}, "", err
	}
	conn, err := c.Connect(ctx, cl, secrets)
	if err != nil {
		return radosop.Location{}, "", err
	}
	loc, err := c.csiLocation(ctx, conn, h)
	if err == nil {
		var e *cephcsi.Entry
		if e, err = c.csiEntry(ctx, loc, cephcsi.Volumes, h, what); err == nil {
			if err = refuseEncrypted(e, what); err == nil {
				return loc, e.ImageName(), nil
			}
		}
	}
	conn.Release()
	return radosop.Location{}, "", orNotFound(err, what)
}
