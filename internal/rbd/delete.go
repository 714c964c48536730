package rbd

import (
	"context"
	"errors"
	"strings"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/faultpoint"
	"github.com/monoceph/monoceph/internal/journal"
	"github.com/monoceph/monoceph/internal/kms"
	"github.com/monoceph/monoceph/internal/radosop"
	"github.com/monoceph/monoceph/internal/rbd/attachment"
	"github.com/monoceph/monoceph/internal/rbd/rbdname"
	"github.com/monoceph/monoceph/internal/volid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// DeleteVolume removes the image, then a parent the RBD trash kept only for it, then the
// reservation. A volume that still has CSI snapshots is kept, hidden, for them (see the package
// comment). It answers OK only once nothing of the image is left: no header, no directory
// entry or id object, no trash entry of a removal in progress. Otherwise it answers an error,
// so the CO retries.
func (c *Controller) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	raw := req.GetVolumeId()
	if raw == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is missing")
	}
	vid, err := parseVolumeID(raw)
	if err != nil {
		return &csi.DeleteVolumeResponse{}, nil // a malformed ID names no volume: already deleted
	}
	if vid.CSI != nil {
		return c.deleteCSIVolume(ctx, req, *vid.CSI)
	}
	id := vid.Own
	cl, err := c.idCluster(id.ClusterID, codes.FailedPrecondition, "volume_id")
	if err != nil {
		return nil, err
	}
	ctx, unlock, err := c.opts.Locks.TryLockContext(ctx, "DeleteVolume", raw)
	if err != nil {
		return nil, err
	}
	defer unlock()
	p, gone, err := c.locate(ctx, cl, id.PoolID, id.Namespace, req.GetSecrets())
	if gone {
		return &csi.DeleteVolumeResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer p.Conn.Release()
	name := rbdname.Image(id.UID)
	rec, err := journal.Get(ctx, p, journal.Volume, id.UID)
	if err != nil {
		return nil, err
	}
	if rec != nil {
		if err := c.checkDEKRemoval(ctx, raw, rec.Attrs[attrKMSID], req.GetSecrets()); err != nil {
			return nil, err
		}
	}
	// a clone needs its parent looked up before it goes (to purge a trashed parent after)
	if err := removeVolumeImage(ctx, p, name, rec != nil && rec.Attrs[attrSource] != ""); err != nil {
		return nil, err
	}
	faultpoint.Hit("rbd.DeleteVolume.image")
	if err := c.releaseVolume(ctx, p, id, rec, raw, req.GetSecrets()); err != nil {
		return nil, err
	}
	klog.FromContext(ctx).V(2).Info("Volume deleted", "image", p.String()+"/"+name)
	return &csi.DeleteVolumeResponse{}, nil
}

// removeVolumeImage removes the image, or hides it for its CSI snapshots (deleteImage). Only a
// careful removal (a clone's) opens the image first; any other image is simply removed, and
// librbd's refusal (EBUSY: watchers, ENOTEMPTY: snapshots) selects the careful path. That
// saves opening the image in the common case.
func removeVolumeImage(ctx context.Context, p radosop.Location, name string, careful bool) error {
	_, err := radosop.WithConn(ctx, p, "delete image "+name, func(r *rados.Conn, io *rados.IOContext) (struct{}, error) {
		if !careful {
			err := rbd.RemoveImage(io, name)
			if err == nil || isNotFound(err) {
				return struct{}{}, ensureRemoved(io, name)
			}
			if !ceph.Is(err, ceph.ErrBusy) && !ceph.Is(err, ceph.ErrNotEmpty) && !inGroup(err) {
				return struct{}{}, err
			}
		}
		return struct{}{}, deleteImage(r, io, name, true)
	})
	return err
}

// releaseVolume removes what outlives a deleted volume's image, the reservation last: its
// encryption key, its attachment object, a trashed parent kept only for it. rec is nil when
// the reservation is gone already (a retry after it went): then only its leftovers go.
func (c *Controller) releaseVolume(ctx context.Context, p radosop.Location, id volid.RBDVolume, rec *journal.Record, raw string, secrets map[string]string) error {
	name := rbdname.Image(id.UID)
	// before the journal record goes: a retry finds the record, so the KMS ID, again
	if rec != nil {
		if err := c.removeDEK(ctx, p, name, raw, rec.Attrs[attrKMSID], secrets); err != nil {
			return err
		}
	}
	// publications and node addresses of a volume the CO deleted without unpublishing
	if err := attachment.Remove(ctx, p, id.UID); err != nil {
		return err
	}
	if rec == nil {
		return journal.Release(ctx, p, journal.Volume, id.UID)
	}
	// the parent's location comes from the journal, not from the clone: a retry after a
	// crash right after the clone went must still find it
	if err := c.purgeSourceParent(ctx, p, rec.Attrs[attrSource], rec.Attrs[attrOrigin]); err != nil {
		return err
	}
	return journal.ReleaseRecord(ctx, p, journal.Volume, rec)
}

// deleteImage removes a volume's image, or keeps it hidden while CSI snapshots of it exist
// (hide=true, DeleteVolume), or leaves it alone then (hide=false, after DeleteSnapshot of a
// hidden image). Images held only by clones of trashed snapshots go to the RBD trash.
func deleteImage(r *rados.Conn, io *rados.IOContext, name string, hide bool) error {
	st, err := inspect(io, name)
	if err != nil {
		return err
	}
	if !st.exists {
		// not openable by name, yet there may be remains: an image a killed client was
		// removing (in the trash, source "removing"), or a stub without a header. librbd's
		// remove by name resumes both.
		if err := rbd.RemoveImage(io, name); err != nil && !isNotFound(err) && !ceph.Is(err, ceph.ErrBusy) {
			return err
		}
		return ensureRemoved(io, name)
	}
	if st.watches > 0 {
		return status.Errorf(codes.FailedPrecondition, "image %s is in use: %d client(s) have it open or mapped", name, st.watches)
	}
	img, err := rbd.OpenImage(io, name, rbd.NoSnapshot)
	if err != nil {
		return err
	}
	// transient snapshots of interrupted PVC-PVC clones
	for _, s := range st.snaps {
		if strings.HasPrefix(s.Name, rbdname.ClonePrefix) {
			if err := img.GetSnapshot(s.Name).Remove(); err != nil && !isNotFound(err) {
				img.Close()
				return err
			}
		}
	}
	if st.kept() {
		if hide && !st.deleted {
			err = img.SetMetadata(metaDeleted, metaDeletedTrue)
		}
		img.Close()
		return err
	}
	if err := img.Close(); err != nil {
		return err
	}
	// membership is what a group snapshot killed while cutting left: the caller holds the
	// volume's lock, which every cut takes
	if err := leaveGroup(r, io, name); err != nil {
		return err
	}
	return removeOrTrash(r, io, name, st.parent)
}

// removeOrTrash removes image name (an image of either driver, already checked unused), then
// the trashed parents that only it kept.
func removeOrTrash(r *rados.Conn, io *rados.IOContext, name string, parent *rbd.ParentInfo) error {
	err := rbd.RemoveImage(io, name)
	switch {
	case err == nil || isNotFound(err):
		if err := ensureRemoved(io, name); err != nil {
			return err
		}
		return purgeTrashed(r, parentImage(parent))
	case ceph.Is(err, ceph.ErrNotEmpty):
		// snapshots in the trash namespace still back clones: the RBD trash keeps the image
		// for them, and the last clone's DeleteVolume removes it (purgeTrashed)
		return rbd.GetImage(io, name).Trash(0)
	}
	return err
}

// ensureRemoved checks that nothing of image name is left after librbd reported it removed or
// missing. A removal cut short by a killed client leaves the image in the trash under the
// source "removing" (hidden from rbd_trash_list) with the dead client's watch on it until the
// OSDs expire it (30 s); the next rbd_remove by name completes it.
func ensureRemoved(io *rados.IOContext, name string) error {
	pending, err := trashedAs(io, name, trashSourceRemoving)
	if err != nil {
		return err
	}
	if len(pending) > 0 {
		return status.Errorf(codes.Unavailable, "image %s (id %s) is still being removed: a client that was removing it died with it open, and its watch expires within 30 s; retry",
			name, pending[0].ID)
	}
	if _, err := io.Stat(idObject(name)); err == nil {
		return status.Errorf(codes.Unavailable, "image %s still has its id object after removal (a removal is running or was cut short); retry", name)
	} else if !errors.Is(err, rados.ErrNotFound) {
		return err
	}
	return nil
}

// idObject is the object mapping an RBD v2 image's name to its ID.
func idObject(name string) string { return "rbd_id." + name }

// trashedImage names an image the RBD trash may hold for clones of its trashed snapshots.
type trashedImage struct {
	pool, ns, name string
	poolID         int64 // resolved to pool when pool is empty
}

// parentImage is a clone's parent, when it sits in the trash and is one of ours or ceph-csi's
// (a volume, or a snapshot's clone image).
func parentImage(p *rbd.ParentInfo) *trashedImage {
	if p == nil || !p.Image.Trash ||
		!strings.HasPrefix(p.Image.ImageName, rbdname.VolumePrefix) && !strings.HasPrefix(p.Image.ImageName, rbdname.SnapshotPrefix) {
		return nil
	}
	return &trashedImage{pool: p.Image.PoolName, ns: p.Image.PoolNamespace, name: p.Image.ImageName}
}

// sourceImage is the image a volume was cloned from, read from its journal attributes: the
// source snapshot's image, or the source volume's; for a ceph-csi source, the image recorded
// when the clone was made.
func sourceImage(attr, origin string) *trashedImage {
	if origin != "" {
		return parseOriginAttr(origin)
	}
	kind, raw, ok := strings.Cut(attr, ":")
	if !ok {
		return nil
	}
	var v volid.RBDVolume
	switch kind {
	case "snapshot":
		s, err := volid.ParseRBDSnapshot(raw)
		if err != nil {
			return nil
		}
		v = s.RBDVolume
	case "volume":
		var err error
		if v, err = volid.ParseRBDVolume(raw); err != nil {
			return nil
		}
	default:
		return nil
	}
	return &trashedImage{poolID: v.PoolID, ns: v.Namespace, name: rbdname.Image(v.UID)}
}

// purgeSourceParent removes the image a clone came from when the RBD trash kept it only for
// clones and the last of them is gone.
func (c *Controller) purgeSourceParent(ctx context.Context, p radosop.Location, sourceAttr, originAttr string) error {
	t := sourceImage(sourceAttr, originAttr)
	if t == nil {
		return nil
	}
	_, err := ceph.Call(ctx, p.Conn, "purge trashed parent "+t.name, func(r *rados.Conn) (struct{}, error) {
		if t.pool == "" {
			pool, err := r.GetPoolByID(t.poolID)
			if isNotFound(err) {
				return struct{}{}, nil
			}
			if err != nil {
				return struct{}{}, err
			}
			t.pool = pool
		}
		return struct{}{}, purgeTrashed(r, t)
	})
	return err
}

// purgeTrashed removes t from the RBD trash where Trash(0) put it (or ceph-csi's delete, which
// trashes images and leaves their removal to a manager task), then t's own trashed parent,
// and so up the chain: a ceph-csi volume kept for a snapshot image kept for a restored clone
// goes with the clone. While other clones still need an image, librbd refuses (ENOTEMPTY:
// trashed snapshots with children; EBUSY: open), which ends the walk: the last clone's
// deletion comes back here.
func purgeTrashed(r *rados.Conn, t *trashedImage) error {
	for n := 0; t != nil && n < maxPurgeChain; n++ {
		next, err := purgeOne(r, t)
		if err != nil {
			return err
		}
		t = next
	}
	return nil
}

// maxPurgeChain bounds the walk up a chain of trashed parents.
const maxPurgeChain = 16

// purgeOne removes the trash entries of t and returns the trashed parent of what it removed.
func purgeOne(r *rados.Conn, t *trashedImage) (*trashedImage, error) {
	io, err := r.OpenIOContext(t.pool)
	if isNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer io.Destroy()
	io.SetNamespace(t.ns)
	kept, err := trashedAs(io, t.name, trashSourceUser)
	if err != nil {
		return nil, err
	}
	var next *trashedImage
	for _, e := range kept {
		parent, err := trashedParent(io, e.ID)
		if err != nil {
			return nil, err
		}
		err = rbd.TrashRemove(io, e.ID, false)
		switch {
		case err == nil:
			next = parent
		case isNotFound(err) || ceph.Is(err, ceph.ErrNotEmpty) || ceph.Is(err, ceph.ErrBusy):
		default:
			return nil, err
		}
	}
	return next, nil
}

// trashedParent is the parent of a trashed image, when that sits in the trash too.
func trashedParent(io *rados.IOContext, id string) (*trashedImage, error) {
	img, err := rbd.OpenImageByIdReadOnly(io, id, rbd.NoSnapshot)
	if isNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer img.Close()
	p, err := img.GetParent()
	if isNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return parentImage(p), nil
}

// vaultKV is the Vault of kmsID with the token of secrets when it is a KV provider (whose DEKs
// DeleteVolume removes), nil otherwise.
func (c *Controller) vaultKV(kmsID string, secrets map[string]string) (*kms.Vault, error) {
	if kmsID == "" {
		return nil, nil
	}
	if typ, err := c.opts.KMS.Provider(kmsID); err != nil || typ != kms.TypeVaultTokens {
		return nil, nil
	}
	v, err := c.opts.KMS.Vault(kmsID, secrets)
	if errors.Is(err, kms.ErrConfig) {
		return nil, kmsStatus(kmsID, err)
	}
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "the volume's DEK is in KMS %q, and the provisioner secret: %v", kmsID, err)
	}
	return v, nil
}

// checkDEKRemoval fails DeleteVolume of a volume whose DEK is in Vault's KV before anything is
// destroyed when Vault could not delete the DEK (down, or the token missing, refused or not
// allowed to): the retry, with a token that can, removes both.
func (c *Controller) checkDEKRemoval(ctx context.Context, volumeID, kmsID string, secrets map[string]string) error {
	v, err := c.vaultKV(kmsID, secrets)
	if err != nil || v == nil {
		return err
	}
	if err := v.CheckRemove(ctx, volumeID); err != nil {
		return kmsStatus(kmsID, err)
	}
	return nil
}

// removeDEK deletes the DEK a Vault KV provider keeps for the volume, once its image is gone:
// an image kept hidden for its snapshots still needs it (a restore copies it). A DEK already
// gone is no error.
func (c *Controller) removeDEK(ctx context.Context, p radosop.Location, name, volumeID, kmsID string, secrets map[string]string) error {
	if kmsID == "" {
		return nil
	}
	log := klog.FromContext(ctx)
	if _, err := c.opts.KMS.Provider(kmsID); err != nil {
		// an entry gone from the configuration cannot be reached: its keys stay (the
		// operator's to remove), the volume still goes
		log.Info("DEK left in the KMS: the KMS entry is gone from the configuration", "volumeID", volumeID, "kmsID", kmsID)
		return nil
	}
	v, err := c.vaultKV(kmsID, secrets)
	if err != nil || v == nil {
		return err
	}
	if _, err := imageEncryption(ctx, p, name); !isNotFound(err) {
		if err == nil {
			// nothing removes it when the image goes with its last snapshot
			log.Info("DEK left in the KMS: the image is kept for its snapshots", "volumeID", volumeID, "kmsID", kmsID)
		}
		return err // kept (nil), or not known to be gone
	}
	if err := v.Remove(ctx, volumeID); err != nil {
		return kmsStatus(kmsID, err)
	}
	return nil
}
